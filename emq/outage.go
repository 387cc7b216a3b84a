package emq

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// A loop whose calls fail backs off from its interval up to
// outageBackoffCeiling, and logs at most once per outageLogEvery.
const (
	outageBackoffFloor   = 50 * time.Millisecond
	outageBackoffCeiling = 2 * time.Second
	outageLogEvery       = 10 * time.Second
)

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
