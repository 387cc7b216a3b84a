package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

// benchAccounts is how many funded accounts (and API keys) the load uses.
const benchAccounts = 8

// env is what the phases share: the queue client, the database and the
// funded accounts with their keys.
type env struct {
	queue    *emq.Client
	db       *pgxpool.Pool
	logger   *slog.Logger
	accounts []string
	keys     []string
	// run makes ids unique across runs against the same servers.
	run string
}

// fundAccounts creates benchAccounts funded accounts with an API key each:
// their orders trade with each other in the book.
func (e *env) fundAccounts(ctx context.Context) error {
	ledger := postgres.NewLedger(e.db)
	accounts := postgres.NewAccounts(e.db)
	for i := range benchAccounts {
		account, err := accounts.Create(ctx, "bench-"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		for _, funds := range [][2]string{{"USD", "1000000000.00"}, {"BTC", "1000"}, {"ETH", "10000"}} {
			if err := ledger.Deposit(ctx, account, funds[0], funds[1]); err != nil {
				return fmt.Errorf("fund %s: %w", account, err)
			}
		}
		_, key, err := accounts.IssueKey(ctx, account)
		if err != nil {
			return err
		}
		e.accounts = append(e.accounts, account)
		e.keys = append(e.keys, key)
	}
	return nil
}

// startGateway serves the real gateway on a loopback port, with the rate
// limiter on (its Redis call is part of every request) but set so high that
// it never refuses. The returned stop shuts it down.
func (e *env) startGateway(ctx context.Context) (url string, stop func(), err error) {
	instruments, err := placement.LoadInstruments(ctx, postgres.NewInstruments(e.db))
	if err != nil {
		return "", nil, err
	}
	queues := placement.NewOrderQueues(e.queue, placement.WithSymbols(instruments.Symbols))
	placer := placement.NewPlacer(queues, placement.WithHistory(postgres.NewOrders(postgres.NewHistory(e.db), postgres.NewSettler(e.db, nil, nil))))
	if err := placer.Declare(ctx, instruments.Symbols()...); err != nil {
		return "", nil, err
	}
	config := gateway.DefaultConfig()
	config.RateLimitBurst, config.RateLimitPerSecond = 1_000_000, 1_000_000
	events := placement.NewEventStreams(placement.NewEventLogs(e.queue), placement.WithEventLogger(e.logger))
	server := gateway.New(gateway.Deps{
		Placer:      placer,
		Instruments: instruments,
		Accounts:    placement.NewKeyCache(postgres.NewAccounts(e.db), 0),
		Balances:    placement.NewBalances(postgres.NewBalances(e.db), coherence.New(e.queue.Redis(), coherence.WithLogger(e.logger)), e.logger),
		Events:      events,
		Logger:      e.logger,
		Metrics:     prometheus.NewRegistry(),
	}, config)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	httpServer := gateway.NewHTTPServer(listener.Addr().String(), server, e.logger)
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	// Close, not Shutdown: nothing is in flight by then, and Shutdown would
	// wait seconds for the load generator's never-used connections.
	stop = func() {
		events.Close()
		_ = httpServer.Close()
		<-served
	}
	return "http://" + listener.Addr().String() + "/v1/orders", stop, nil
}

// loadResult is one load phase: completed orders per second and latency.
type loadResult struct {
	Name        string  `json:"name"`
	Concurrency int     `json:"concurrency,omitempty"`
	TargetRate  float64 `json:"target_rate,omitempty"`
	Orders      int64   `json:"orders"`
	Errors      int64   `json:"errors"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"orders_per_second"`
	P50Ms       float64 `json:"p50_ms"`
	P90Ms       float64 `json:"p90_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	MaxMs       float64 `json:"max_ms"`
	FirstError  string  `json:"first_error,omitempty"`
	// ReleaseP99Ms and TakenP99Ms are an open loop's own lag, part of
	// every latency it reports: from a request's scheduled time to the
	// ticker's release of it (the generator's lateness), and to a sender
	// taking it (that, plus the wait for a sender whose last request is
	// still unanswered).
	ReleaseP99Ms float64 `json:"release_lag_p99_ms,omitempty"`
	TakenP99Ms   float64 `json:"taken_lag_p99_ms,omitempty"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// tally collects the per-goroutine histograms and error counts of a phase.
type tally struct {
	mu         sync.Mutex
	hist       histogram
	orders     int64
	errors     int64
	firstError error
}

func (t *tally) add(h *histogram, ok, failed int64, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hist.merge(h)
	t.orders += ok
	t.errors += failed
	if t.firstError == nil {
		t.firstError = err
	}
}

// merge adds u's counts and histogram to t.
func (t *tally) merge(u *tally) {
	t.add(&u.hist, u.orders, u.errors, u.firstError)
}

func (t *tally) result(name string, elapsed time.Duration) loadResult {
	r := loadResult{
		Name: name, Orders: t.orders, Errors: t.errors, Seconds: elapsed.Seconds(),
		PerSecond: float64(t.orders) / elapsed.Seconds(),
		P50Ms:     ms(t.hist.quantile(0.5)), P90Ms: ms(t.hist.quantile(0.9)), P99Ms: ms(t.hist.quantile(0.99)),
		P999Ms: ms(t.hist.quantile(0.999)), MaxMs: ms(t.hist.quantile(1)),
	}
	if t.firstError != nil {
		r.FirstError = t.firstError.Error()
	}
	return r
}

// closedLoop runs op from concurrency goroutines back to back for duration.
func closedLoop(ctx context.Context, name string, concurrency int, duration time.Duration, progress func(string, ...any), op func(context.Context) error) loadResult {
	var t tally
	stopProgress := ticking(name, duration, progress)
	elapsed := t.closedLoop(ctx, concurrency, duration, op)
	stopProgress()
	r := t.result(name, elapsed)
	r.Concurrency = concurrency
	return r
}

// closedLoop runs op from concurrency goroutines back to back for duration,
// adds what they did to t, and returns how long it took until the last
// answer.
func (t *tally) closedLoop(ctx context.Context, concurrency int, duration time.Duration, op func(context.Context) error) time.Duration {
	deadline := time.Now().Add(duration)
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			var h histogram
			var ok, failed int64
			var first error
			for ctx.Err() == nil {
				sent := time.Now()
				if sent.After(deadline) {
					break
				}
				if err := op(ctx); err != nil {
					failed++
					if first == nil {
						first = err
					}
					continue
				}
				h.record(time.Since(sent))
				ok++
			}
			t.add(&h, ok, failed, first)
		})
	}
	wg.Wait()
	return time.Since(start)
}

