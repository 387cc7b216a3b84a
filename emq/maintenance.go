package emq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/ordergate/ordergate/internal/outage"
)

// The most jobs one reap or promote call moves.
const (
	reapBatch    = 100
	promoteBatch = 100
)

// reapLoop takes back expired leases, at once on start (a restarted worker
// picks up what its previous life left) and every ReapInterval.
func (w *worker) reapLoop(ctx context.Context) {
	trouble := outage.Tracker{Loop: "reaper"}
	for wait := time.Duration(0); outage.Sleep(ctx, wait); {
		wait = outage.Jittered(w.options.ReapInterval)
		if err := w.reapExpired(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.Fail(w.logger, err)
			wait = trouble.Backoff(w.options.ReapInterval)
			continue
		}
		trouble.Recover(w.logger)
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
		w.logger.Info("took back jobs whose lease expired", "requeued", reaped.Requeued, "dead", reaped.Dead)
	}
}

func (w *worker) promoteLoop(ctx context.Context) {
	trouble := outage.Tracker{Loop: "promoter"}
	for wait := time.Duration(0); outage.Sleep(ctx, wait); {
		wait = outage.Jittered(w.options.PromoteInterval)
		if err := w.promoteDue(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.Fail(w.logger, err)
			wait = trouble.Backoff(w.options.PromoteInterval)
			continue
		}
		trouble.Recover(w.logger)
	}
}

func (w *worker) promoteDue(ctx context.Context) error {
	for {
		promoted, err := w.queue.Promote(ctx, promoteBatch)
		if err != nil {
			return err
		}
		if promoted > 0 {
			w.logger.Debug("promoted due retries", "jobs", promoted)
		}
		// A short batch means nothing else is due now.
		if promoted < promoteBatch {
			return nil
		}
	}
}

func (w *worker) sampleLoop(ctx context.Context) {
	trouble := outage.Tracker{Loop: "metrics"}
	for wait := time.Duration(0); outage.Sleep(ctx, wait); {
		wait = w.options.MetricsInterval
		depths, err := w.queue.depths(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.Fail(w.logger, err)
			continue
		}
		trouble.Recover(w.logger)
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
