package emq

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ordergate/ordergate/internal/outage"
)

// The most jobs one reap or promote call moves.
const (
	reapBatch    = 100
	promoteBatch = 100
)

// dueSignal is what the claims tell a maintenance loop (reap or promote):
// claim.lua looks, by server time, whether the move has anything to do.
// A claim that saw it due kicks the loop, which runs the move at once; one
// that saw nothing due marks the loop clear as of the claim's send time.
type dueSignal struct {
	// clear is when the loop was last known to have nothing to do, as the
	// monotonic time since origin (a step of the wall clock moves neither):
	// the send time of a claim that saw nothing due, or the start of a run
	// of the move that left nothing due.
	clear  atomic.Int64
	origin time.Time
	kick   chan struct{}
}

func newDueSignal() *dueSignal {
	return &dueSignal{origin: time.Now(), kick: make(chan struct{}, 1)}
}

// at is t as the signal stores it.
func (s *dueSignal) at(t time.Time) int64 { return int64(t.Sub(s.origin)) }

// clearUntil is when the last news that nothing was due turns interval old.
func (s *dueSignal) clearUntil(interval time.Duration) time.Time {
	return s.origin.Add(time.Duration(s.clear.Load()) + interval)
}

// note records what a claim sent at sentAt saw.
func (s *dueSignal) note(due bool, sentAt time.Time) {
	if !due {
		s.clear.Store(s.at(sentAt))
		return
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// maintain runs move at once on start (a restarted worker picks up what its
// previous life left), at once when a claim saw it due, and otherwise once
// the loop has not been known clear for an interval: an idle
// worker's claims, polling more often than that, keep it clear, so an idle
// queue costs its claim polls and no maintenance calls; a worker whose
// slots are full claims nothing, and runs the move every interval as
// before.
//
// A lease that runs out at t, or a retry due at t, is moved by the first
// claim sent after t, or else by the run that comes once the last news
// that nothing was due, older than t, is an interval old: within an
// interval of t (a plain tick, jittered, took up to 1.1). The window is not
// jittered: the claims it waits on are spread already, and a shorter one
// would let through a claim poll of 200 ms against the promoter's 250.
func (w *worker) maintain(ctx context.Context, loop string, interval time.Duration, signal *dueSignal,
	move func(context.Context) error) {
	trouble := outage.Tracker{Loop: loop}
	wait := time.Duration(0)
	for first := true; ; first = false {
		kicked := false
		if wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			case <-signal.kick:
				kicked = true
				timer.Stop()
			}
		} else if ctx.Err() != nil {
			return
		}
		start := time.Now()
		if !kicked && !first {
			// Still clear: wait until that news is an interval old.
			if fresh := signal.clearUntil(interval); start.Before(fresh) {
				wait = fresh.Sub(start)
				continue
			}
		}
		if err := move(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			trouble.Fail(w.logger, err)
			wait = trouble.Backoff(interval)
			continue
		}
		trouble.Recover(w.logger)
		// The move left nothing due as of its start.
		if at := signal.at(start); at > signal.clear.Load() {
			signal.clear.Store(at)
		}
		wait = outage.Jittered(interval)
	}
}

// reapLoop takes back expired leases (maintain).
func (w *worker) reapLoop(ctx context.Context) {
	w.maintain(ctx, "reaper", w.options.ReapInterval, w.reapDue, w.reapExpired)
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

// promoteLoop moves due retries back to pending (maintain).
func (w *worker) promoteLoop(ctx context.Context) {
	w.maintain(ctx, "promoter", w.options.PromoteInterval, w.promoteDue, w.promoteRetries)
}

func (w *worker) promoteRetries(ctx context.Context) error {
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
