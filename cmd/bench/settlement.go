package main

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/settlement"
)

var (
	//go:embed sql/settlement_outcomes.sql
	settlementOutcomesSQL string
	//go:embed sql/commit_count.sql
	commitCountSQL string
	//go:embed sql/trade_count.sql
	tradeCountSQL string
	//go:embed sql/order_commits.sql
	orderCommitsSQL string
)

// settlementConfig is the settlement phase's part of the command line.
type settlementConfig struct {
	workers int
	orders  int
	// pgbenchClients is pgbench's -c; 0 takes the workers' settlement
	// concurrency (see pgbenchClientsFor).
	pgbenchClients int
}

func (s *settlementConfig) register(flags *flag.FlagSet) {
	flags.IntVar(&s.workers, "settle-workers", 4, "worker processes (run in-process, wired as cmd/worker) of the settlement phase")
	flags.IntVar(&s.orders, "settle-orders", 10000, "order backlog the settlement phase settles")
	flags.IntVar(&s.pgbenchClients, "pgbench-clients", 0,
		"pgbench -c of the settlement and matching phases' references; 0 takes the workers' settlement concurrency, at most 32")
}

func (s settlementConfig) validate() error {
	if s.workers < 1 || s.orders < 100 || s.pgbenchClients < 0 {
		return errors.New("want -settle-workers ≥ 1, -settle-orders ≥ 100 and -pgbench-clients ≥ 0")
	}
	return nil
}

// settleStall is how long the backlog may go without an order becoming
// final before the phase gives up.
const settleStall = time.Minute

// settlementResult is the settlement phase: orders settled end to end by
// worker processes, against pgbench's TPC-B-like transactions on the same
// PostgreSQL server.
type settlementResult struct {
	Workers           int `json:"workers"`
	WorkerConcurrency int `json:"worker_concurrency"`
	Orders            int `json:"orders"`
	orderOutcomes
	// Seconds runs from the workers' start (their connecting included) until
	// the last order's job left the queue, its orders row committed.
	Seconds float64 `json:"seconds"`
	// PerSecond counts every order a worker took: filled, resting, canceled
	// or rejected, each is one order decided in a settlement transaction;
	// the backlog is funded so that none is rejected.
	PerSecond float64 `json:"final_orders_per_second"`
	// CoherenceSeconds runs from the same start until the balance coherence
	// consumer had applied every outbox row the settlements wrote.
	CoherenceSeconds float64 `json:"coherence_seconds"`
	// CommitsPerOrder is PostgreSQL's committed transactions of the phase's
	// database per order, the coherence consumer's included.
	CommitsPerOrder float64 `json:"commits_per_order"`

	pgbenchResult
	// Ratio is PerSecond over PgbenchTPS.
	Ratio float64 `json:"settlement_to_pgbench_ratio"`
	Met   bool    `json:"met"`
}

// orderOutcomes is what became of a phase's orders, read from their rows.
type orderOutcomes struct {
	// Taken is the orders with a row: a worker decided them.
	Taken    int `json:"taken"`
	Filled   int `json:"filled"`
	Resting  int `json:"resting"`
	Canceled int `json:"canceled"`
	Rejected int `json:"rejected"`
	// Trades is the trades the orders took part in as the taker.
	Trades int `json:"trades"`
}

// readOutcomes reads what became of the orders ids on db.
func readOutcomes(ctx context.Context, db *pgxpool.Pool, ids []string) (orderOutcomes, error) {
	var o orderOutcomes
	err := db.QueryRow(ctx, settlementOutcomesSQL, ids).Scan(&o.Taken, &o.Filled, &o.Resting, &o.Canceled, &o.Rejected, &o.Trades)
	return o, err
}

// pgbenchResult is pgbench's run beside a phase: its settings and its
// transactions per second.
type pgbenchResult struct {
	PgbenchClients int     `json:"pgbench_clients"`
	PgbenchThreads int     `json:"pgbench_threads"`
	PgbenchScale   int     `json:"pgbench_scale"`
	PgbenchSeconds int     `json:"pgbench_seconds"`
	PgbenchTPS     float64 `json:"pgbench_tps"`
}

