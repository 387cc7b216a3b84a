package emq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/outage"
)

// claimLoop claims as many jobs as there are free slots (at most Batch) and
// starts each, until ctx is cancelled.
func (w *worker) claimLoop(ctx context.Context) {
	idle := w.options.IdlePoll
	idleCeiling := w.options.idleCeiling()
	trouble := outage.Tracker{Loop: "claim"}
	// hints are the groups the last wake named (a wake token's, or the
	// local wake's): their lanes, named in the next claim, are likely those
	// the rotation moved to.
	var hints []string
	for {
		free, ok := w.acquireSlots(ctx)
		if !ok {
			return
		}
		// Taken before the claim: a job made pending after it ends the wait.
		pending := w.queue.client.pending.wake(w.queue.name)
		sentAt := time.Now()
		claims, due, err := w.claim(ctx, free, hints)
		hints = nil
		if due.seen {
			w.reapDue.note(due.reap, due.reapIn, sentAt)
			w.promoteDue.note(due.promote, due.promoteIn, sentAt)
		}
		for range free - len(claims) {
			<-w.slots
		}
		var wait time.Duration
		idleQueue := false
		switch {
		case err != nil:
			trouble.Fail(w.logger, err)
			wait = trouble.Backoff(w.options.IdlePoll)
		case len(claims) == 0 && (due.reap || due.promote):
			// Jobs turn pending as the kicked loops move them, with no
			// admission to wake a wait: claim again after the shortest poll,
			// but an admission meanwhile still ends the wait.
			trouble.Recover(w.logger)
			wait, idle = w.options.IdlePoll, w.options.IdlePoll
			idleQueue = w.options.WakeOnAdmission
		case len(claims) == 0:
			trouble.Recover(w.logger)
			wait, idle = idle, min(idle*2, idleCeiling)
			idleQueue = w.options.WakeOnAdmission
		default:
			trouble.Recover(w.logger)
			idle = w.options.IdlePoll
			if len(claims) < free {
				// The claim ran the queue empty (and, for a wait, dropped its
				// wake token): claiming again at once would find nothing, as
				// every job that drained a queue used to, one empty claim each.
				// Wait the shortest poll, or for the next admission.
				wait, idle = idle, min(idle*2, idleCeiling)
				// A wait, even when the kicked loops will make jobs pending:
				// it lasts no longer than the sleep, and an admission ends it.
				idleQueue = w.options.WakeOnAdmission
			}
			w.metrics.claimed.Add(float64(len(claims)))
			w.observeWaits(claims)
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
		if idleQueue {
			group, ok := w.awaitAdmission(ctx, wait, pending.done)
			if !ok {
				return
			}
			if group != "" {
				hints = append(hints, group)
			}
		} else if err != nil {
			// Backing off: an admission does not cut it short.
			if !outage.Sleep(ctx, wait) {
				return
			}
		} else if wait > 0 && !sleepUnless(ctx, wait, pending.done) {
			return
		}
		hints = append(hints, pending.woken()...)
	}
}

// observeWaits observes how long the claims' jobs waited pending, those
// claimed for the first time: a retried or reaped job's admission is not
// when its latest wait began. The claim ran at its deadline less the lease.
func (w *worker) observeWaits(claims []Claim) {
	for _, claim := range claims {
		if claim.Token == 1 && claim.admitted.UnixMilli() > 0 {
			w.metrics.claimWait.Observe(max(claim.Deadline.Sub(claim.admitted)-w.options.Lease, 0).Seconds())
		}
	}
}

// awaitAdmission waits up to d for an admission to the queue, which the
// claim that found it empty armed (claim.lua, admit.lua): a job admitted to
// an idle queue is claimed at once rather than after the rest of the idle
// poll (WorkerOptions.WakeOnAdmission). Jobs that become pending otherwise
// (a retry's delay ending, a reaped lease) are found by the poll. It
// returns the group the wake token named ("" when none came), and false
// when ctx is cancelled.
func (w *worker) awaitAdmission(ctx context.Context, d time.Duration, pending <-chan struct{}) (string, bool) {
	if d <= 0 {
		return "", ctx.Err() == nil
	}
	// The reply must come within the client's read timeout, or the
	// connection is dropped as broken: a shorter wait polls sooner, and a
	// read timeout too short for Redis's late end of a wait (wakeSlack)
	// sleeps the poll instead.
	wait := d
	if readTimeout := w.queue.client.readTimeout(); readTimeout > 0 {
		wait = min(wait, readTimeout/2, readTimeout-wakeSlack)
	}
	if wait <= 0 {
		return "", sleepUnless(ctx, d, pending)
	}
	d = wait
	start := time.Now()
	waited := w.waiting
	w.waiting = nil
	// A wait carried over may outlast d: it is waited on for d at most.
	var poll <-chan time.Time
	if waited != nil {
		timer := time.NewTimer(d)
		defer timer.Stop()
		poll = timer.C
	} else {
		var ok bool
		if waited, ok = w.startWait(ctx, d); !ok {
			return "", sleepUnless(ctx, d, pending)
		}
	}
	select {
	case <-ctx.Done():
		return "", false
	case <-poll:
		w.waiting = waited
	case <-pending:
		// This client made a job pending: claim it now. The wait goes on
		// (Redis ends it within d, or a token does); the next wait is that
		// one, so a token pushed meanwhile is not handed to a wait no one
		// reads.
		w.waiting = waited
	case woke := <-waited:
		if woke.err != nil && !errors.Is(woke.err, redis.Nil) {
			// The server is away or the call failed: the claim that follows
			// reports it; wait out the poll meanwhile.
			return "", sleepUnless(ctx, d-time.Since(start), pending)
		}
		return woke.group, ctx.Err() == nil
	}
	return "", ctx.Err() == nil
}

// wake is how a wait on the wake token ended: the group the token named
// (admit.lua) when one came, redis.Nil when the wait timed out.
type wake struct {
	group string
	err   error
}

// startWait starts a wait of up to d on the queue's wake token, on a
// connection of the pool; false when the waits hold their share of the
// pool already (wakeWaits).
func (w *worker) startWait(ctx context.Context, d time.Duration) (<-chan wake, bool) {
	select {
	case w.queue.client.waits <- struct{}{}:
	default:
		return nil, false
	}
	// BLPOP takes its timeout in seconds, fractions allowed (Redis 6 and
	// Valkey); go-redis's BLPop rounds anything under a second up to one.
	// Whole milliseconds, rounded up: a timeout that rounds to 0 blocks
	// until an admission.
	timeout := strconv.FormatFloat(math.Ceil(float64(d)/float64(time.Millisecond))/1000, 'f', 3, 64)
	// go-redis does not interrupt a blocked read when ctx is cancelled: the
	// wait runs on its own, and a cancelled worker goes on to its drain
	// while the wait ends within d, giving its connection back.
	waited := make(chan wake, 1)
	go func() {
		defer func() { <-w.queue.client.waits }()
		// The reply is the key and the token.
		reply, err := w.queue.client.rdb.Do(context.WithoutCancel(ctx), "blpop", w.queue.wakeKey(), timeout).StringSlice()
		woke := wake{err: err}
		if err == nil && len(reply) == 2 {
			woke.group = reply[1]
		}
		waited <- woke
	}()
	return waited, true
}

// sleepUnless sleeps d, or until pending is closed; it returns false when
// ctx is cancelled.
func sleepUnless(ctx context.Context, d time.Duration, pending <-chan struct{}) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-pending:
	case <-timer.C:
	}
	return ctx.Err() == nil
}

// wakeSlack is how late Redis may end a BLPOP past its timeout: it ends
// timed-out waits at its next tick, 100 ms apart at the default hz 10
// (measured: 100 ms for a timeout of 1-50 ms, up to 320 ms for 200 ms).
const wakeSlack = 300 * time.Millisecond

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
			w.logger.Warn("lease lost before the job started: the claim answered too late", "job", claims[i].ID,
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
//
// hints are groups whose lanes the claim names beside the rotation's heads
// the last claim listed: a wake's (see Queue.claim).
func (w *worker) claim(ctx context.Context, n int, hints []string) ([]Claim, dueMoves, error) {
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	return w.queue.claim(callCtx, n, w.options.Lease, hints)
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