// A closedLoopOp is one of the loads alternating compares.
type closedLoopOp struct {
	name string
	op   func(context.Context) error
	// cost, when set, adds up what each of its turns cost (costWatch).
	cost *costWatch
}

// alternating runs the closed loops a and b in turns of about turn each, in
// the order a b, b a, a b, … until each has run for duration, and returns
// each one's total and the ratio of b's rate to a's in every round. On a
// shared machine the speed of the moment drifts by tens of percent within
// minutes; taking turns puts the same drift under both, so their ratio holds
// still where two loads run one after the other would not.
func alternating(ctx context.Context, concurrency int, duration, turn time.Duration, progress func(string, ...any), a, b closedLoopOp) (resultA, resultB loadResult, ratios []float64) {
	rounds := max(1, int(duration/turn))
	turn = duration / time.Duration(rounds)
	var tallies [2]tally
	var elapsed [2]time.Duration
	ops := [2]closedLoopOp{a, b}
	for round := range rounds {
		if ctx.Err() != nil {
			break
		}
		var rates [2]float64
		for i := range 2 {
			which := i
			if round%2 == 1 {
				which = 1 - i
			}
			var t tally
			ops[which].cost.begin(ctx)
			took := t.closedLoop(ctx, concurrency, turn, ops[which].op)
			ops[which].cost.end(ctx, t.orders)
			rates[which] = float64(t.orders) / took.Seconds()
			tallies[which].merge(&t)
			elapsed[which] += took
		}
		if rates[0] > 0 {
			ratios = append(ratios, rates[1]/rates[0])
			progress("round %d of %d: %s %.0f/s, %s %.0f/s (%.1f%%)", round+1, rounds,
				a.name, rates[0], b.name, rates[1], 100*rates[1]/rates[0])
		}
	}
	resultA = tallies[0].result(a.name, elapsed[0])
	resultB = tallies[1].result(b.name, elapsed[1])
	resultA.Concurrency, resultB.Concurrency = concurrency, concurrency
	return resultA, resultB, ratios
}

