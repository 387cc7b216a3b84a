package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// matchingConfig is the matching phase's part of the command line.
type matchingConfig struct {
	orders   int
	accounts int
	workers  int
	// rate, when above 0, is the orders/s at which each run admits its
	// backlog open loop while its workers run (matchOpenLoop).
	rate float64
	// profile measures where each run's time goes (profile.go).
	profile bool
	// cpuProfile and memProfile are where each run's Go CPU and
	// allocation profiles go (profile_counters.go); none when empty.
	cpuProfile, memProfile string
}

func (m *matchingConfig) register(flags *flag.FlagSet) {
	flags.IntVar(&m.orders, "match-orders", 10000, "orders of each run of the matching phase (half of them crossing)")
	flags.IntVar(&m.accounts, "match-accounts", 50, "accounts placing the matching phase's orders")
	flags.IntVar(&m.workers, "match-workers", 4, "worker processes (run in-process, wired as cmd/worker) of the matching phase")
	flags.Float64Var(&m.rate, "match-rate", 0, "orders/s at which each matching run admits its backlog open loop once its workers started: the engine alone (no gateway, no event streams) at a fixed rate, each run lasting -match-orders ÷ rate seconds; 0 admits the whole backlog before the workers start and measures the peak")
	flags.StringVar(&m.cpuProfile, "match-cpuprofile", "", "write a Go CPU profile of the bench process (the in-process workers) over each matching run's window to this path plus the run's name")
	flags.StringVar(&m.memProfile, "match-memprofile", "", "write Go allocation profiles of each matching run's window to this path plus the run's name (and .base at its start: pprof -base)")
	flags.BoolVar(&m.profile, "profile", false, "profile each matching run: CPU by process, pg_stat_statements, rows written, lock waits, the batch cycle's phases (starts the bench's PostgreSQL with pg_stat_statements)")
}

func (m matchingConfig) validate() error {
	if m.orders < 100 || m.accounts < 2 || m.workers < 1 {
		return errors.New("want -match-orders ≥ 100, -match-accounts ≥ 2 and -match-workers ≥ 1")
	}
	if !(m.rate == 0 || m.rate >= 1) || math.IsInf(m.rate, 1) {
		return fmt.Errorf("-match-rate %v: want 0 (the backlog admitted before the workers start) or at least 1 order/s", m.rate)
	}
	return nil
}

// matchingRuns are the matching phase's runs: every order on one hot
// instrument, then spread over three, each with the share of pgbench's TPS
// it must reach (issue 24's targets: the engine's, not the locked design's
// 30 % and 50 %).
var matchingRuns = []struct {
	name    string
	symbols []string
	target  float64
}{
	{"hot", []string{"BTC-USD"}, 1.00},
	{"spread", []string{"BTC-USD", "ETH-USD", "ETH-BTC"}, 1.50},
}

// matchSeed makes every run's backlog the same orders.
const matchSeed = 1

// matchSenders is how many of an open-loop run's admissions may be in
// flight at once. The queue's client coalesces concurrent admissions into
// pipelines, so senders cost goroutines, not connections. A sender held by a
// slow admission leaves the others to take the orders scheduled meanwhile;
// once all are held, the wait for one counts in the latencies (they run
// from the schedule): a stall delays the load, it never thins it.
const matchSenders = 1_000

// matchingResult is the matching phase: a backlog of orders matched in the
// book by worker processes, once on one hot instrument and once spread over
// three, each on a fresh database, against one pgbench run on the same
// server.
type matchingResult struct {
	Workers           int        `json:"workers"`
	WorkerConcurrency int        `json:"worker_concurrency"`
	Accounts          int        `json:"accounts"`
	Orders            int        `json:"orders"`
	Runs              []matchRun `json:"runs"`
	// Rate is -match-rate: each run's backlog admitted open loop at this
	// many orders/s; 0 when it was admitted before the workers started.
	Rate float64 `json:"match_rate,omitempty"`
	// pgbenchResult is left empty at a Rate: the share of pgbench's TPS
	// is the peak's, and a chosen rate is not one.
	pgbenchResult
}

