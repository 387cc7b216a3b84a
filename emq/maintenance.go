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
// claim.lua looks, by server time, whether the move has anything to do, and
// how long until it will. A claim that saw it due kicks the loop, which runs
// the move at once; one that saw nothing due marks the loop clear until the
// move will have work, or until the claims that follow will have told.
type dueSignal struct {
	// until is when the loop stops being known to have nothing to do, as
	// the monotonic time since origin (a step of the wall clock moves
	// neither).
	until  atomic.Int64
	origin time.Time
	kick   chan struct{}
	// interval is the loop's, the least a claim's news holds; horizon the
	// most: the claim loop's longest idle wait and an interval, within
	// which the next claim looks again (its wait starts after the claim's
	// round trip, so a horizon of the wait alone would let the move run
	// just before every idle claim).
	interval, horizon time.Duration
}

func newDueSignal(interval, idleWait time.Duration) *dueSignal {
	return &dueSignal{origin: time.Now(), kick: make(chan struct{}, 1), interval: interval, horizon: idleWait + interval}
}

// at is t as the signal stores it.
func (s *dueSignal) at(t time.Time) int64 { return int64(t.Sub(s.origin)) }

// clearUntil is when the last news that nothing was due runs out.
func (s *dueSignal) clearUntil() time.Time {
	return s.origin.Add(time.Duration(s.until.Load()))
}

// note records what a claim sent at sentAt saw: the move due now, or due
// in (negative: nothing for it at all). A claim's news holds an interval,
// as a plain tick would, and longer while nothing comes due for longer,
// up to the horizon: a lease or a retry that another worker makes after
// the claim is seen by the next claim, within the horizon, and, being
// longer than it, runs out after that claim. An idle queue's worker then
// runs no move between claims that come a horizon apart.
func (s *dueSignal) note(due bool, in time.Duration, sentAt time.Time) {
	if due {
		s.poke()
		return
	}
	hold := s.horizon
	if in >= 0 {
		hold = min(max(in, s.interval), s.horizon)
	}
	s.until.Store(s.at(sentAt.Add(hold)))
}

// reset forgets what the claims said and has the loop run its move now:
// this worker delayed a job, which its claims may have said there was none
// of; the loop keeps its interval until a claim sees the job.
func (s *dueSignal) reset() {
	s.until.Store(s.at(time.Now()))
	s.poke()
}

// poke has the loop run its move now.
func (s *dueSignal) poke() {
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
			// Still clear: wait until that news runs out.
			if fresh := signal.clearUntil(); start.Before(fresh) {
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
		// The move left nothing due as of its start, for an interval.
		if at := signal.at(start.Add(interval)); at > signal.until.Load() {
			signal.until.Store(at)
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