// openLoop sends at a fixed rate whatever the answers do: a ticker releases
// each request at its scheduled time, and latency runs from that scheduled
// time, so a stall counts against every request it delayed (no coordinated
// omission). Requests still scheduled at the end are sent and counted.
func openLoop(ctx context.Context, name string, rate float64, senders int, duration time.Duration, progress func(string, ...any), op func(context.Context) error) loadResult {
	return openLoopAt(ctx, name, rate, senders, duration, progress, func(ctx context.Context, _ int, _ time.Time) error { return op(ctx) })
}

// openLoopAt is openLoop handing op each request's number (0, 1, …) and its
// scheduled time, for a caller that times the request past its answer.
func openLoopAt(ctx context.Context, name string, rate float64, senders int, duration time.Duration, progress func(string, ...any), op func(ctx context.Context, i int, scheduled time.Time) error) loadResult {
	return openLoopCount(ctx, name, rate, senders, int(rate*duration.Seconds()), duration, progress, op)
}

// openLoopCount is openLoopAt sending exactly total requests, the last one
// scheduled (total − 1) ÷ rate after the start; duration is only what its
// progress lines give as the length.
func openLoopCount(ctx context.Context, name string, rate float64, senders, total int, duration time.Duration, progress func(string, ...any), op func(ctx context.Context, i int, scheduled time.Time) error) loadResult {
	var t, takenAll tally
	var released histogram
	type request struct {
		i         int
		scheduled time.Time
	}
	due := make(chan request, total+1)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			var h histogram
			var ok, failed int64
			var first error
			var taken histogram
			defer func() { takenAll.add(&taken, 0, 0, nil) }()
			for r := range due {
				taken.record(time.Since(r.scheduled))
				if err := op(ctx, r.i, r.scheduled); err != nil {
					failed++
					if first == nil {
						first = err
					}
					continue
				}
				h.record(time.Since(r.scheduled))
				ok++
			}
			t.add(&h, ok, failed, first)
		})
	}
	stopProgress := ticking(name, duration, progress)
	start := time.Now()
	ticker := time.NewTicker(time.Millisecond)
	next := 0
	for next < total && ctx.Err() == nil {
		now := <-ticker.C
		for ; next < total; next++ {
			scheduled := scheduledAt(start, rate, next)
			if scheduled.After(now) {
				break
			}
			released.record(time.Since(scheduled))
			due <- request{next, scheduled}
		}
	}
	ticker.Stop()
	close(due)
	wg.Wait()
	stopProgress()
	r := t.result(name, time.Since(start))
	r.TargetRate = rate
	r.ReleaseP99Ms, r.TakenP99Ms = ms(released.quantile(0.99)), ms(takenAll.hist.quantile(0.99))
	return r
}

// scheduledAt is request i's time in an open loop at rate started at start.
func scheduledAt(start time.Time, rate float64, i int) time.Time {
	return start.Add(time.Duration(float64(i) * float64(time.Second) / rate))
}

// ticking prints name's progress every two seconds until the returned stop.
func ticking(name string, duration time.Duration, progress func(string, ...any)) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		ticker := time.NewTicker(2 * time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				progress("%s: %s of %s…", name, time.Since(start).Round(time.Second), duration)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// ceilingAdmit returns an op admitting an order job straight through the
// admit script (EVALSHA), shaped as the gateway's: same payload size, the
// account as lane, account:client_order_id as dedup key.
func (e *env) ceilingAdmit(ctx context.Context) (func(context.Context) error, error) {
	return e.admitOp(ctx, e.queue, "ceiling")
}

// admitOp returns an op admitting such order jobs through client, on a
// queue of its own named for name.
func (e *env) admitOp(ctx context.Context, client *emq.Client, name string) (func(context.Context) error, error) {
	queue := client.Queue("bench-"+name+"-"+e.run, emq.WithDedupRetention(benchDedupRetention))
	if err := queue.Declare(ctx, orders.KindPlace); err != nil {
		return nil, err
	}
	var seq atomic.Int64
	return func(ctx context.Context) error {
		n := seq.Add(1)
		account := e.accounts[n%int64(len(e.accounts))]
		job, err := orderJob(account, name+"-"+e.run+"-"+strconv.FormatInt(n, 10), orders.Buy)
		if err != nil {
			return err
		}
		admission, err := queue.Admit(ctx, job)
		if err == nil && admission.Duplicate {
			err = errors.New("unexpected duplicate")
		}
		return err
	}, nil
}
