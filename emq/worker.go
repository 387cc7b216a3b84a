package emq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Handler handles one claimed job. Returning nil completes the job; an error
// sends it back for another attempt after a backoff, or to dead at once when
// errors.Is(err, ErrPermanent). A panic counts as an error.
//
// The context is cancelled when the job's lease is lost (context.Cause is
// then ErrLeaseLost: another worker may hold the job now, so the handler
// must stop) or when a draining worker stops waiting for it
// (ErrDrainTimeout: the job is released to run again). Either way the
// handler's result is ignored.
type Handler func(ctx context.Context, job Claim) error

var (
	// ErrPermanent marks a handler error that retrying cannot fix; wrap
	// errors with Permanent.
	ErrPermanent = errors.New("emq: permanent failure")
	// ErrLeaseLost is the cause of a handler's cancelled context when the
	// queue refused to renew its lease (reaped, or claimed by another worker)
	// or the lease ran out without a renewal (the server was unreachable).
	ErrLeaseLost = errors.New("emq: lease lost")
	// ErrDrainTimeout is the cause of a handler's cancelled context when the
	// worker stopped and the handler outran the drain timeout; the job is
	// released, claimable at once.
	ErrDrainTimeout = errors.New("emq: drain timeout; the job is released to run again")
	// ErrDrainIncomplete: Work returned with jobs it could not release; they
	// stay leased until their lease expires and a reaper takes them back.
	ErrDrainIncomplete = errors.New("emq: drain left jobs leased")
)

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// Permanent marks err as a failure retrying cannot fix: the job goes to dead
// at once with err's text as its last error (Queue.Bury). errors.Is still
// finds what err wraps. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// WorkerOptions configures Queue.Work; zero fields take their defaults.
type WorkerOptions struct {
	// Concurrency is how many jobs are handled at once (default 8).
	Concurrency int
	// Batch is the most jobs one claim takes (default and maximum: Concurrency).
	Batch int
	// Lease is how long a claim holds a job before another worker may take it
	// (default 30s). The heartbeat renews it every Lease/3.
	Lease time.Duration
	// Retry says when failed jobs run again (default DefaultRetryPolicy);
	// Retry.MaxAttempts is also the limit the reaper applies.
	Retry RetryPolicy
	// ReapInterval is how often expired leases are taken back (default
	// Lease/4, at most 500ms), so a dead worker's jobs are claimable within
	// Lease + ReapInterval.
	ReapInterval time.Duration
	// PromoteInterval is how often due retries move back to pending (default 250ms).
	PromoteInterval time.Duration
	// IdlePoll is the wait before claiming again after the queue was empty
	// (default 50ms); it doubles while the queue stays empty, up to 200ms or
	// IdlePoll if that is longer.
	IdlePoll time.Duration
	// DrainTimeout bounds how long Work takes to return once its context is
	// cancelled (default 10s). In-flight jobs may finish until shortly before
	// it; the handlers still running then are cancelled and their jobs released.
	DrainTimeout time.Duration
	// MetricsInterval is how often the queue's depth gauges are sampled when
	// Metrics is set (default 5s).
	MetricsInterval time.Duration
	// Logger receives the worker's structured logs (default slog.Default()).
	// Payloads are never logged.
	Logger *slog.Logger
	// Metrics receives the worker's counters and gauges; nil records none.
	Metrics *Metrics
	// OnComplete, when set, is called after the queue confirmed a job's
	// completion, on the job's goroutine (so concurrently for several jobs).
	OnComplete func(Claim)
}