// matchRun is one run of the matching phase.
type matchRun struct {
	Name     string   `json:"name"`
	Symbols  []string `json:"symbols"`
	Orders   int      `json:"orders"`
	Crossing int      `json:"crossing"`
	orderOutcomes
	// AllTrades is the trades table's rows: the database is the run's own.
	AllTrades int `json:"all_trades"`
	// Seconds runs from the workers' start (their connecting included) until
	// the last order's job was done, its row final or resting.
	Seconds float64 `json:"seconds"`
	// PerSecond counts every order with a row: a resting order is one the
	// worker is done with.
	PerSecond       float64 `json:"final_orders_per_second"`
	TradesPerSecond float64 `json:"trades_per_second"`
	// CoherenceSeconds runs from the same start until the coherence consumer
	// had applied every balance change; not part of the ratio.
	CoherenceSeconds float64 `json:"coherence_seconds"`
	// Latency is from each order's admission to its job's completion (after
	// the settlement transaction committed), both as the queue recorded
	// them on Redis's clock (millisecond resolution). Without -match-rate
	// the whole backlog is admitted before the workers start, so this
	// measures queueing: the p99 is close to the run's length. At a rate it
	// leaves out the generator's lag; OpenLoop's runs from the schedule.
	LatencyP50Ms   float64 `json:"placement_to_done_p50_ms"`
	LatencyP99Ms   float64 `json:"placement_to_done_p99_ms"`
	LatencyMaxMs   float64 `json:"placement_to_done_max_ms"`
	LatencySamples int     `json:"placement_to_done_samples"`
	// AuditedOrders is the orders postgres.Audit looked at; it found no
	// violation, or the phase failed.
	AuditedOrders int64 `json:"audited_orders"`
	// Profile is where the run's time went, with -profile.
	Profile *runProfile `json:"profile,omitempty"`
	// OpenLoop is the run at -match-rate; nil without it.
	OpenLoop *matchOpenLoop `json:"open_loop,omitempty"`

	// Ratio, Target and Met are zero at -match-rate: no share of pgbench's
	// TPS is measured then, and the target is not met.
	Ratio  float64 `json:"to_pgbench_ratio"`
	Target float64 `json:"target_ratio"`
	Met    bool    `json:"met"`
}

// matchOpenLoop is an open-loop run's own figures: the backlog admitted at
// a fixed rate while the workers run, order i scheduled i ÷ rate after the
// first whatever the admissions' answers do.
type matchOpenLoop struct {
	OfferedPerSecond float64 `json:"offered_orders_per_second"`
	// AchievedPerSecond is the orders done over Seconds, from the first
	// order's scheduled time to the last job's completion.
	AchievedPerSecond float64 `json:"achieved_orders_per_second"`
	Seconds           float64 `json:"seconds"`
	// Latency runs from each order's scheduled time to its job's
	// completion as the queue recorded it (Redis's clock, millisecond
	// resolution; the bench and Redis share the machine's clock): a stalled
	// admission counts against every order it delayed.
	LatencyP50Ms   float64 `json:"placement_to_done_p50_ms"`
	LatencyP99Ms   float64 `json:"placement_to_done_p99_ms"`
	LatencyMaxMs   float64 `json:"placement_to_done_max_ms"`
	LatencySamples int     `json:"placement_to_done_samples"`
	// AdmitLagP99Ms is the generator's lag, from an order's scheduled
	// time to its admission's answer: what of the latency the admission
	// took, and a stall of it.
	AdmitLagP99Ms float64 `json:"scheduled_to_admitted_p99_ms"`
}

// matching runs the phase: each run on a database of its own, then pgbench
// once for both ratios.
func (e *env) matching(ctx context.Context, c matchingConfig, pgbenchClients int, s *servers, duration time.Duration, progress func(string, ...any)) (matchingResult, error) {
	r := matchingResult{Workers: c.workers, WorkerConcurrency: settlement.DefaultConfig().Concurrency, Accounts: c.accounts, Orders: c.orders, Rate: c.rate}
	// The workers run in this process: with cmd/worker's collector target.
	defer settlement.TuneGC(os.Getenv)()
	for _, run := range matchingRuns {
		result, err := e.matchRun(ctx, c, s, run.name, run.symbols, progress)
		if err != nil {
			return r, fmt.Errorf("matching %s: %w", run.name, err)
		}
		if c.rate == 0 {
			result.Target = run.target
		}
		r.Runs = append(r.Runs, result)
	}
	if c.rate > 0 {
		progress("matching: no pgbench run: at -match-rate the rate is chosen, not the peak, so its share of pgbench's TPS means nothing")
		return r, nil
	}
	r.PgbenchClients = pgbenchClients
	if r.PgbenchClients == 0 {
		r.PgbenchClients = pgbenchClientsFor(c.workers * r.WorkerConcurrency)
	}
	if err := runPgbench(ctx, &r.pgbenchResult, s.databaseURL, "bench_pgbench_match_"+e.run, duration, progress); err != nil {
		return r, fmt.Errorf("matching: pgbench: %w", err)
	}
	for i := range r.Runs {
		run := &r.Runs[i]
		if r.PgbenchTPS > 0 {
			run.Ratio = run.PerSecond / r.PgbenchTPS
		}
		run.Met = run.Ratio >= run.Target
	}
	return r, nil
}

