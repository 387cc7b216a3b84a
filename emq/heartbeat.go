package emq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/internal/scriptpipe"
)

// heartbeat renews every lease in flight every Lease/3, all in one
// pipelined round trip.
func (w *worker) heartbeat() {
	interval := w.options.Lease / 3
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	trouble := outage.Tracker{Loop: "heartbeat"}
	for {
		select {
		case <-w.stopped:
			return
		case <-ticker.C:
		}
		w.renewLeases(interval, &trouble)
	}
}

func (w *worker) renewLeases(budget time.Duration, trouble *outage.Tracker) {
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
		trouble.Fail(w.logger, failure)
		return
	}
	trouble.Recover(w.logger)
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

// extendLeases renews many leases in one round trip; each is renewed or
// refused on its own, exactly as by Extend. Errors are in order.
func (q *Queue) extendLeases(ctx context.Context, leases []Completion, lease time.Duration) []error {
	calls := make([]scriptpipe.Call, len(leases))
	for i, held := range leases {
		calls[i] = scriptpipe.Call{
			Keys: []string{q.jobsKey(), q.activeKey()},
			Args: []any{held.ID, held.Token, lease.Milliseconds()},
		}
	}
	cmds, err := scriptpipe.Run(ctx, q.client.rdb, extendScript, calls)
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
