package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// TestMatchRun runs each run of the matching phase once at 200 orders
// against the harness's servers: every order ends with a row, some trade,
// none is rejected for funds, the latencies are read, and the audit (which
// fails the run) is clean.
func TestMatchRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes over two fresh databases")
	}
	redisServer := testserver.QueueRedisServer(t)
	database := testserver.Postgres(t)
	s := &servers{redisURL: redisServer.URL(), databaseURL: database.URL}
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	queue, err := emq.Dial(ctx, s.redisURL, emq.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = queue.Close() })
	e := &env{queue: queue, logger: logger, run: "test"}
	c := matchingConfig{orders: 200, accounts: 50, workers: 2}
	for _, run := range matchingRuns {
		t.Run(run.name, func(t *testing.T) {
			r, err := e.matchRun(ctx, c, s, run.name, run.symbols, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			// Each instrument's orders alternate: an odd share is one short.
			if r.Taken != c.orders || r.Rejected != 0 || r.Crossing > c.orders/2 || r.Crossing < c.orders/2-len(run.symbols) {
				t.Errorf("%d of %d orders taken, %d rejected, %d crossing; want all taken, none rejected, half crossing", r.Taken, c.orders, r.Rejected, r.Crossing)
			}
			if r.AllTrades == 0 || r.TradesPerSecond <= 0 || r.PerSecond <= 0 {
				t.Errorf("%d trades, %.0f trades/s, %.0f orders/s; want trades", r.AllTrades, r.TradesPerSecond, r.PerSecond)
			}
			if r.LatencySamples != c.orders || r.LatencyP99Ms < r.LatencyP50Ms || r.LatencyMaxMs < r.LatencyP99Ms {
				t.Errorf("latency over %d samples: p50 %.0f, p99 %.0f, max %.0f ms", r.LatencySamples, r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
			}
			if r.AuditedOrders != int64(c.orders) {
				t.Errorf("the audit looked at %d orders, want %d", r.AuditedOrders, c.orders)
			}
		})
	}
}

func TestPercentile(t *testing.T) {
	sorted := make([]time.Duration, 100)
	for i := range sorted {
		sorted[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(sorted, tt.q); got != tt.want {
			t.Errorf("percentile(1..100 ms, %v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := percentile(sorted[:1], 0.99); got != time.Millisecond {
		t.Errorf("percentile of one = %v", got)
	}
}
