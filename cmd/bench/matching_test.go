package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// TestMatchRun runs each run of the matching phase once at 200 orders
// against the harness's servers, with the backlog admitted first and open
// loop at 400 orders/s: every order ends with a row, some trade, none is
// rejected for funds, the latencies are read, and the audit (which fails the
// run) is clean. Open loop, the run lasts at least its schedule, and its
// latencies from the schedule are at least the queue's from the admission.
func TestMatchRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes over four fresh databases")
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
	for _, mode := range []struct {
		name string
		rate float64
	}{{"backlog", 0}, {"open loop", 400}} {
		e := &env{queue: queue, logger: logger, run: "test" + strconv.Itoa(int(mode.rate))}
		c := matchingConfig{orders: 200, accounts: 50, workers: 2, rate: mode.rate}
		for _, run := range matchingRuns {
			t.Run(mode.name+"/"+run.name, func(t *testing.T) {
				r, err := e.matchRun(ctx, c, s, run.name, run.symbols, t.Logf)
				if err != nil {
					t.Fatal(err)
				}
				// Each instrument's orders alternate: an odd share is one short.
				if r.Taken != c.orders || r.Rejected != 0 || r.Crossing > c.orders/2 || r.Crossing < c.orders/2-len(run.symbols) {
					t.Errorf("%d of %d orders taken, %d rejected, %d crossing; want all taken, none rejected, half crossing", r.Taken, c.orders, r.Rejected, r.Crossing)
				}
				// At a rate the run's orders/s are the schedule's, and left out.
				if peak := mode.rate == 0; r.AllTrades == 0 || (r.TradesPerSecond > 0) != peak || (r.PerSecond > 0) != peak {
					t.Errorf("%d trades, %.0f trades/s, %.0f orders/s; want trades, and rates only without -match-rate", r.AllTrades, r.TradesPerSecond, r.PerSecond)
				}
				if r.LatencySamples != c.orders || r.LatencyP99Ms < r.LatencyP50Ms || r.LatencyMaxMs < r.LatencyP99Ms {
					t.Errorf("latency over %d samples: p50 %.0f, p99 %.0f, max %.0f ms", r.LatencySamples, r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
				}
				if r.AuditedOrders != int64(c.orders) {
					t.Errorf("the audit looked at %d orders, want %d", r.AuditedOrders, c.orders)
				}
				o := r.OpenLoop
				if mode.rate == 0 {
					if o != nil {
						t.Errorf("open-loop figures %+v without a rate", *o)
					}
					return
				}
				if o == nil {
					t.Fatal("no open-loop figures at a rate")
				}
				// The last order is scheduled 199 ÷ 400 s after the first.
				schedule := float64(c.orders-1) / mode.rate
				if o.OfferedPerSecond != mode.rate || o.Seconds < schedule || o.AchievedPerSecond > mode.rate*float64(c.orders)/float64(c.orders-1) || o.AchievedPerSecond <= 0 {
					t.Errorf("offered %.0f/s, achieved %.0f/s over %.3f s; want %.0f/s offered, and achieved at most that over at least %.3f s",
						o.OfferedPerSecond, o.AchievedPerSecond, o.Seconds, mode.rate, schedule)
				}
				if o.LatencySamples != c.orders || o.LatencyP50Ms <= 0 || o.LatencyP99Ms < o.LatencyP50Ms || o.LatencyMaxMs < o.LatencyP99Ms {
					t.Errorf("latency from the schedule over %d samples: p50 %.1f, p99 %.1f, max %.1f ms", o.LatencySamples, o.LatencyP50Ms, o.LatencyP99Ms, o.LatencyMaxMs)
				}
				// The queue's admission time is ms-truncated: 1 ms of slack.
				if o.LatencyMaxMs+1 < r.LatencyMaxMs || o.AdmitLagP99Ms <= 0 {
					t.Errorf("max from the schedule %.1f ms, from the admission %.1f ms; lag p99 %.2f ms", o.LatencyMaxMs, r.LatencyMaxMs, o.AdmitLagP99Ms)
				}
			})
		}
	}
}