// matchRun creates a database, funds the accounts in every asset, admits
// the backlog on a queue of its own, times the workers through it, reads
// the outcomes and latencies, and audits the books; the database is
// dropped after.
func (e *env) matchRun(ctx context.Context, c matchingConfig, s *servers, name string, symbols []string, progress func(string, ...any)) (matchRun, error) {
	r := matchRun{Name: name, Symbols: symbols, Orders: c.orders}
	inRun := func(format string, a ...any) { progress("matching "+name+": "+format, a...) }
	database := "bench_match_" + name + "_" + e.run
	databaseURL, drop, err := createDatabase(ctx, s.databaseURL, database)
	if err != nil {
		return r, err
	}
	defer func() {
		if err := drop(); err != nil {
			inRun("%v", err)
		}
	}()
	if err := migrations.Up(databaseURL); err != nil {
		return r, err
	}
	db, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return r, err
	}
	defer db.Close()

	inRun("funding %d accounts…", c.accounts)
	accounts, err := fundMatchAccounts(ctx, db, c.accounts, name+"-"+e.run)
	if err != nil {
		return r, err
	}
	instruments, err := readInstruments(ctx, db, symbols)
	if err != nil {
		return r, err
	}
	backlog, err := matchBacklog(instruments, accounts, c.orders, "match-"+name+"-"+e.run, matchSeed)
	if err != nil {
		return r, err
	}

	workerConfig := settlement.DefaultConfig()
	// Each instrument's backlog on a queue of its own, as the gateway
	// admits them, under a prefix of the run's.
	workerConfig.QueuePrefix, workerConfig.Symbols = "orders-match-"+name+"-"+e.run+".", symbols
	queues := map[string]*emq.Queue{}
	var queueList []*emq.Queue
	for _, symbol := range symbols {
		queue := e.queue.Queue(workerConfig.QueuePrefix+symbol, emq.WithDedupRetention(benchDedupRetention))
		if err := queue.Declare(ctx, orders.KindPlace); err != nil {
			return r, err
		}
		queues[symbol] = queue
		queueList = append(queueList, queue)
	}
	defer func() {
		for _, queue := range queueList {
			if err := queue.Purge(context.WithoutCancel(ctx)); err != nil {
				inRun("cleaning up %s: %v", queue.Name(), err)
			}
		}
	}()
	var (
		ids      []string
		crossing int
		// At a rate, admit runs once the workers are up, and scheduled
		// and admitted are its orders' times.
		admit     func(context.Context) error
		scheduled []time.Time
		admitted  loadResult
	)
	if c.rate == 0 {
		inRun("admitting %d orders on %s…", c.orders, strings.Join(symbols, ", "))
		if ids, crossing, err = admitMatchBacklog(ctx, queues, backlog); err != nil {
			return r, err
		}
	} else {
		var jobs []emq.Job
		if jobs, crossing, err = matchJobs(backlog); err != nil {
			return r, err
		}
		ids = make([]string, len(jobs))
		for i, job := range jobs {
			ids[i] = job.ID
		}
		admit = func(ctx context.Context) error {
			// The owners take their instruments once running: the load
			// starts when every instrument has one, so that their start
			// is not charged to the first orders' latency.
			if err := awaitOwners(ctx, queueList, ownersWait); err != nil {
				return err
			}
			inRun("admitting %d orders on %s at %.0f/s, open loop…", c.orders, strings.Join(symbols, ", "), c.rate)
			scheduled, admitted = admitOpenLoop(ctx, c.rate, len(jobs), inRun, func(ctx context.Context, i int) error {
				admission, err := queues[backlog[i].cmd.Symbol].Admit(ctx, jobs[i])
				if err == nil && admission.Duplicate {
					err = fmt.Errorf("order %s admitted as a duplicate of %s", jobs[i].ID, admission.ID)
				}
				return err
			})
			if admitted.Errors > 0 || admitted.Orders < int64(len(jobs)) {
				return fmt.Errorf("%d of %d orders admitted, %d failed, the first: %s", admitted.Orders, len(jobs), admitted.Errors, admitted.FirstError)
			}
			return nil
		}
	}
	r.Crossing = crossing

	var profiler *runProfiler
	if c.profile {
		// Closing the pool's connections flushes their backends'
		// statistics before the counters are read.
		db.Reset()
		if profiler, err = newRunProfiler(ctx, s, e.queue.Redis(), databaseURL, database); err != nil {
			return r, fmt.Errorf("profile: %w", err)
		}
		defer profiler.close()
		if err := profiler.begin(ctx); err != nil {
			return r, fmt.Errorf("profile: %w", err)
		}
	}
	inRun("%d workers × concurrency %d matching %d orders…", c.workers, workerConfig.Concurrency, c.orders)
	profiles := &goProfiles{cpuPath: c.cpuProfile, memPath: c.memProfile}
	if err := profiles.start(name); err != nil {
		return r, err
	}
	seconds, coherenceSeconds, err := e.workThrough(ctx, databaseURL, s.redisURL, c.workers, workerConfig, queueList, c.orders, profiler, admit, inRun)
	if err := errors.Join(err, profiles.stop(name)); err != nil {
		return r, err
	}
	if r.Profile, err = profiler.end(ctx); err != nil {
		return r, fmt.Errorf("profile: %w", err)
	}
	r.Seconds, r.CoherenceSeconds = seconds.Seconds(), coherenceSeconds.Seconds()

	if r.orderOutcomes, err = readOutcomes(ctx, db, ids); err != nil {
		return r, err
	}
	if r.Taken != r.Orders {
		dead := int64(0)
		for _, queue := range queueList {
			n, _ := queue.DeadCount(ctx)
			dead += n
		}
		return r, fmt.Errorf("%d of %d orders have a row (%d jobs dead)", r.Taken, r.Orders, dead)
	}
	if err := db.QueryRow(ctx, tradeCountSQL).Scan(&r.AllTrades); err != nil {
		return r, err
	}
	// At a rate the run's length is the schedule's, not the engine's: its
	// orders/s would read as a peak it is not (OpenLoop has the achieved).
	if c.rate == 0 {
		r.PerSecond = float64(r.Taken) / r.Seconds
		r.TradesPerSecond = float64(r.AllTrades) / r.Seconds
	}
	if r.Profile != nil {
		r.Profile.Orders, r.Profile.Trades = r.Taken, r.AllTrades
	}

	done, err := readDone(ctx, queueList, ids)
	if err != nil {
		return r, err
	}
	latencies := doneLatencies(done, func(i int) time.Time { return done[i].created })
	r.LatencySamples = len(latencies)
	if len(latencies) > 0 {
		r.LatencyP50Ms = ms(percentile(latencies, 0.50))
		r.LatencyP99Ms = ms(percentile(latencies, 0.99))
		r.LatencyMaxMs = ms(latencies[len(latencies)-1])
	}
	if c.rate > 0 {
		r.OpenLoop = openLoopFigures(c.rate, scheduled, done, r.Taken, admitted)
	}

	audit, err := postgres.RunAudit(ctx, db)
	if err != nil {
		return r, err
	}
	r.AuditedOrders = audit.Orders
	if n := len(audit.Violations); n > 0 {
		shown := make([]string, 0, 5)
		for _, v := range audit.Violations[:min(n, 5)] {
			shown = append(shown, v.String())
		}
		return r, fmt.Errorf("the audit found %d violations: %s", n, strings.Join(shown, "; "))
	}
	if o := r.OpenLoop; o != nil {
		inRun("%d filled, %d resting, %d canceled, %d rejected; %d trades; offered %.0f orders/s, achieved %.0f; p99 placement → done %.0f ms from the schedule, generator's lag p99 %.1f ms; audit clean (%d orders)",
			r.Filled, r.Resting, r.Canceled, r.Rejected, r.AllTrades, o.OfferedPerSecond, o.AchievedPerSecond, o.LatencyP99Ms, o.AdmitLagP99Ms, r.AuditedOrders)
		return r, nil
	}
	inRun("%d filled, %d resting, %d canceled, %d rejected; %d trades in %.1fs: %.0f orders/s, %.0f trades/s; p99 placement → done %.0f ms; audit clean (%d orders)",
		r.Filled, r.Resting, r.Canceled, r.Rejected, r.AllTrades, r.Seconds, r.PerSecond, r.TradesPerSecond, r.LatencyP99Ms, r.AuditedOrders)
	return r, nil
}