const (
	defaultConcurrency     = 8
	defaultLease           = 30 * time.Second
	maxDefaultReapInterval = 500 * time.Millisecond
	defaultPromoteInterval = 250 * time.Millisecond
	defaultIdlePoll        = 50 * time.Millisecond
	idlePollCeiling        = 200 * time.Millisecond
	defaultDrainTimeout    = 10 * time.Second
	defaultMetricsInterval = 5 * time.Second

	// minLease keeps the heartbeat (Lease/3) from spinning.
	minLease = 30 * time.Millisecond

	reapBatch    = 100
	promoteBatch = 100
	// completeBatch bounds one pipelined round trip of completions.
	completeBatch = 128

	// moveTimeout bounds one call to the queue server even when the client
	// was built without timeouts: a hung call must not hold a job forever.
	moveTimeout = 5 * time.Second
	// finalMoveAttempts is how often a complete, retry, bury or release is
	// sent when the server does not answer, finalMoveBackoff the first pause
	// between sends (doubling).
	finalMoveAttempts = 4
	finalMoveBackoff  = 50 * time.Millisecond

	// A loop whose calls fail backs off from its interval up to
	// outageBackoffCeiling, and logs at most once per outageLogEvery.
	outageBackoffFloor   = 50 * time.Millisecond
	outageBackoffCeiling = 2 * time.Second
	outageLogEvery       = 10 * time.Second

	// drainReserveCeiling caps the part of the drain timeout kept for
	// cancelling the handlers that outran it and releasing their jobs.
	drainReserveCeiling = 500 * time.Millisecond
)

