package emq

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

const (
	// completeBatch bounds one pipelined round trip of completions.
	completeBatch = 128

	// finalMoveAttempts is how often a complete, retry, bury or release is
	// sent when the server does not answer, finalMoveBackoff the first pause
	// between sends (doubling).
	finalMoveAttempts = 4
	finalMoveBackoff  = 50 * time.Millisecond
)

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
		if w.logger.Enabled(context.Background(), slog.LevelDebug) {
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
		// The claims may have told the promoter that nothing is delayed.
		w.promoteDue.reset()
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