// fundMatchAccounts creates n accounts and deposits into each more of every
// asset than its orders can hold: no order is rejected for funds.
func fundMatchAccounts(ctx context.Context, db *pgxpool.Pool, n int, tag string) ([]string, error) {
	ledger := postgres.NewLedger(db)
	registry := postgres.NewAccounts(db)
	accounts := make([]string, 0, n)
	for i := range n {
		account, err := registry.Create(ctx, "bench-match-"+tag+"-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		for _, funds := range matchFunds {
			if err := ledger.Deposit(ctx, account, funds[0], funds[1]); err != nil {
				return nil, fmt.Errorf("fund %s: %w", account, err)
			}
		}
		accounts = append(accounts, account)
	}
	return accounts, nil
}

// admitMatchBacklog admits the backlog in its order as the placer would
// (the same jobs) and returns the ids and how many are crossing.
func admitMatchBacklog(ctx context.Context, queues map[string]*emq.Queue, backlog []matchOrder) ([]string, int, error) {
	const batch = 1000
	ids := make([]string, 0, len(backlog))
	crossing := 0
	for done := 0; done < len(backlog); {
		n := min(batch, len(backlog)-done)
		lists := map[string][]emq.Job{}
		for i := range n {
			o := backlog[done+i]
			_, job, err := placement.PlaceJob(o.cmd)
			if err != nil {
				return nil, 0, err
			}
			lists[o.cmd.Symbol] = append(lists[o.cmd.Symbol], job)
			ids = append(ids, job.ID)
			if o.crossing {
				crossing++
			}
		}
		for symbol, list := range lists {
			if _, errs := queues[symbol].AdmitMany(ctx, list); errors.Join(errs...) != nil {
				return nil, 0, errors.Join(errs...)
			}
		}
		done += n
	}
	return ids, crossing, nil
}