func (o WorkerOptions) withDefaults() WorkerOptions {
	if o.Concurrency <= 0 {
		o.Concurrency = defaultConcurrency
	}
	if o.Batch <= 0 || o.Batch > o.Concurrency {
		o.Batch = o.Concurrency
	}
	if o.Lease <= 0 {
		o.Lease = defaultLease
	}
	if o.Retry.MaxAttempts <= 0 {
		o.Retry.MaxAttempts = DefaultRetryPolicy.MaxAttempts
	}
	if o.Retry.BaseDelay <= 0 {
		o.Retry.BaseDelay = DefaultRetryPolicy.BaseDelay
	}
	if o.Retry.MaxDelay <= 0 {
		o.Retry.MaxDelay = max(DefaultRetryPolicy.MaxDelay, o.Retry.BaseDelay)
	}
	if o.ReapInterval <= 0 {
		o.ReapInterval = min(o.Lease/4, maxDefaultReapInterval)
	}
	if o.PromoteInterval <= 0 {
		o.PromoteInterval = defaultPromoteInterval
	}
	if o.IdlePoll <= 0 {
		o.IdlePoll = defaultIdlePoll
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = defaultDrainTimeout
	}
	if o.MetricsInterval <= 0 {
		o.MetricsInterval = defaultMetricsInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Work claims jobs and runs handler on each until ctx is cancelled, then
// drains: it stops claiming, lets in-flight jobs finish, and shortly before
// DrainTimeout cancels the handlers still running and releases their jobs,
// claimable at once by other workers. It returns nil once nothing is left
// leased to it, or an error wrapping ErrDrainIncomplete when some jobs could
// not be released (they come back when their lease expires).
//
// Alongside the claim loop every worker renews its leases, reaps expired
// leases and promotes due retries; all of that is safe to run from many
// workers and processes at once, because the scripts re-check every move.
// A queue server that stops answering is waited out with backoff.
func (q *Queue) Work(ctx context.Context, handler Handler, opts WorkerOptions) error {
	if handler == nil {
		return fmt.Errorf("emq: work on %s: no handler", q.name)
	}
	opts = opts.withDefaults()
	if opts.Lease < minLease {
		return fmt.Errorf("emq: work on %s: lease %s is under the minimum %s", q.name, opts.Lease, minLease)
	}
	w := &worker{
		queue:       q,
		handler:     handler,
		options:     opts,
		log:         opts.Logger.With("queue", q.name),
		slots:       make(chan struct{}, opts.Concurrency),
		running:     make(map[*runningJob]struct{}),
		completions: make(chan completionRequest, opts.Concurrency),
		stopped:     make(chan struct{}),
	}
	metrics := opts.Metrics
	if metrics == nil {
		// Unregistered collectors keep the hot path free of nil checks.
		metrics = NewMetrics(nil)
	}
	w.metrics = metrics.forQueue(q.name)
	return w.work(ctx)
}

type worker struct {
	queue   *Queue
	handler Handler
	options WorkerOptions
	log     *slog.Logger
	metrics queueMetrics

	// slots holds a token per job in flight, so at most Concurrency run.
	slots chan struct{}
	// jobs counts the job goroutines.
	jobs sync.WaitGroup
	// handlerParent is the parent of every handler context: Work's context
	// without its cancellation, because a drain lets handlers finish.
	handlerParent context.Context

	mu      sync.Mutex
	running map[*runningJob]struct{}

	completions chan completionRequest
	// stopped is closed when Work returns; the heartbeat and the completer
	// end with it.
	stopped chan struct{}
}

func (w *worker) work(ctx context.Context) error {
	w.handlerParent = context.WithoutCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(w.heartbeat)
	loops.Go(w.completeLoop)
	loops.Go(func() { w.reapLoop(ctx) })
	loops.Go(func() { w.promoteLoop(ctx) })
	if w.options.Metrics != nil {
		loops.Go(func() { w.sampleLoop(ctx) })
	}
	w.log.Info("worker started", "concurrency", w.options.Concurrency, "batch", w.options.Batch,
		"lease", w.options.Lease.String(), "max_attempts", w.options.Retry.MaxAttempts,
		"reap_interval", w.options.ReapInterval.String(), "drain_timeout", w.options.DrainTimeout.String())

	w.claimLoop(ctx)
	w.log.Info("worker draining", "in_flight", w.inFlight(), "drain_timeout", w.options.DrainTimeout.String())
	err := w.drain()
	close(w.stopped)
	loops.Wait()
	if err != nil {
		w.log.Error("worker stopped; some jobs stay leased until their lease expires", "err", err)
		return err
	}
	w.log.Info("worker stopped")
	return nil
}

// jobState is where a claimed job is in its life on this worker. Exactly one
// party moves a job out of jobRunning, and only that party may decide what
// becomes of it on the queue.
type jobState int32

const (
	// jobRunning: the handler runs and the heartbeat renews the lease.
	jobRunning jobState = iota
	// jobFinishing: the handler returned; its goroutine makes the final move.
	jobFinishing
	// jobLost: the lease was lost or ran out; nobody here may move the job.
	jobLost
	// jobStopped: the drain cancelled the handler and releases the job.
	jobStopped
)

type runningJob struct {
	claim Claim
	// claimedAt is when the claim was sent, by the local clock.
	claimedAt time.Time
	ctx       context.Context
	cancel    context.CancelCauseFunc
	state     atomic.Int32
	// deadline is the lease's end in local UnixNano: the send time of the
	// claim or last renewal plus the lease, so never later than the server's.
	deadline atomic.Int64
	// expiry cancels the handler when the deadline passes without a renewal.
	expiry *time.Timer
	// handlerReturned is closed when the handler returns, done when the job
	// has left this worker.
	handlerReturned chan struct{}
	done            chan struct{}
}

func (j *runningJob) settle(to jobState) bool {
	return j.state.CompareAndSwap(int32(jobRunning), int32(to))
}

func (j *runningJob) leaseDeadline() time.Time { return time.Unix(0, j.deadline.Load()) }

func (w *worker) jobLog(job *runningJob) *slog.Logger {
	// The token is the job's attempts count, so it doubles as the attempt number.
	return w.log.With("job", job.claim.ID, "token", job.claim.Token, "attempt", job.claim.Token)
}

func (w *worker) inFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// snapshot returns the jobs in flight whose state is one of states.
func (w *worker) snapshot(states ...jobState) []*runningJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	jobs := make([]*runningJob, 0, len(w.running))
	for job := range w.running {
		state := jobState(job.state.Load())
		for _, wanted := range states {
			if state == wanted {
				jobs = append(jobs, job)
				break
			}
		}
	}
	return jobs
}

// claimLoop claims as many jobs as there are free slots (at most Batch) and
// starts each, until ctx is cancelled.
func (w *worker) claimLoop(ctx context.Context) {
	idle := w.options.IdlePoll
	idleCeiling := max(w.options.IdlePoll, idlePollCeiling)
	trouble := outage{loop: "claim"}
	for {
		free, ok := w.acquireSlots(ctx)
		if !ok {
			return
		}
		sentAt := time.Now()
		claims, err := w.claim(ctx, free)
		for range free - len(claims) {
			<-w.slots
		}
		var wait time.Duration
		switch {
		case err != nil:
			trouble.fail(w.log, err)
			wait = trouble.backoff(w.options.IdlePoll)
		case len(claims) == 0:
			trouble.recover(w.log)
			wait, idle = idle, min(idle*2, idleCeiling)
		default:
			trouble.recover(w.log)
			idle = w.options.IdlePoll
			w.metrics.claimed.Add(float64(len(claims)))
			deadlines := w.leaseDeadlines(claims, sentAt)
			// Jobs claimed while ctx was being cancelled run too: the drain
			// lets them finish like any other in-flight job.
			for i, claim := range claims {
				if deadlines[i].IsZero() {
					<-w.slots
					continue
				}
				w.start(claim, sentAt, deadlines[i])
			}
		}
		if wait > 0 && !sleep(ctx, wait) {
			return
		}
	}
}

// acquireSlots waits for one free slot, then takes whatever more are free, up
// to Batch. It returns false when ctx is cancelled.
func (w *worker) acquireSlots(ctx context.Context) (int, bool) {
	select {
	case w.slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	if ctx.Err() != nil {
		<-w.slots
		return 0, false
	}
	taken := 1
	for taken < w.options.Batch {
		select {
		case w.slots <- struct{}{}:
			taken++
		default:
			return taken, true
		}
	}
	return taken, true
}

// slowClaim is how long a claim's round trip may take before its leases are
// renewed at once: the local lease deadline counts from the claim's send
// time, so a claim held up (a server coming back from an outage answers
// late) would otherwise start its jobs with little or none of their lease.
func (w *worker) slowClaim() time.Duration { return w.options.Lease / 4 }

// leaseDeadlines returns, per claim, the local deadline of its lease: the
// claim's send time plus the lease, or, after a slow claim, the send time of
// an immediate renewal plus the lease. A zero deadline marks a claim whose
// lease was already lost; it must not run.
func (w *worker) leaseDeadlines(claims []Claim, sentAt time.Time) []time.Time {
	deadlines := make([]time.Time, len(claims))
	for i := range deadlines {
		deadlines[i] = sentAt.Add(w.options.Lease)
	}
	if time.Since(sentAt) <= w.slowClaim() {
		return deadlines
	}
	leases := make([]Completion, len(claims))
	for i, claim := range claims {
		leases[i] = Completion{ID: claim.ID, Token: claim.Token}
	}
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	renewedAt := time.Now()
	for i, err := range w.queue.extendLeases(ctx, leases, w.options.Lease) {
		switch {
		case err == nil:
			deadlines[i] = renewedAt.Add(w.options.Lease)
		case isRefusal(err):
			deadlines[i] = time.Time{}
			w.log.Warn("lease lost before the job started: the claim answered too late", "job", claims[i].ID,
				"token", claims[i].Token, "claim_took", time.Since(sentAt).String(), "err", err)
			if errors.Is(err, ErrStale) {
				w.metrics.staleRefusals.Inc()
			}
		}
		// After any other failure the job keeps the claim's deadline: the
		// heartbeat may yet renew it, or the expiry cancels it.
	}
	return deadlines
}

// claim is not cancelled with ctx: a claim cut off after the server ran it
// would leave its jobs leased to nobody until the lease expires.
func (w *worker) claim(ctx context.Context, n int) ([]Claim, error) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	return w.queue.Claim(callCtx, n, w.options.Lease)
}

func (w *worker) start(claim Claim, claimedAt, deadline time.Time) {
	job := &runningJob{claim: claim, claimedAt: claimedAt, handlerReturned: make(chan struct{}), done: make(chan struct{})}
	job.ctx, job.cancel = context.WithCancelCause(w.handlerParent)
	job.deadline.Store(deadline.UnixNano())
	job.expiry = time.AfterFunc(time.Until(deadline), func() {
		w.loseLease(job, fmt.Errorf("%w: the lease ran out without a renewal", ErrLeaseLost))
	})
	w.mu.Lock()
	w.running[job] = struct{}{}
	w.mu.Unlock()
	w.jobs.Add(1)
	go w.runJob(job)
}

func (w *worker) runJob(job *runningJob) {
	defer w.jobDone(job)
	err := w.callHandler(job)
	close(job.handlerReturned)
	if !job.settle(jobFinishing) {
		// Lost or stopped: the job is another's, or the drain releases it.
		return
	}
	switch {
	case err == nil:
		w.complete(job)
	case errors.Is(err, ErrPermanent):
		w.bury(job, err)
	default:
		w.retry(job, err)
	}
}

func (w *worker) jobDone(job *runningJob) {
	job.expiry.Stop()
	job.cancel(nil)
	w.mu.Lock()
	delete(w.running, job)
	w.mu.Unlock()
	<-w.slots
	close(job.done)
	w.jobs.Done()
}

func (w *worker) callHandler(job *runningJob) (err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			w.jobLog(job).Error("handler panicked", "panic", fmt.Sprint(recovered), "stack", string(debug.Stack()))
			err = fmt.Errorf("emq: handler panicked: %v", recovered)
		}
	}()
	return w.handler(job.ctx, job.claim)
}