// TestAdmitOpenLoopKeepsItsScheduleThroughAStall admits 40 orders at
// 200/s through an admission that serializes like one Redis and stalls
// 100 ms on order 10: the orders keep their schedule, every one is admitted,
// the generator's lag shows the stall, and the latency from the schedule
// grows by it for the orders it delayed, where the queue's own
// (admission → done) leaves it out.
func TestAdmitOpenLoopKeepsItsScheduleThroughAStall(t *testing.T) {
	const (
		rate    = 200
		n       = 40
		spacing = time.Second / rate
		stalled = 10
		stall   = 100 * time.Millisecond
		engine  = 2 * time.Millisecond
	)
	var redis sync.Mutex
	admitted := make([]time.Time, n)
	scheduled, r := admitOpenLoop(context.Background(), rate, n, func(string, ...any) {}, func(_ context.Context, i int) error {
		redis.Lock()
		defer redis.Unlock()
		if i == stalled {
			time.Sleep(stall)
		}
		admitted[i] = time.Now()
		return nil
	})
	if r.Orders != n || r.Errors != 0 || r.TargetRate != rate {
		t.Fatalf("%d admitted, %d failed at %v/s; want %d, none, at %v/s", r.Orders, r.Errors, r.TargetRate, n, rate)
	}
	for i := range n {
		if got := scheduled[i].Sub(scheduled[0]); got != time.Duration(i)*spacing {
			t.Errorf("order %d scheduled %v after the first, want %v", i, got, time.Duration(i)*spacing)
		}
		if admitted[i].Before(scheduled[i]) {
			t.Errorf("order %d admitted %v before its schedule", i, scheduled[i].Sub(admitted[i]))
		}
	}
	// Order 11 is scheduled 5 ms into the stall and waits out the rest.
	if r.P99Ms < ms(stall-2*spacing) {
		t.Errorf("generator's lag p99 %.1f ms, want ≥ %.1f ms (the stall)", r.P99Ms, ms(stall-2*spacing))
	}

	// The engine completes each order 2 ms after its admission; the queue
	// records both on Redis's clock, to the millisecond.
	done := make([]doneJob, n)
	for i := range n {
		created := admitted[i].Truncate(time.Millisecond)
		done[i] = doneJob{created: created, finished: admitted[i].Add(engine).Truncate(time.Millisecond), kept: true}
	}
	o := openLoopFigures(rate, scheduled, done, n, r)
	if o.OfferedPerSecond != rate || o.AdmitLagP99Ms != r.P99Ms || o.LatencySamples != n {
		t.Errorf("figures %+v", *o)
	}
	if o.LatencyMaxMs < ms(stall-2*spacing) || o.LatencyP99Ms < ms(stall-2*spacing) {
		t.Errorf("from the schedule: p99 %.1f ms, max %.1f ms; want ≥ %.1f ms (the stall counted)", o.LatencyP99Ms, o.LatencyMaxMs, ms(stall-2*spacing))
	}
	fromAdmission := doneLatencies(done, func(i int) time.Time { return done[i].created })
	if longest := fromAdmission[len(fromAdmission)-1]; longest > stall/2 {
		t.Errorf("admission → done at most %v, want the stall left out of it", longest)
	}
	// The last order is scheduled 195 ms in, after the stall's end: the
	// run lasts its schedule and a little, and achieves about the rate.
	if last := (n - 1) * spacing; o.Seconds < last.Seconds() || o.AchievedPerSecond > rate*n/(n-1) {
		t.Errorf("achieved %.0f/s over %.3f s; want at most %.0f/s over at least %.3f s", o.AchievedPerSecond, o.Seconds, float64(rate*n/(n-1)), last.Seconds())
	}
}

// TestOpenLoopFigures checks the figures from hand-made jobs: latency from
// each order's schedule, jobs no longer kept left out of it, and the
// achieved rate over the first schedule to the last completion.
func TestOpenLoopFigures(t *testing.T) {
	start := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return start.Add(d) }
	for _, tt := range []struct {
		name                  string
		scheduled             []time.Duration
		finished              []time.Duration // < 0: no longer kept
		wantP50, wantMax      float64
		wantSeconds, wantRate float64
		wantSamples           int
	}{
		{"on time", []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}, []time.Duration{2 * time.Millisecond, 12 * time.Millisecond, 22 * time.Millisecond, 32 * time.Millisecond}, 2, 2, 0.032, 4 / 0.032, 4},
		{"a stall", []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}, []time.Duration{2 * time.Millisecond, 100 * time.Millisecond, 101 * time.Millisecond, 102 * time.Millisecond}, 72, 90, 0.102, 4 / 0.102, 4},
		{"first trimmed", []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}, []time.Duration{-1, 15 * time.Millisecond, 40 * time.Millisecond}, 5, 20, 0.040, 3 / 0.040, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			scheduled := make([]time.Time, len(tt.scheduled))
			done := make([]doneJob, len(tt.scheduled))
			for i := range scheduled {
				scheduled[i] = at(tt.scheduled[i])
				if tt.finished[i] >= 0 {
					done[i] = doneJob{created: scheduled[i], finished: at(tt.finished[i]), kept: true}
				}
			}
			o := openLoopFigures(100, scheduled, done, len(scheduled), loadResult{P99Ms: 1.5})
			if o.LatencyP50Ms != tt.wantP50 || o.LatencyMaxMs != tt.wantMax || o.LatencySamples != tt.wantSamples {
				t.Errorf("p50 %.1f, max %.1f ms over %d; want %.1f, %.1f over %d", o.LatencyP50Ms, o.LatencyMaxMs, o.LatencySamples, tt.wantP50, tt.wantMax, tt.wantSamples)
			}
			if math.Abs(o.Seconds-tt.wantSeconds) > 1e-9 || math.Abs(o.AchievedPerSecond-tt.wantRate) > 1e-6 {
				t.Errorf("achieved %.3f/s over %.3f s, want %.3f/s over %.3f s", o.AchievedPerSecond, o.Seconds, tt.wantRate, tt.wantSeconds)
			}
			if o.OfferedPerSecond != 100 || o.AdmitLagP99Ms != 1.5 {
				t.Errorf("offered %v, lag %v", o.OfferedPerSecond, o.AdmitLagP99Ms)
			}
		})
	}
}