// matchJobs is the backlog's jobs as the placer makes them, in its order,
// and how many of its orders are crossing.
func matchJobs(backlog []matchOrder) ([]emq.Job, int, error) {
	jobs := make([]emq.Job, len(backlog))
	crossing := 0
	for i, o := range backlog {
		_, job, err := placement.PlaceJob(o.cmd)
		if err != nil {
			return nil, 0, err
		}
		jobs[i] = job
		if o.crossing {
			crossing++
		}
	}
	return jobs, crossing, nil
}

// admitOpenLoop calls admit for orders 0 … n−1 open loop at rate, from
// matchSenders senders, order i scheduled i ÷ rate after the first whatever
// the answers do, and returns each order's scheduled time and the loop's
// result: its latencies are the generator's lag, from the schedule to the
// admission's answer.
func admitOpenLoop(ctx context.Context, rate float64, n int, progress func(string, ...any), admit func(ctx context.Context, i int) error) ([]time.Time, loadResult) {
	scheduled := make([]time.Time, n)
	duration := time.Duration(float64(n) * float64(time.Second) / rate)
	r := openLoopCount(ctx, "open loop", rate, matchSenders, n, duration, progress, func(ctx context.Context, i int, at time.Time) error {
		scheduled[i] = at
		return admit(ctx, i)
	})
	return scheduled, r
}

// openLoopFigures is an open-loop run's figures at rate: its orders'
// scheduled times, their jobs as the queue recorded them once done, the
// orders done and the admissions' open loop.
func openLoopFigures(rate float64, scheduled []time.Time, done []doneJob, orders int, admitted loadResult) *matchOpenLoop {
	o := &matchOpenLoop{OfferedPerSecond: rate, AdmitLagP99Ms: admitted.P99Ms}
	latencies := doneLatencies(done, func(i int) time.Time { return scheduled[i] })
	o.LatencySamples = len(latencies)
	if len(latencies) > 0 {
		o.LatencyP50Ms = ms(percentile(latencies, 0.50))
		o.LatencyP99Ms = ms(percentile(latencies, 0.99))
		o.LatencyMaxMs = ms(latencies[len(latencies)-1])
	}
	// The last job done is among those kept: the queue keeps the last
	// finished.
	var last time.Time
	for _, d := range done {
		if d.kept && d.finished.After(last) {
			last = d.finished
		}
	}
	if len(scheduled) > 0 && last.After(scheduled[0]) {
		o.Seconds = last.Sub(scheduled[0]).Seconds()
		o.AchievedPerSecond = float64(orders) / o.Seconds
	}
	return o
}