// loseLease cancels a running job's handler for good: the queue no longer
// holds the job for this worker, so nothing here may finish it.
func (w *worker) loseLease(job *runningJob, cause error) {
	if !job.settle(jobLost) {
		return
	}
	job.cancel(cause)
	if errors.Is(cause, ErrStale) {
		w.metrics.staleRefusals.Inc()
	}
	w.jobLog(job).Warn("lease lost; the handler is cancelled and its result will be dropped", "cause", cause.Error())
}

// complete sends the completion through the completer, which pipelines the
// completions of all jobs finishing at the same time into one round trip.
func (w *worker) complete(job *runningJob) {
	err := w.persist(context.Background(), job, job.leaseDeadline(), func(ctx context.Context) error {
		err := w.submitCompletion(ctx, job)
		if errors.Is(err, ErrStale) && w.completedWithToken(ctx, job) {
			// An earlier send ran but its answer was lost: the finished
			// record shows this very lease completed the job.
			return nil
		}
		return err
	})
	switch {
	case err == nil:
		w.metrics.completed.Inc()
		w.metrics.claimToComplete.Observe(time.Since(job.claimedAt).Seconds())
		if w.log.Enabled(context.Background(), slog.LevelDebug) {
			w.jobLog(job).Debug("job completed", "took", time.Since(job.claimedAt).String())
		}
		if w.options.OnComplete != nil {
			w.options.OnComplete(job.claim)
		}
	case isRefusal(err):
		w.refused(job, "complete", err)
	default:
		w.jobLog(job).Error("complete failed; the lease will expire and the job will run again", "err", err)
	}
}

