package emq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// The part of the drain timeout kept for cancelling the handlers that
// outran it and releasing their jobs is a tenth of it, within these bounds,
// and at most half of it. A release is a round trip, whose time does not
// shrink with the timeout: a 1 s timeout's tenth left it 50 ms, which
// a loaded host overran (the first release on a server is EVALSHA,
// NOSCRIPT, then EVAL).
const (
	drainReserveFloor   = 300 * time.Millisecond
	drainReserveCeiling = 500 * time.Millisecond
)

// drain waits for the jobs in flight. Shortly before the drain timeout it
// cancels the handlers still running, gives them a moment to return, and
// releases their jobs, so Work returns within DrainTimeout, or as late as a
// loaded host woke it past its reserve.
func (w *worker) drain() error {
	drainDeadline := time.Now().Add(w.options.DrainTimeout)
	reserve := min(max(w.options.DrainTimeout/10, drainReserveFloor), drainReserveCeiling, w.options.DrainTimeout/2)
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
	w.logger.Warn("drain timeout: cancelling the handlers still running and releasing their jobs", "jobs", len(stopped))
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

	// A loaded host may wake the drain past its reserve. Counted from
	// drainDeadline alone, the release would then get no time, not be sent,
	// and leave the jobs leased for a whole lease: it keeps its share of the
	// reserve from when it starts, and Work returns as much later.
	releaseBy := later(drainDeadline, time.Now().Add(reserve/2))
	releaseCtx, cancelRelease := context.WithDeadline(context.Background(), releaseBy)
	defer cancelRelease()
	var unreleased atomic.Int32
	var releases sync.WaitGroup
	for _, job := range stopped {
		releases.Go(func() {
			if !w.release(releaseCtx, job, releaseBy) {
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

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