// workThrough runs workers worker processes at config until queue is
// drained, then until the balances' coherence queue is, and stops them. It
// returns the times from the workers' start until each was drained. The
// profiler (nil: none) gets the workers' metrics and is told when the
// coherence queue is drained. admit (nil: none, the jobs are admitted
// already) runs once every worker is up, and the wait for the drain starts
// when it returned.
func (e *env) workThrough(ctx context.Context, databaseURL, redisURL string, workers int, config settlement.Config, queues []*emq.Queue, total int, profiler *runProfiler, admit func(context.Context) error, progress func(string, ...any)) (drained, coherent time.Duration, err error) {
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	start := time.Now()
	errs := make([]error, workers)
	var running sync.WaitGroup
	// A worker returns before it is stopped only when it failed; the figure
	// would then be of fewer workers, so the wait ends there.
	exited := make(chan struct{})
	var exit sync.Once
	// ready is closed once every worker is connected and set up.
	ready := make(chan struct{})
	var starting atomic.Int64
	starting.Store(int64(workers))
	for i := range workers {
		metrics := profiler.registerer()
		running.Go(func() {
			errs[i] = e.runWorker(workCtx, databaseURL, redisURL, config, metrics, profiler.redisHook(), func() {
				if starting.Add(-1) == 0 {
					close(ready)
				}
			})
			exit.Do(func() { close(exited) })
		})
	}
	stop := func() error {
		stopWork()
		running.Wait()
		return errors.Join(errs...)
	}
	if admit != nil {
		if err := admitWorking(ctx, admit, ready, exited); err != nil {
			return 0, 0, errors.Join(err, stop())
		}
	}
	if drained, err = e.waitDrained(ctx, queues, total, "orders done", progress, start, exited); err != nil {
		return 0, 0, errors.Join(err, stop())
	}
	// The coherence queue is shared by every database's workers: it is
	// drained before the next run's workers start on another database.
	var balances []*emq.Queue
	for _, name := range placement.CoherenceQueues(placement.BalancesTable) {
		balances = append(balances, e.queue.Queue(name))
	}
	if coherent, err = e.waitDrained(ctx, balances, 0, "coherence jobs left", progress, start, exited); err != nil {
		return 0, 0, errors.Join(err, stop())
	}
	profiler.drained()
	return drained, coherent, stop()
}

// ownersWait bounds awaitOwners: a worker takes its share within a few of
// its roster's polls (250 ms).
const ownersWait = 15 * time.Second