func (w *worker) completedWithToken(ctx context.Context, job *runningJob) bool {
	info, err := w.queue.Job(ctx, job.claim.ID)
	return err == nil && info.State == StateDone && info.Attempts == job.claim.Token
}

func (w *worker) retry(job *runningJob, cause error) {
	var outcome Retried
	err := w.persist(context.Background(), job, job.leaseDeadline(), func(ctx context.Context) error {
		var err error
		outcome, err = w.queue.Retry(ctx, job.claim.ID, job.claim.Token, cause, w.options.Retry)
		return err
	})
	switch {
	case err == nil && outcome.Dead:
		w.metrics.dead.Inc()
		w.jobLog(job).Warn("job failed on its last attempt; it is dead", "err", cause.Error())
	case err == nil:
		w.metrics.retried.Inc()
		w.jobLog(job).Info("job failed; it runs again after a backoff", "err", cause.Error(), "due", outcome.At)
	case isRefusal(err):
		w.refused(job, "retry", err)
	default:
		w.jobLog(job).Error("retry failed; the lease will expire and the job will run again", "err", err, "cause", cause.Error())
	}
}

func (w *worker) bury(job *runningJob, cause error) {
	err := w.persist(context.Background(), job, job.leaseDeadline(), func(ctx context.Context) error {
		return w.queue.Bury(ctx, job.claim.ID, job.claim.Token, cause)
	})
	switch {
	case err == nil:
		w.metrics.dead.Inc()
		w.jobLog(job).Warn("job failed permanently; it is dead", "err", cause.Error())
	case isRefusal(err):
		w.refused(job, "bury", err)
	default:
		w.jobLog(job).Error("bury failed; the lease will expire and the job will run again", "err", err, "cause", cause.Error())
	}
}

func (w *worker) refused(job *runningJob, move string, err error) {
	if errors.Is(err, ErrStale) {
		w.metrics.staleRefusals.Inc()
	}
	w.jobLog(job).Warn("the queue refused the move: the lease passed to another worker", "move", move, "err", err)
}

// isRefusal tells a script's refusal, which sending again cannot change, from
// a failure to reach the server.
func isRefusal(err error) bool {
	var refusal *ScriptError
	return errors.As(err, &refusal)
}