func TestMatchingConfigRate(t *testing.T) {
	for _, tt := range []struct {
		args    []string
		wantErr bool
	}{
		{nil, false},
		{[]string{"-match-rate", "0"}, false},
		{[]string{"-match-rate", "500"}, false},
		{[]string{"-match-rate", "1"}, false},
		{[]string{"-match-rate", "0.5"}, true},
		{[]string{"-match-rate", "1e-10"}, true},
		{[]string{"-match-rate", "-1"}, true},
		{[]string{"-match-rate", "NaN"}, true},
		{[]string{"-match-rate", "+Inf"}, true},
	} {
		var c matchingConfig
		flags := flag.NewFlagSet("bench", flag.ContinueOnError)
		c.register(flags)
		if err := flags.Parse(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		err := c.validate()
		if tt.wantErr && (err == nil || !strings.Contains(err.Error(), "-match-rate")) {
			t.Errorf("%v: error %v, want one naming -match-rate", tt.args, err)
		}
		if !tt.wantErr && err != nil {
			t.Errorf("%v: %v", tt.args, err)
		}
	}
}

// TestMatchingMarkdownAtARate checks the phase's table and targets: at a
// rate, the open loop's rows are there, pgbench's row and the targets say
// why they do not apply, and no target is met; without one, they are as
// before.
func TestMatchingMarkdownAtARate(t *testing.T) {
	runs := func(rate float64) matchingResult {
		m := matchingResult{Workers: 4, WorkerConcurrency: 8, Accounts: 50, Orders: 2000, Rate: rate}
		for _, run := range matchingRuns {
			r := matchRun{Name: run.name, Symbols: run.symbols, Orders: 2000, PerSecond: 900}
			if rate > 0 {
				r.OpenLoop = &matchOpenLoop{OfferedPerSecond: rate, AchievedPerSecond: 498, Seconds: 4.02, LatencyP50Ms: 7, LatencyP99Ms: 21, LatencyMaxMs: 40, LatencySamples: 1900, AdmitLagP99Ms: 0.4}
			} else {
				m.PgbenchTPS, r.Target, r.Ratio, r.Met = 1000, run.target, 0.9, false
			}
			m.Runs = append(m.Runs, r)
		}
		return m
	}
	for _, tt := range []struct {
		rate              float64
		want, wantTargets []string
		never             []string
	}{
		{0, []string{"(backlog admitted first: queueing)", "| orders/s to final or resting | 900 | 900 |", "| pgbench TPC-B-like tps (-c 0 -j 0, scale 0, 0 s), after both runs | 1000 | |"},
			[]string{"≥ 100% of pgbench's TPS", "NOT met"}, []string{"offered", "not applicable"}},
		{500, []string{"| offered orders/s", "| 500 | 500 |", "| 498 (4.02 s) |", "| 7 / 21 / 40 (1900 of 2000) |", "| 0.40 |", "| pgbench TPC-B-like tps | not run: at -match-rate"},
			[]string{"not applicable: at -match-rate", "| n/a |"}, []string{"NOT met", "(backlog admitted first", "| 900 |"}},
	} {
		m := runs(tt.rate)
		table, targets := m.markdown(), strings.Join(m.targets(), "\n")
		for _, want := range tt.want {
			if !strings.Contains(table, want) {
				t.Errorf("rate %v: the table lacks %q:\n%s", tt.rate, want, table)
			}
		}
		for _, want := range tt.wantTargets {
			if !strings.Contains(targets, want) {
				t.Errorf("rate %v: the targets lack %q:\n%s", tt.rate, want, targets)
			}
		}
		for _, never := range tt.never {
			if strings.Contains(table, never) || strings.Contains(targets, never) {
				t.Errorf("rate %v: %q in the table or targets:\n%s\n%s", tt.rate, never, table, targets)
			}
		}
		if strings.Contains(targets, "| met |") {
			t.Errorf("rate %v: a target met:\n%s", tt.rate, targets)
		}
		if got := m.spreadRate(); (tt.rate > 0) != (got == 0) {
			t.Errorf("rate %v: spread rate %v, want the peak only without a rate", tt.rate, got)
		}
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