// settlement admits a backlog of orders, settles it with the settlement package's
// workers at cmd/worker's defaults (the phase measures what a worker
// deployed without flags does), then runs pgbench against the same server.
func (e *env) settlement(ctx context.Context, c settlementConfig, s *servers, duration time.Duration, progress func(string, ...any)) (settlementResult, error) {
	r := settlementResult{Workers: c.workers, WorkerConcurrency: settlement.DefaultConfig().Concurrency, Orders: c.orders}
	if err := e.settleBacklog(ctx, &r, s, progress); err != nil {
		return r, fmt.Errorf("settlement: %w", err)
	}
	r.PgbenchClients = c.pgbenchClients
	if r.PgbenchClients == 0 {
		r.PgbenchClients = pgbenchClientsFor(c.workers * r.WorkerConcurrency)
	}
	if err := runPgbench(ctx, &r.pgbenchResult, s.databaseURL, "bench_pgbench_"+e.run, duration, progress); err != nil {
		return r, fmt.Errorf("settlement: pgbench: %w", err)
	}
	if r.PgbenchTPS > 0 {
		r.Ratio = r.PerSecond / r.PgbenchTPS
	}
	r.Met = r.Ratio >= 0.3
	return r, nil
}

// pgbenchClientsFor matches pgbench's clients to the settlement
// transactions the workers can have open at once (each handler holds one
// connection for its settlement), so both sides offer the server the same
// concurrency. The cap bounds pgbench's initialization, whose scale follows
// the clients: on a 2-core machine -c 8 and -c 32 reach about the same tps.
func pgbenchClientsFor(handlers int) int {
	return min(handlers, 32)
}

// settleBacklog admits the backlog and times the workers through it.
//
// The backlog rides a queue of its own, not BTC-USD's orders queue: the
// admission phase leaves tens of thousands of unsettled buys there, which
// would make the phase's length depend on the admission rate, and would be
// matched by the backlog's sells. The queue is otherwise the orders queue: same scripts, same
// default options, the order job kind, the Settler as handler.
func (e *env) settleBacklog(ctx context.Context, r *settlementResult, s *servers, progress func(string, ...any)) error {
	workerConfig := settlement.DefaultConfig()
	workerConfig.QueuePrefix, workerConfig.Symbols = "orders-settle-"+e.run+".", []string{"BTC-USD"}
	queue := e.queue.Queue(workerConfig.QueuePrefix+"BTC-USD", emq.WithDedupRetention(benchDedupRetention))
	if err := queue.Declare(ctx, orders.KindPlace); err != nil {
		return err
	}
	progress("settlement: admitting %d orders…", r.Orders)
	ids, err := e.admitSettlementBacklog(ctx, queue, r.Orders)
	if err != nil {
		return err
	}
	commitsBefore, err := e.commits(ctx)
	if err != nil {
		return err
	}

	progress("settlement: %d workers × concurrency %d settling %d orders…", r.Workers, r.WorkerConcurrency, r.Orders)
	inPhase := func(format string, a ...any) { progress("settlement: "+format, a...) }
	settled, coherent, err := e.workThrough(ctx, s.databaseURL, s.redisURL, r.Workers, workerConfig, []*emq.Queue{queue}, r.Orders, nil, nil, inPhase)
	if err != nil {
		return err
	}
	r.Seconds, r.CoherenceSeconds = settled.Seconds(), coherent.Seconds()

	if r.orderOutcomes, err = readOutcomes(ctx, e.db, ids); err != nil {
		return err
	}
	if r.Taken != r.Orders {
		dead, _ := queue.DeadCount(ctx)
		return fmt.Errorf("%d of %d orders have a row (%d jobs dead)", r.Taken, r.Orders, dead)
	}
	r.PerSecond = float64(r.Orders) / r.Seconds
	// The workers' connections are closed, so their backends have flushed
	// their statistics.
	commitsAfter, err := e.commits(ctx)
	if err != nil {
		return err
	}
	r.CommitsPerOrder = float64(commitsAfter-commitsBefore) / float64(r.Orders)
	progress("settlement: %d filled, %d resting, %d canceled, %d rejected, %d trades in %.1fs: %.0f orders/s; coherence queue drained at %.1fs",
		r.Filled, r.Resting, r.Canceled, r.Rejected, r.Trades, r.Seconds, r.PerSecond, r.CoherenceSeconds)
	if err := queue.Purge(context.WithoutCancel(ctx)); err != nil {
		progress("settlement: cleaning up %s: %v", queue.Name(), err)
	}
	return nil
}