// persist runs a job's final move and sends it again when the server did not
// answer, while retryUntil (the lease's end) is ahead: after it the move
// would be refused anyway, and the reaper hands the job to another worker.
func (w *worker) persist(parent context.Context, job *runningJob, retryUntil time.Time, move func(context.Context) error) error {
	pause := finalMoveBackoff
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(parent, moveTimeout)
		err := move(ctx)
		cancel()
		if err == nil || isRefusal(err) || errors.Is(err, errWorkerStopped) || attempt == finalMoveAttempts ||
			parent.Err() != nil || time.Now().Add(pause).After(retryUntil) {
			return err
		}
		w.jobLog(job).Warn("queue server did not answer a move; sending it again", "err", err, "send", attempt, "pause", pause.String())
		time.Sleep(pause)
		pause *= 2
	}
}

type completionRequest struct {
	job   *runningJob
	reply chan error
}

var errWorkerStopped = errors.New("emq: worker stopped before the move was sent")

func (w *worker) submitCompletion(ctx context.Context, job *runningJob) error {
	request := completionRequest{job: job, reply: make(chan error, 1)}
	select {
	case w.completions <- request:
	case <-w.stopped:
		return errWorkerStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-request.reply:
		return err
	case <-w.stopped:
		return errWorkerStopped
	}
}

// completeLoop sends the waiting completions in one pipelined round trip,
// takes the next ones that queued meanwhile, and so on: under load it
// batches by itself, and an idle worker's single completion goes at once.
func (w *worker) completeLoop() {
	batch := make([]completionRequest, 0, completeBatch)
	completions := make([]Completion, 0, completeBatch)
	for {
		batch = batch[:0]
		select {
		case <-w.stopped:
			return
		case request := <-w.completions:
			batch = append(batch, request)
		}
	gather:
		for len(batch) < completeBatch {
			select {
			case request := <-w.completions:
				batch = append(batch, request)
			default:
				break gather
			}
		}
		completions = completions[:0]
		for _, request := range batch {
			completions = append(completions, Completion{ID: request.job.claim.ID, Token: request.job.claim.Token})
		}
		ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
		errs := w.queue.CompleteMany(ctx, completions)
		cancel()
		for i, request := range batch {
			request.reply <- errs[i]
		}
	}
}

// heartbeat renews every lease in flight every Lease/3, all in one
// pipelined round trip.
func (w *worker) heartbeat() {
	interval := w.options.Lease / 3
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	trouble := outage{loop: "heartbeat"}
	for {
		select {
		case <-w.stopped:
			return
		case <-ticker.C:
		}
		w.renewLeases(interval, &trouble)
	}
}

