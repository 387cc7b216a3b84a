package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	flags.StringVar(&m.cpuProfile, "match-cpuprofile", "", "write a Go CPU profile of the bench process (the in-process workers) over each matching run's window to this path plus the run's name")
	flags.StringVar(&m.memProfile, "match-memprofile", "", "write Go allocation profiles of each matching run's window to this path plus the run's name (and .base at its start: pprof -base)")
	flags.BoolVar(&m.profile, "profile", false, "profile each matching run: CPU by process, pg_stat_statements, rows written, lock waits, the batch cycle's phases (starts the bench's PostgreSQL with pg_stat_statements)")
}

func (m matchingConfig) validate() error {
	if m.orders < 100 || m.accounts < 2 || m.workers < 1 {
		return errors.New("want -match-orders ≥ 100, -match-accounts ≥ 2 and -match-workers ≥ 1")
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
	// them on Redis's clock (millisecond resolution). The whole backlog is
	// admitted before the workers start, so this measures queueing: the p99
	// is close to the run's length.
	LatencyP50Ms   float64 `json:"placement_to_done_p50_ms"`
	LatencyP99Ms   float64 `json:"placement_to_done_p99_ms"`
	LatencyMaxMs   float64 `json:"placement_to_done_max_ms"`
	LatencySamples int     `json:"placement_to_done_samples"`
	// AuditedOrders is the orders postgres.Audit looked at; it found no
	// violation, or the phase failed.
	AuditedOrders int64 `json:"audited_orders"`
	// Profile is where the run's time went, with -profile.
	Profile *runProfile `json:"profile,omitempty"`

	Ratio  float64 `json:"to_pgbench_ratio"`
	Target float64 `json:"target_ratio"`
	Met    bool    `json:"met"`
}

// matching runs the phase: each run on a database of its own, then pgbench
// once for both ratios.
func (e *env) matching(ctx context.Context, c matchingConfig, pgbenchClients int, s *servers, duration time.Duration, progress func(string, ...any)) (matchingResult, error) {
	r := matchingResult{Workers: c.workers, WorkerConcurrency: settlement.DefaultConfig().Concurrency, Accounts: c.accounts, Orders: c.orders}
	// The workers run in this process: with cmd/worker's collector target.
	defer settlement.TuneGC(os.Getenv)()
	for _, run := range matchingRuns {
		result, err := e.matchRun(ctx, c, s, run.name, run.symbols, progress)
		if err != nil {
			return r, fmt.Errorf("matching %s: %w", run.name, err)
		}
		result.Target = run.target
		r.Runs = append(r.Runs, result)
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
	inRun("admitting %d orders on %s…", c.orders, strings.Join(symbols, ", "))
	ids, crossing, err := admitMatchBacklog(ctx, queues, backlog)
	if err != nil {
		return r, err
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
	seconds, coherenceSeconds, err := e.workThrough(ctx, databaseURL, s.redisURL, c.workers, workerConfig, queueList, c.orders, profiler, inRun)
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
	r.PerSecond = float64(r.Taken) / r.Seconds
	if r.Profile != nil {
		r.Profile.Orders, r.Profile.Trades = r.Taken, r.AllTrades
	}
	r.TradesPerSecond = float64(r.AllTrades) / r.Seconds

	latencies, err := doneLatencies(ctx, queueList, ids)
	if err != nil {
		return r, err
	}
	r.LatencySamples = len(latencies)
	if len(latencies) > 0 {
		r.LatencyP50Ms = ms(percentile(latencies, 0.50))
		r.LatencyP99Ms = ms(percentile(latencies, 0.99))
		r.LatencyMaxMs = ms(latencies[len(latencies)-1])
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

// workThrough runs workers worker processes at config until queue is
// drained, then until the balances' coherence queue is, and stops them. It
// returns the times from the workers' start until each was drained. The
// profiler (nil: none) gets the workers' metrics and is told when the
// coherence queue is drained.
func (e *env) workThrough(ctx context.Context, databaseURL, redisURL string, workers int, config settlement.Config, queues []*emq.Queue, total int, profiler *runProfiler, progress func(string, ...any)) (drained, coherent time.Duration, err error) {
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	start := time.Now()
	errs := make([]error, workers)
	var running sync.WaitGroup
	// A worker returns before it is stopped only when it failed; the figure
	// would then be of fewer workers, so the wait ends there.
	exited := make(chan struct{})
	var exit sync.Once
	for i := range workers {
		metrics := profiler.registerer()
		running.Go(func() {
			errs[i] = e.runWorker(workCtx, databaseURL, redisURL, config, metrics, profiler.redisHook())
			exit.Do(func() { close(exited) })
		})
	}
	stop := func() error {
		stopWork()
		running.Wait()
		return errors.Join(errs...)
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

// doneLatencies is, for each order whose job record the queue still keeps
// (the last emq.DefaultRetention finished), the time from its admission to
// its completion, sorted.
func doneLatencies(ctx context.Context, queues []*emq.Queue, ids []string) ([]time.Duration, error) {
	const readers = 16
	latencies := make([]time.Duration, len(ids))
	found := make([]bool, len(ids))
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
				latencies[i], found[i] = job.Finished.Sub(job.Created), true
			}
		})
	}
	reading.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	kept := latencies[:0]
	for i, d := range latencies {
		if found[i] {
			kept = append(kept, d)
		}
	}
	slices.Sort(kept)
	return kept, nil
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
	row("orders/s to final or resting", func(r matchRun) string { return fmt.Sprintf("%.0f", r.PerSecond) })
	row("trades/s", func(r matchRun) string { return fmt.Sprintf("%.0f", r.TradesPerSecond) })
	row("placement → done p50 / p99 / max ms (backlog admitted first: queueing)", func(r matchRun) string {
		return fmt.Sprintf("%.0f / %.0f / %.0f", r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
	})
	row("seconds until the coherence consumer had applied every balance change", func(r matchRun) string {
		return fmt.Sprintf("%.2f", r.CoherenceSeconds)
	})
	row("audit (orders looked at)", func(r matchRun) string { return fmt.Sprintf("clean (%d)", r.AuditedOrders) })
	fmt.Fprintf(&b, "| pgbench TPC-B-like tps (-c %d -j %d, scale %d, %d s), after both runs | %.0f |%s\n",
		m.PgbenchClients, m.PgbenchThreads, m.PgbenchScale, m.PgbenchSeconds, m.PgbenchTPS, strings.Repeat(" |", max(0, len(m.Runs)-1)))
	b.WriteString("\n")
	b.WriteString(profileMarkdown(m.Runs))
	return b.String()
}

// spreadRate is the spread run's orders/s; 0 when it did not run.
func (m matchingResult) spreadRate() float64 {
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