// admitSettlementBacklog admits n orders spread over the funded accounts,
// each account alternating buys and sells, and returns their ids. All are
// limit orders of one size at one price in BTC-USD, so they match each
// other in the book: a buy takes the sells resting before it and rests when
// there are none (or only its own account's, which self-trade prevention
// cancels it against), and likewise a sell; each order is filled as a taker
// or rests and is filled as a maker later, nearly all within the backlog.
func (e *env) admitSettlementBacklog(ctx context.Context, queue *emq.Queue, n int) ([]string, error) {
	const batch = 1000
	ids := make([]string, 0, n)
	for done := 0; done < n; {
		list := make([]emq.Job, min(batch, n-done))
		for i := range list {
			seq := done + i
			// Buys and sells of one size at one price cross each other in
			// the book, so the accounts' balances stay where they were
			// (but for the fees).
			side := orders.Buy
			if (seq/len(e.accounts))%2 == 1 {
				side = orders.Sell
			}
			job, err := orderJob(e.accounts[seq%len(e.accounts)], fmt.Sprintf("settle-%s-%d", e.run, seq), side)
			if err != nil {
				return nil, err
			}
			list[i] = job
			ids = append(ids, job.ID)
		}
		if _, errs := queue.AdmitMany(ctx, list); errors.Join(errs...) != nil {
			return nil, errors.Join(errs...)
		}
		done += len(list)
	}
	return ids, nil
}

// runWorker is one worker process as cmd/worker runs it: connections of its
// own, as settlement.Connect sizes them, and the settlement package's Worker. Only the
// /metrics listener is left out; nothing scrapes it here. It calls ready
// (when not nil) once connected and set up, before it runs, and returns
// when ctx ends and the worker has drained.
func (e *env) runWorker(ctx context.Context, databaseURL, redisURL string, config settlement.Config, metrics prometheus.Registerer, hook redis.Hook, ready func()) error {
	deps, err := settlement.Connect(ctx, databaseURL, redisURL, config, e.logger)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	defer deps.Close()
	if hook != nil {
		deps.Queues.Redis().AddHook(hook)
	}
	deps.Metrics = metrics
	worker, err := settlement.New(ctx, deps, config)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	if ready != nil {
		ready()
	}
	return worker.Run(ctx)
}

// stoppedOr is err, or nil when ctx ended first: a worker still starting
// when a short run has drained already is stopped, not failed.
func stoppedOr(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// waitDrained waits until queue has no job pending, leased or waiting for a
// retry, printing the count left every two seconds (progress names the
// phase), and returns the time since start. total is the count the progress lines speak of (0: they give
// the count left).
func (e *env) waitDrained(ctx context.Context, queues []*emq.Queue, total int, what string, progress func(string, ...any), start time.Time, exited <-chan struct{}) (time.Duration, error) {
	name := queues[0].Name()
	if len(queues) > 1 {
		name += fmt.Sprintf(" and %d more", len(queues)-1)
	}
	lastReport := time.Now()
	lastChange, lastLeft := time.Now(), int64(-1)
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	for {
		n, err := backlogOf(ctx, queues)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return time.Since(start), nil
		}
		if n != lastLeft {
			lastChange, lastLeft = time.Now(), n
		}
		if time.Since(lastChange) > settleStall {
			return 0, fmt.Errorf("%s: %d jobs left on %s, none finished for %s", what, n, name, settleStall)
		}
		if time.Since(lastReport) >= 2*time.Second {
			lastReport = time.Now()
			if total > 0 {
				progress("%d of %d %s…", int64(total)-n, total, what)
			} else {
				progress("%d %s…", n, what)
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-exited:
			return 0, fmt.Errorf("%s: a worker stopped with %d jobs left on %s", what, n, name)
		case <-ticker.C:
		}
	}
}

// commits is the committed transactions of the bench's database so far.
func (e *env) commits(ctx context.Context) (int64, error) {
	var n int64
	err := e.db.QueryRow(ctx, commitCountSQL).Scan(&n)
	return n, err
}

// pgbenchTPS is pgbench's summary line; connecting is left out of it, as
// the settlement workers connect before the timed part too.
var pgbenchTPS = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// runPgbench runs pgbench's built-in TPC-B-like script for duration against
// a database of its own on the server databaseURL names, and drops it after.
// The scale is the clients': with fewer branches than clients, the clients
// queue for the branch rows, and pgbench's own documentation calls such a
// run unrepresentative.
func runPgbench(ctx context.Context, r *pgbenchResult, databaseURL, database string, duration time.Duration, progress func(string, ...any)) error {
	pgbench, err := postgresTool("pgbench")
	if err != nil {
		return err
	}
	r.PgbenchScale = r.PgbenchClients
	r.PgbenchThreads = min(2, r.PgbenchClients)
	r.PgbenchSeconds = max(1, int(duration.Round(time.Second).Seconds()))

	target, drop, err := createDatabase(ctx, databaseURL, database)
	if err != nil {
		return err
	}
	defer func() {
		if err := drop(); err != nil {
			progress("pgbench: %v", err)
		}
	}()
	progress("pgbench: initializing scale %d…", r.PgbenchScale)
	if out, err := exec.CommandContext(ctx, pgbench, "--initialize", "--quiet", "--scale", strconv.Itoa(r.PgbenchScale), target).CombinedOutput(); err != nil {
		return fmt.Errorf("initialize: %w: %s", err, out)
	}
	progress("pgbench: TPC-B-like, %d clients, %d threads for %ds…", r.PgbenchClients, r.PgbenchThreads, r.PgbenchSeconds)
	cmd := exec.CommandContext(ctx, pgbench, "--client", strconv.Itoa(r.PgbenchClients), "--jobs", strconv.Itoa(r.PgbenchThreads),
		"--time", strconv.Itoa(r.PgbenchSeconds), "--progress", "2", target)
	var summary strings.Builder
	cmd.Stdout = &summary
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	// pgbench's progress lines go to stderr; they are passed on as they come.
	var errorLines []string
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "progress:") {
			progress("pgbench %s", line)
		} else if line != "" {
			errorLines = append(errorLines, line)
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.Join(errorLines, "; "))
	}
	match := pgbenchTPS.FindStringSubmatch(summary.String())
	if match == nil {
		return fmt.Errorf("no tps line in its output: %s", summary.String())
	}
	if r.PgbenchTPS, err = strconv.ParseFloat(match[1], 64); err != nil {
		return err
	}
	progress("pgbench: %.0f transactions/s", r.PgbenchTPS)
	return nil
}