func (w *worker) renewLeases(budget time.Duration, trouble *outage) {
	// A finishing job keeps its lease renewed until its final move is made.
	jobs := w.snapshot(jobRunning, jobFinishing)
	if len(jobs) == 0 {
		return
	}
	leases := make([]Completion, len(jobs))
	for i, job := range jobs {
		leases[i] = Completion{ID: job.claim.ID, Token: job.claim.Token}
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	sentAt := time.Now()
	errs := w.queue.extendLeases(ctx, leases, w.options.Lease)
	var failure error
	for i, job := range jobs {
		switch err := errs[i]; {
		case err == nil:
			deadline := sentAt.Add(w.options.Lease)
			job.deadline.Store(deadline.UnixNano())
			if jobState(job.state.Load()) != jobLost {
				job.expiry.Reset(time.Until(deadline))
			}
		case isRefusal(err):
			w.loseLease(job, fmt.Errorf("%w: %w", ErrLeaseLost, err))
		default:
			failure = err
		}
	}
	if failure != nil {
		// The expiry timers cancel the handlers if renewals keep failing.
		trouble.fail(w.log, failure)
		return
	}
	trouble.recover(w.log)
}

// extendLeases renews many leases in one round trip; each is renewed or
// refused on its own, exactly as by Extend. Errors are in order.
func (q *Queue) extendLeases(ctx context.Context, leases []Completion, lease time.Duration) []error {
	calls := make([]scriptCall, len(leases))
	for i, held := range leases {
		calls[i] = scriptCall{
			keys: []string{q.jobsKey(), q.activeKey()},
			args: []any{held.ID, held.Token, lease.Milliseconds()},
		}
	}
	cmds, err := runPipelined(ctx, q.client.rdb, extendScript, calls)
	errs := make([]error, len(leases))
	for i, held := range leases {
		if err == nil {
			err := cmds[i].Err()
			if err != nil {
				errs[i] = fmt.Errorf("emq: extend %s on %s: %w", held.ID, q.name, scriptError(err))
			}
			continue
		}
		errs[i] = err
	}
	return errs
}

// drain waits for the jobs in flight. Shortly before the drain timeout it
// cancels the handlers still running, gives them a moment to return, and
// releases their jobs, so Work returns within DrainTimeout.
func (w *worker) drain() error {
	drainDeadline := time.Now().Add(w.options.DrainTimeout)
	reserve := min(w.options.DrainTimeout/10, drainReserveCeiling)
	allDone := make(chan struct{})
	go func() {
		w.jobs.Wait()
		close(allDone)
	}()
	patience := time.NewTimer(w.options.DrainTimeout - reserve)
	defer patience.Stop()
	select {
	case <-allDone:
		return nil
	case <-patience.C:
	}

	var stopped []*runningJob
	for _, job := range w.snapshot(jobRunning) {
		if job.settle(jobStopped) {
			job.cancel(ErrDrainTimeout)
			stopped = append(stopped, job)
		}
	}
	w.log.Warn("drain timeout: cancelling the handlers still running and releasing their jobs", "jobs", len(stopped))
	// Releasing a job only once its handler returned keeps two runs of it
	// from overlapping, unless a handler ignores its context.
	graceCtx, cancelGrace := context.WithTimeout(context.Background(), reserve/2)
	for _, job := range stopped {
		select {
		case <-job.handlerReturned:
		case <-graceCtx.Done():
		}
	}
	cancelGrace()

	releaseCtx, cancelRelease := context.WithDeadline(context.Background(), drainDeadline)
	defer cancelRelease()
	var unreleased atomic.Int32
	var releases sync.WaitGroup
	for _, job := range stopped {
		releases.Go(func() {
			if !w.release(releaseCtx, job, drainDeadline) {
				unreleased.Add(1)
			}
		})
	}
	releases.Wait()
	// Jobs whose final move was under way when the timeout came get what is
	// left of it; handlers that ignore their cancelled context are not waited for.
	for _, job := range w.snapshot(jobFinishing) {
		select {
		case <-job.done:
		case <-releaseCtx.Done():
		}
	}
	if n := unreleased.Load(); n > 0 {
		return fmt.Errorf("emq: drain of %s: %d job(s) could not be released: %w", w.queue.name, n, ErrDrainIncomplete)
	}
	return nil
}

// release hands a stopped job back; false when it stays leased to this worker.
func (w *worker) release(ctx context.Context, job *runningJob, retryUntil time.Time) bool {
	err := w.persist(ctx, job, retryUntil, func(ctx context.Context) error {
		return w.queue.Release(ctx, job.claim.ID, job.claim.Token)
	})
	switch {
	case err == nil:
		w.jobLog(job).Info("job released: claimable at once by another worker")
		return true
	case isRefusal(err):
		// The lease had passed on already: nothing is left leased to us.
		w.refused(job, "release", err)
		return true
	default:
		w.jobLog(job).Error("release failed; the job stays leased until its lease expires", "err", err)
		return false
	}
}

// reapLoop takes back expired leases, at once on start (a restarted worker
// picks up what its previous life left) and every ReapInterval.
func (w *worker) reapLoop(ctx context.Context) {
	trouble := outage{loop: "reaper"}
	for wait := time.Duration(0); sleep(ctx, wait); {
		wait = jittered(w.options.ReapInterval)
		if err := w.reapExpired(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.fail(w.log, err)
			wait = trouble.backoff(w.options.ReapInterval)
			continue
		}
		trouble.recover(w.log)
	}
}

func (w *worker) reapExpired(ctx context.Context) error {
	for {
		reaped, err := w.queue.Reap(ctx, w.options.Retry.MaxAttempts, reapBatch)
		if err != nil {
			return err
		}
		if reaped.Requeued+reaped.Dead == 0 {
			return nil
		}
		w.metrics.reaped.Add(float64(reaped.Requeued + reaped.Dead))
		w.metrics.dead.Add(float64(reaped.Dead))
		w.log.Info("took back jobs whose lease expired", "requeued", reaped.Requeued, "dead", reaped.Dead)
	}
}

func (w *worker) promoteLoop(ctx context.Context) {
	trouble := outage{loop: "promoter"}
	for wait := time.Duration(0); sleep(ctx, wait); {
		wait = jittered(w.options.PromoteInterval)
		if err := w.promoteDue(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.fail(w.log, err)
			wait = trouble.backoff(w.options.PromoteInterval)
			continue
		}
		trouble.recover(w.log)
	}
}

func (w *worker) promoteDue(ctx context.Context) error {
	for {
		promoted, err := w.queue.Promote(ctx, promoteBatch)
		if err != nil {
			return err
		}
		if promoted > 0 {
			w.log.Debug("promoted due retries", "jobs", promoted)
		}
		// A short batch means nothing else is due now.
		if promoted < promoteBatch {
			return nil
		}
	}
}

func (w *worker) sampleLoop(ctx context.Context) {
	trouble := outage{loop: "metrics"}
	for wait := time.Duration(0); sleep(ctx, wait); {
		wait = w.options.MetricsInterval
		depths, err := w.queue.depths(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.fail(w.log, err)
			continue
		}
		trouble.recover(w.log)
		w.metrics.pending.Set(float64(depths.pending))
		w.metrics.active.Set(float64(depths.active))
		w.metrics.delayed.Set(float64(depths.delayed))
		w.metrics.deadJobs.Set(float64(depths.dead))
		w.metrics.lanes.Set(float64(depths.lanes))
		w.metrics.laneDepthMax.Set(float64(depths.deepestLane))
	}
}

type queueDepths struct {
	pending, active, delayed, dead int64
	lanes, deepestLane             int64
}

// depths reads the queue's gauges in one round trip of counts; unlike Stats
// it does not look for the oldest pending job, which reads every lane.
func (q *Queue) depths(ctx context.Context) (queueDepths, error) {
	pipe := q.client.rdb.Pipeline()
	active := pipe.ZCard(ctx, q.activeKey())
	delayed := pipe.ZCard(ctx, q.delayedKey())
	dead := pipe.ZCard(ctx, q.deadKey())
	lanes := pipe.HVals(ctx, q.lanesKey())
	if _, err := pipe.Exec(ctx); err != nil {
		return queueDepths{}, fmt.Errorf("emq: depths of %s: %w", q.name, err)
	}
	depths := queueDepths{active: active.Val(), delayed: delayed.Val(), dead: dead.Val()}
	for _, text := range lanes.Val() {
		depth, err := strconv.ParseInt(text, 10, 64)
		if err != nil || depth <= 0 {
			continue
		}
		depths.pending += depth
		depths.lanes++
		depths.deepestLane = max(depths.deepestLane, depth)
	}
	return depths, nil
}

// outage follows one loop's run of failed calls to the queue server: it
// rate-limits the loop's logs and grows its pause, so a Redis restart neither
// floods the logs nor meets a stampede when it comes back.
type outage struct {
	loop     string
	failures int
	since    time.Time
	logged   time.Time
}

func (o *outage) fail(log *slog.Logger, err error) {
	now := time.Now()
	if o.failures == 0 {
		o.since = now
	}
	o.failures++
	if o.failures == 1 || now.Sub(o.logged) >= outageLogEvery {
		o.logged = now
		log.Warn("queue server call failed; backing off", "loop", o.loop, "err", err,
			"failures", o.failures, "failing_for", now.Sub(o.since).Round(time.Millisecond).String())
	}
}

func (o *outage) recover(log *slog.Logger) {
	if o.failures == 0 {
		return
	}
	log.Info("queue server answers again", "loop", o.loop, "failures", o.failures,
		"outage", time.Since(o.since).Round(time.Millisecond).String())
	o.failures = 0
}

// backoff doubles the pause from the loop's interval with every failure, up
// to outageBackoffCeiling.
func (o *outage) backoff(interval time.Duration) time.Duration {
	pause := min(max(interval, outageBackoffFloor), outageBackoffCeiling)
	for i := 1; i < o.failures && pause < outageBackoffCeiling; i++ {
		pause *= 2
	}
	return jittered(min(pause, outageBackoffCeiling))
}

// jittered spreads d by ±10% so the loops of many workers do not fall into step.
func jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// sleep waits d or until ctx is cancelled; false when ctx was cancelled.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
