// Package outage follows one loop's run of failed calls to a Redis server:
// it rate-limits the loop's logs and grows its pause, so a server restart
// neither floods the logs nor meets a stampede when it comes back. The
// queue's loops (emq) and the coherence subscriptions share it, and
// request paths its sparse logs (Sparse).
package outage

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// A loop whose calls fail backs off from its interval (at least
// BackoffFloor) up to BackoffCeiling, and logs at most once per LogEvery.
const (
	BackoffFloor   = 50 * time.Millisecond
	BackoffCeiling = 2 * time.Second
	LogEvery       = 10 * time.Second
)

// Sparse lets a log line through at most once per LogEvery, whichever of
// many goroutines meets its cause: a fault every request meets (a cache
// that does not answer, a key that cannot be verified) is logged once in a
// while, not once per request. Its zero value is ready.
type Sparse struct {
	last atomic.Int64 // UnixNano of the last line let through
}

// Allow reports whether a line may be logged now, and counts it as logged
// when it may.
func (s *Sparse) Allow() bool {
	now := time.Now().UnixNano()
	last := s.last.Load()
	return now-last >= int64(LogEvery) && s.last.CompareAndSwap(last, now)
}

// Tracker follows one loop; its zero value with Loop set is ready.
type Tracker struct {
	// Loop names the loop in the logs.
	Loop     string
	failures int
	since    time.Time
	logged   time.Time
}

// Failures is the length of the current run of failures.
func (o *Tracker) Failures() int { return o.failures }

// Fail records a failed call and logs it, at most once per LogEvery.
func (o *Tracker) Fail(logger *slog.Logger, err error) {
	now := time.Now()
	if o.failures == 0 {
		o.since = now
	}
	o.failures++
	if o.failures == 1 || now.Sub(o.logged) >= LogEvery {
		o.logged = now
		logger.Warn("queue server call failed; backing off", "loop", o.Loop, "err", err,
			"failures", o.failures, "failing_for", now.Sub(o.since).Round(time.Millisecond).String())
	}
}

// Recover ends a run of failures, logging how long it lasted.
func (o *Tracker) Recover(logger *slog.Logger) {
	if o.failures == 0 {
		return
	}
	logger.Info("queue server answers again", "loop", o.Loop, "failures", o.failures,
		"outage", time.Since(o.since).Round(time.Millisecond).String())
	o.failures = 0
}

// Backoff doubles the pause from the loop's interval (at least BackoffFloor)
// with every failure, up to BackoffCeiling, spread by ±10% so the loops of
// many processes do not fall into step.
func (o *Tracker) Backoff(interval time.Duration) time.Duration {
	pause := min(max(interval, BackoffFloor), BackoffCeiling)
	for i := 1; i < o.failures && pause < BackoffCeiling; i++ {
		pause *= 2
	}
	return Jittered(min(pause, BackoffCeiling))
}

// Jittered spreads d by ±10% so the loops of many workers do not fall into step.
func Jittered(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// Sleep waits d or until ctx is cancelled; false when ctx was cancelled.
func Sleep(ctx context.Context, d time.Duration) bool {
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
