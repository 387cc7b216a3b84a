package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

// trackingResult is the tracking phase: GET /v1/balances' read
// (placement.Balances.Of) of cached accounts, closed loop, straight from
// Redis and through the tracked local copy in the same run; and how long a
// write by another client takes to drop the key from the local copy.
type trackingResult struct {
	Readers        int     `json:"readers"`
	RedisPerSecond float64 `json:"balances_reads_per_second_redis"`
	LocalPerSecond float64 `json:"balances_reads_per_second_local_copy"`
	Ratio          float64 `json:"local_copy_ratio"`
	// Invalidations is how many writes were timed; each from the write's
	// start to the key dropped from the copy.
	Invalidations   int     `json:"invalidations"`
	InvalidationP50 float64 `json:"invalidation_p50_ms"`
	InvalidationP99 float64 `json:"invalidation_p99_ms"`
}

// trackingWrites is how many invalidations the phase times.
const trackingWrites = 2_000

func (e *env) tracking(ctx context.Context, c config, s *servers, progress func(string, ...any)) (trackingResult, error) {
	r := trackingResult{Readers: c.concurrency}
	options, err := redis.ParseURL(s.redisURL)
	if err != nil {
		return r, fmt.Errorf("tracking: %w (a cluster has no local copy)", err)
	}
	caches := coherence.New(e.queue.Redis())
	straight := placement.NewBalances(postgres.NewBalances(e.db), caches, e.logger)
	// The cache holds every account whole: both runs read it alone.
	for _, account := range e.accounts {
		if _, err := straight.Of(ctx, account); err != nil {
			return r, err
		}
	}
	var drop struct {
		sync.Mutex
		key     string
		dropped chan struct{}
	}
	tracking, err := coherence.NewTracking(options, coherence.TrackingConfig{OnInvalidate: func(key string) func() {
		return func() {
			drop.Lock()
			defer drop.Unlock()
			if key == drop.key && drop.dropped != nil {
				close(drop.dropped)
				drop.dropped = nil
			}
		}
	}})
	if err != nil {
		return r, err
	}
	defer tracking.Close()
	local := placement.NewBalances(postgres.NewBalances(e.db), caches, e.logger).WithLocalCopy(coherence.New(tracking.Client()))

	length := max(c.duration/4, time.Second)
	if r.RedisPerSecond, err = e.readBalances(ctx, "tracking: balance reads straight from Redis", straight, c.concurrency, length, progress); err != nil {
		return r, err
	}
	if r.LocalPerSecond, err = e.readBalances(ctx, "tracking: balance reads through the local copy", local, c.concurrency, length, progress); err != nil {
		return r, err
	}
	r.Ratio = r.LocalPerSecond / r.RedisPerSecond

	progress("tracking: timing %d invalidations…", trackingWrites)
	reader, writer := tracking.Client(), e.queue.Redis()
	var took histogram
	key := "bench:tracking:" + e.run
	for i := range trackingWrites {
		if err := writer.Set(ctx, key, i, 0).Err(); err != nil {
			return r, err
		}
		// Read through the copy: Redis now tracks the key for it.
		if _, err := reader.Get(ctx, key).Result(); err != nil {
			return r, err
		}
		dropped := make(chan struct{})
		drop.Lock()
		drop.key, drop.dropped = key, dropped
		drop.Unlock()
		began := time.Now()
		if err := writer.Set(ctx, key, strconv.Itoa(i)+"+", 0).Err(); err != nil {
			return r, err
		}
		select {
		case <-dropped:
			took.record(time.Since(began))
		case <-time.After(time.Second):
			return r, fmt.Errorf("tracking: write %d was not invalidated within a second", i)
		}
	}
	r.Invalidations = trackingWrites
	r.InvalidationP50, r.InvalidationP99 = ms(took.quantile(0.5)), ms(took.quantile(0.99))
	progress("tracking: balances %.0f reads/s from Redis, %.0f through the local copy (%.1f×); invalidation p50 %.2f ms p99 %.2f ms",
		r.RedisPerSecond, r.LocalPerSecond, r.Ratio, r.InvalidationP50, r.InvalidationP99)
	return r, nil
}

// readBalances reads the accounts' balances in a closed loop of readers
// for length, and returns the reads a second.
func (e *env) readBalances(ctx context.Context, name string, balances *placement.Balances, readers int, length time.Duration, progress func(string, ...any)) (float64, error) {
	var next atomic.Int64
	read := closedLoop(ctx, name, readers, length, progress, func(ctx context.Context) error {
		_, err := balances.Of(ctx, e.accounts[int(next.Add(1))%len(e.accounts)])
		return err
	})
	if read.Errors > 0 {
		return 0, fmt.Errorf("%s: %d reads failed, the first: %s", name, read.Errors, read.FirstError)
	}
	return read.PerSecond, nil
}

// markdown is the phase's table.
func (r trackingResult) markdown() string {
	if r.Invalidations == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| GET /v1/balances' read, %d readers, cached accounts | reads/s |\n|---|---:|\n", r.Readers)
	fmt.Fprintf(&b, "| straight from Redis | %.0f |\n| through the tracked local copy | %.0f |\n", r.RedisPerSecond, r.LocalPerSecond)
	fmt.Fprintf(&b, "\nThe local copy reads %.1f× as fast. A write by another client drops the key from the copy in p50 %.2f ms, p99 %.2f ms (%d writes, each timed from its start).\n\n",
		r.Ratio, r.InvalidationP50, r.InvalidationP99, r.Invalidations)
	return b.String()
}
