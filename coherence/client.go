package coherence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/lua"
)

// Client runs the coherence moves (broadcast, subscribe, versioned cache
// fill) on a Redis connection it shares: it does not own rdb, so closing the
// connection stays with whoever opened it (often an emq.Client, through its
// Redis method).
type Client struct {
	rdb redis.UniversalClient
	log *slog.Logger
}

// Option configures New.
type Option func(*Client)

// WithLogger sets the logger of the subscriptions; slog.Default otherwise.
func WithLogger(log *slog.Logger) Option {
	return func(c *Client) { c.log = log }
}

// New runs the coherence moves on rdb.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, log: slog.Default()}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// cacheFillScript runs EVALSHA first, EVAL when the server answers NOSCRIPT
// (after a restart or SCRIPT FLUSH).
var cacheFillScript = redis.NewScript(lua.CacheFill)

// scriptCall is one run of a script in a pipeline.
type scriptCall struct {
	keys []string
	args []any
}

// runPipelined runs many calls of one script in one round trip, EVALSHA
// first. A pipeline cannot fall back call by call the way Script.Run does, so
// calls refused with NOSCRIPT (which did not run) are sent again after
// loading the script.
func runPipelined(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; round < 2 && len(pending) > 0; round++ {
		pipe := rdb.Pipeline()
		for _, i := range pending {
			cmds[i] = script.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		var missing []int
		for _, i := range pending {
			if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			if err := script.Load(ctx, rdb).Err(); err != nil {
				return nil, fmt.Errorf("coherence: load script: %w", err)
			}
		}
		pending = missing
	}
	return cmds, nil
}

// register registers collector, or returns the one of its kind already
// registered, so that several subscriptions may share a registry.
func register[C prometheus.Collector](registerer prometheus.Registerer, collector C) C {
	if registerer == nil {
		return collector
	}
	err := registerer.Register(collector)
	if err == nil {
		return collector
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}

// A subscription whose connection fails backs off from outageBackoffFloor up
// to outageBackoffCeiling, and logs at most once per outageLogEvery.
const (
	outageBackoffFloor   = 50 * time.Millisecond
	outageBackoffCeiling = 2 * time.Second
	outageLogEvery       = 10 * time.Second
)

// outage follows a loop's run of failed calls to the server: it rate-limits
// the loop's logs and grows its pause, so a Redis restart neither floods the
// logs nor meets a stampede when it comes back.
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

// backoff doubles the pause from outageBackoffFloor with every failure, up to
// outageBackoffCeiling, spread by ±10% so many subscribers do not fall into
// step.
func (o *outage) backoff() time.Duration {
	pause := outageBackoffFloor
	for i := 1; i < o.failures && pause < outageBackoffCeiling; i++ {
		pause *= 2
	}
	pause = min(pause, outageBackoffCeiling)
	return time.Duration(float64(pause) * (0.9 + 0.2*rand.Float64()))
}

// sleep waits d or until ctx is cancelled.
func sleep(ctx context.Context, d time.Duration) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}
