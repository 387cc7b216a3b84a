package emq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	// IdlePoll if that is longer. A job this worker's client admitted,
	// promoted or reaped ends the wait at once; one made pending otherwise
	// (by another process, or by Release or Requeue) waits the poll at
	// most. An idle queue's worker runs its reaper and promoter as its
	// claims say they have work, and otherwise once every poll at most: a
	// retry or a lease another worker left may so be found a poll late.
	IdlePoll time.Duration
	// WakeOnAdmission has the worker, once a claim found the queue empty,
	// wait for the next admission (BLPOP on the queue's wake token) instead
	// of sleeping the idle poll, so an admitted job is claimed at once. The
	// wait holds a connection of the client's pool for up to the poll: turn
	// it on for the few queues whose latency matters (an instrument's
	// orders), not for many queues of one client, whose waits would take
	// the pool from every other call.
	WakeOnAdmission bool
	// DrainTimeout bounds how long Work takes to return once its context is
	// cancelled (default 10s). In-flight jobs may finish until shortly before
	// it; the handlers still running then are cancelled and their jobs released.
	// A host too loaded to wake the drain in time makes Work return that much
	// later rather than leave the jobs leased.
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

	// moveTimeout bounds one call to the queue server even when the client
	// was built without timeouts: a hung call must not hold a job forever.
	moveTimeout = 5 * time.Second
)

// idleCeiling is the longest the claim loop sleeps while its queue stays
// empty.
func (o WorkerOptions) idleCeiling() time.Duration { return max(o.IdlePoll, idlePollCeiling) }

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
		logger:      opts.Logger.With("queue", q.name),
		slots:       make(chan struct{}, opts.Concurrency),
		running:     make(map[*runningJob]struct{}),
		completions: make(chan completionRequest, opts.Concurrency),
		reapDue:     newDueSignal(opts.ReapInterval, opts.idleCeiling()),
		promoteDue:  newDueSignal(opts.PromoteInterval, opts.idleCeiling()),
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
	logger  *slog.Logger
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
	// reapDue and promoteDue carry what the claims saw to the maintenance
	// loops (maintenance.go).
	reapDue, promoteDue *dueSignal
	// waiting is the claim loop's wait on the wake token that a local wake
	// cut short and that still runs (awaitAdmission): the next wait waits
	// on it rather than queue a second one behind it, which a token would
	// then pass by. Only the claim loop touches it.
	waiting <-chan wake
	// stopped is closed when Work returns; the heartbeat and the completer
	// end with it.
	stopped chan struct{}
}

// work runs the worker's loops, one file each: the claim loop (claim.go),
// the lease heartbeat (heartbeat.go), the completer and the other final
// moves (finish.go), reaping, promoting and sampling (maintenance.go), and,
// once ctx is cancelled, the drain (drain.go). outage.go holds how a loop
// waits out a queue server that stopped answering.
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
	w.logger.Info("worker started", "concurrency", w.options.Concurrency, "batch", w.options.Batch,
		"lease", w.options.Lease.String(), "max_attempts", w.options.Retry.MaxAttempts,
		"reap_interval", w.options.ReapInterval.String(), "drain_timeout", w.options.DrainTimeout.String())

	w.claimLoop(ctx)
	w.logger.Info("worker draining", "in_flight", w.inFlight(), "drain_timeout", w.options.DrainTimeout.String())
	err := w.drain()
	close(w.stopped)
	loops.Wait()
	if err != nil {
		w.logger.Error("worker stopped; some jobs stay leased until their lease expires", "err", err)
		return err
	}
	w.logger.Info("worker stopped")
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
	return w.logger.With("job", job.claim.ID, "token", job.claim.Token, "attempt", job.claim.Token)
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