// postgresTool is the path of a PostgreSQL client program: beside the
// server's binaries, or on PATH.
func postgresTool(name string) (string, error) {
	if dir, err := postgresBin(); err == nil {
		if path := filepath.Join(dir, name); fileExists(path) {
			return path, nil
		}
	}
	return exec.LookPath(name)
}

// createDatabase creates database on the server databaseURL names and
// returns its URL and a drop that removes it (closing its connections
// first is the caller's part).
func createDatabase(ctx context.Context, databaseURL, database string) (string, func() error, error) {
	createdb, err := postgresTool("createdb")
	if err != nil {
		return "", nil, err
	}
	dropdb, err := postgresTool("dropdb")
	if err != nil {
		return "", nil, err
	}
	target, err := url.Parse(databaseURL)
	if err != nil {
		return "", nil, err
	}
	target.Path = "/" + database
	// A connection string as the maintenance database is libpq's: its host,
	// port, user and options are the bench's.
	if out, err := exec.CommandContext(ctx, createdb, "--maintenance-db="+databaseURL, database).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("createdb %s: %w: %s", database, err, out)
	}
	drop := func() error {
		if out, err := exec.Command(dropdb, "--if-exists", "--maintenance-db="+databaseURL, database).CombinedOutput(); err != nil {
			return fmt.Errorf("dropdb %s: %w: %s", database, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return target.String(), drop, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// markdown is the phase's table.
func (s settlementResult) markdown() string {
	var b strings.Builder
	b.WriteString("| settlement | value |\n|---|---:|\n")
	fmt.Fprintf(&b, "| workers × concurrency (cmd/worker defaults, coherence consumer and relay sweep beside) | %d × %d |\n", s.Workers, s.WorkerConcurrency)
	fmt.Fprintf(&b, "| orders (filled / resting / canceled / rejected) | %d (%d / %d / %d / %d) |\n",
		s.Orders, s.Filled, s.Resting, s.Canceled, s.Rejected)
	fmt.Fprintf(&b, "| trades | %d |\n", s.Trades)
	fmt.Fprintf(&b, "| seconds until every order was final or resting | %.2f |\n", s.Seconds)
	fmt.Fprintf(&b, "| orders/s to final or resting | %.0f |\n", s.PerSecond)
	fmt.Fprintf(&b, "| seconds until the coherence consumer had applied every balance change | %.2f |\n", s.CoherenceSeconds)
	fmt.Fprintf(&b, "| PostgreSQL commits per order | %.1f |\n", s.CommitsPerOrder)
	fmt.Fprintf(&b, "| pgbench TPC-B-like tps (-c %d -j %d, scale %d, %d s) | %.0f |\n",
		s.PgbenchClients, s.PgbenchThreads, s.PgbenchScale, s.PgbenchSeconds, s.PgbenchTPS)
	b.WriteString("\n")
	return b.String()
}