// awaitOwners waits until every queue has an owner, for at most wait.
func awaitOwners(ctx context.Context, queues []*emq.Queue, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for _, queue := range queues {
		for {
			state, err := queue.Ownership().Owner(ctx)
			if err != nil {
				return err
			}
			if state.Holder != "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s has no owner %s after the workers started", queue.Name(), wait)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// admitWorking waits until every worker is up (ready), then runs admit; a
// worker stopping first (exited) ends both.
func admitWorking(ctx context.Context, admit func(context.Context) error, ready, exited <-chan struct{}) error {
	select {
	case <-ready:
	case <-exited:
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("a worker stopped before the backlog was admitted")
	case <-ctx.Done():
		return ctx.Err()
	}
	admitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	admitted := make(chan error, 1)
	go func() { admitted <- admit(admitCtx) }()
	select {
	case err := <-admitted:
		return err
	case <-exited:
		cancel()
		<-admitted
		if err := ctx.Err(); err != nil {
			return err
		}
		return errors.New("a worker stopped while the backlog was admitted")
	}
}

// doneJob is an order's job as the queue recorded it once done, on Redis's
// clock: kept is false for one whose record the queue no longer keeps (it
// keeps the last emq.DefaultRetention finished).
type doneJob struct {
	created, finished time.Time
	kept              bool
}

// readDone reads the jobs ids from whichever of queues holds each; every
// one kept must be done.
func readDone(ctx context.Context, queues []*emq.Queue, ids []string) ([]doneJob, error) {
	const readers = 16
	done := make([]doneJob, len(ids))
	errs := make([]error, readers)
	var reading sync.WaitGroup
	for r := range readers {
		reading.Go(func() {
			for i := r; i < len(ids); i += readers {
				job, err := findJob(ctx, queues, ids[i])
				if errors.Is(err, emq.ErrNotFound) {
					continue
				}
				if err != nil {
					errs[r] = err
					return
				}
				if job.State != emq.StateDone || job.Finished.IsZero() {
					errs[r] = fmt.Errorf("job %s is %s, not done", ids[i], job.State)
					return
				}
				done[i] = doneJob{created: job.Created, finished: job.Finished, kept: true}
			}
		})
	}
	reading.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return done, nil
}

// doneLatencies is, for each job kept, the time from from(its index) to its
// completion, sorted.
func doneLatencies(done []doneJob, from func(i int) time.Time) []time.Duration {
	latencies := make([]time.Duration, 0, len(done))
	for i, d := range done {
		if d.kept {
			latencies = append(latencies, d.finished.Sub(from(i)))
		}
	}
	slices.Sort(latencies)
	return latencies
}

// percentile is the nearest-rank q-quantile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	rank := int(q*float64(len(sorted)) + 0.999999)
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// markdown is the phase's table, one column per run.
func (m matchingResult) markdown() string {
	var b strings.Builder
	b.WriteString("| matching |")
	for _, run := range m.Runs {
		fmt.Fprintf(&b, " %s (%s) |", run.Name, strings.Join(run.Symbols, ", "))
	}
	b.WriteString("\n|---|")
	b.WriteString(strings.Repeat("---:|", len(m.Runs)))
	b.WriteString("\n")
	row := func(label string, cell func(matchRun) string) {
		b.WriteString("| " + label + " |")
		for _, run := range m.Runs {
			b.WriteString(" " + cell(run) + " |")
		}
		b.WriteString("\n")
	}
	row(fmt.Sprintf("workers × concurrency (cmd/worker defaults), %d accounts, fresh database", m.Accounts), func(matchRun) string {
		return fmt.Sprintf("%d × %d", m.Workers, m.WorkerConcurrency)
	})
	row("orders (crossing)", func(r matchRun) string { return fmt.Sprintf("%d (%d)", r.Orders, r.Crossing) })
	row("filled / resting / canceled / rejected", func(r matchRun) string {
		return fmt.Sprintf("%d / %d / %d / %d", r.Filled, r.Resting, r.Canceled, r.Rejected)
	})
	row("trades", func(r matchRun) string { return strconv.Itoa(r.AllTrades) })
	row("seconds until every order was final or resting", func(r matchRun) string { return fmt.Sprintf("%.2f", r.Seconds) })
	// At a rate these are left out: the schedule, not the engine, set
	// the run's length (the achieved rate is below).
	perSecond := func(v float64) string {
		if m.Rate > 0 {
			return "–"
		}
		return fmt.Sprintf("%.0f", v)
	}
	row("orders/s to final or resting", func(r matchRun) string { return perSecond(r.PerSecond) })
	row("trades/s", func(r matchRun) string { return perSecond(r.TradesPerSecond) })
	if m.Rate == 0 {
		row("placement → done p50 / p99 / max ms (backlog admitted first: queueing)", func(r matchRun) string {
			return fmt.Sprintf("%.0f / %.0f / %.0f", r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
		})
	} else {
		open := func(cell func(matchOpenLoop) string) func(matchRun) string {
			return func(r matchRun) string {
				if r.OpenLoop == nil {
					return "–"
				}
				return cell(*r.OpenLoop)
			}
		}
		row("offered orders/s (-match-rate: the backlog admitted open loop once the workers were up)", open(func(o matchOpenLoop) string {
			return fmt.Sprintf("%.0f", o.OfferedPerSecond)
		}))
		row("achieved orders/s (done ÷ first scheduled time → last completion)", open(func(o matchOpenLoop) string {
			return fmt.Sprintf("%.0f (%.2f s)", o.AchievedPerSecond, o.Seconds)
		}))
		row("placement → done p50 / p99 / max ms, from each order's scheduled time to its completion on Redis's clock (ms); orders timed: the queue keeps the last 10,000 done", func(r matchRun) string {
			if r.OpenLoop == nil {
				return "–"
			}
			o := r.OpenLoop
			return fmt.Sprintf("%.0f / %.0f / %.0f (%d of %d)", o.LatencyP50Ms, o.LatencyP99Ms, o.LatencyMaxMs, o.LatencySamples, r.Orders)
		})
		row("admission → done p50 / p99 / max ms (the queue's admission time: the generator's lag left out)", func(r matchRun) string {
			return fmt.Sprintf("%.0f / %.0f / %.0f", r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
		})
		row("generator's lag p99 ms (scheduled → admitted)", open(func(o matchOpenLoop) string {
			return fmt.Sprintf("%.2f", o.AdmitLagP99Ms)
		}))
	}
	row("seconds until the coherence consumer had applied every balance change", func(r matchRun) string {
		return fmt.Sprintf("%.2f", r.CoherenceSeconds)
	})
	row("audit (orders looked at)", func(r matchRun) string { return fmt.Sprintf("clean (%d)", r.AuditedOrders) })
	if m.Rate == 0 {
		fmt.Fprintf(&b, "| pgbench TPC-B-like tps (-c %d -j %d, scale %d, %d s), after both runs | %.0f |%s\n",
			m.PgbenchClients, m.PgbenchThreads, m.PgbenchScale, m.PgbenchSeconds, m.PgbenchTPS, strings.Repeat(" |", max(0, len(m.Runs)-1)))
	} else {
		fmt.Fprintf(&b, "| pgbench TPC-B-like tps | not run: %s |%s\n", matchRateNoTarget, strings.Repeat(" |", max(0, len(m.Runs)-1)))
	}
	b.WriteString("\n")
	b.WriteString(profileMarkdown(m.Runs))
	return b.String()
}

// matchRateNoTarget says why an open-loop matching phase has no share of
// pgbench's TPS and no target verdict.
const matchRateNoTarget = "at -match-rate the rate is chosen, not the peak, so the share of pgbench's TPS and the target do not apply"

// spreadRate is the spread run's orders/s; 0 when it did not run, or ran at
// a chosen rate rather than its peak.
func (m matchingResult) spreadRate() float64 {
	if m.Rate > 0 {
		return 0
	}
	for _, r := range m.Runs {
		if len(r.Symbols) > 1 {
			return r.PerSecond
		}
	}
	return 0
}

// targets are the phase's rows of the targets table.
func (m matchingResult) targets() []string {
	lines := make([]string, 0, len(m.Runs))
	for _, r := range m.Runs {
		what := "one hot instrument"
		if len(r.Symbols) > 1 {
			what = fmt.Sprintf("%d instruments", len(r.Symbols))
		}
		if o := r.OpenLoop; o != nil {
			lines = append(lines, fmt.Sprintf("| matching, %s, share of pgbench's TPS | not applicable: %s (offered %.0f orders/s, achieved %.0f, p99 placement → done %.0f ms from the schedule) | n/a |",
				what, matchRateNoTarget, o.OfferedPerSecond, o.AchievedPerSecond, o.LatencyP99Ms))
			continue
		}
		lines = append(lines, fmt.Sprintf("| matching, %s, ≥ %.0f%% of pgbench's TPS | %.0f orders/s / %.0f tps = %.1f%% (%.0f trades/s, p99 placement → done %.0f ms) | %s |",
			what, 100*r.Target, r.PerSecond, m.PgbenchTPS, 100*r.Ratio, r.TradesPerSecond, r.LatencyP99Ms, verdict(r.Met)))
	}
	return lines
}

// findJob reads the job id from whichever of the queues holds it.
func findJob(ctx context.Context, queues []*emq.Queue, id string) (emq.JobInfo, error) {
	for _, queue := range queues {
		job, err := queue.Job(ctx, id)
		if !errors.Is(err, emq.ErrNotFound) {
			return job, err
		}
	}
	return emq.JobInfo{}, emq.ErrNotFound
}

// matchFunds is what every account of the matching and events phases is
// given of each asset: enough that no order is rejected for funds.
var matchFunds = [][2]string{{"USD", "1000000000"}, {"BTC", "10000"}, {"ETH", "100000"}}

// readInstruments reads the instruments of symbols, in their order.
func readInstruments(ctx context.Context, db *pgxpool.Pool, symbols []string) ([]orders.Instrument, error) {
	all, err := postgres.NewInstruments(db).ReadInstruments(ctx)
	if err != nil {
		return nil, err
	}
	instruments := make([]orders.Instrument, len(symbols))
	for i, symbol := range symbols {
		in, ok := all[symbol]
		if !ok {
			return nil, fmt.Errorf("no instrument %s", symbol)
		}
		instruments[i] = in
	}
	return instruments, nil
}
