// Package chaos is a seeded chaos run of the whole system as real processes:
// one gateway and three workers (built from cmd/gateway and cmd/worker), a
// Redis primary and its replica, each with `appendonly yes` and
// `appendfsync always`, and PostgreSQL. The processes reach the primary
// through a proxy (testserver.Proxy), and the gateway answers 202 only once
// the replica holds an admission (ADMIT_WAIT_REPLICAS=1). A client places
// orders at a steady pace, retrying with the same client_order_id and body
// on 5xx (the 503 of an admission no replica held in time among them),
// connection errors and timeouts, while a schedule drawn from the seed
// SIGKILLs and restarts workers, SIGSTOPs one worker past its lease and
// resumes it, SIGKILLs the Redis primary and restarts it from its AOF once,
// stops and starts PostgreSQL once, and fails Redis over twice, there and
// back. A failover promotes the replica (REPLICAOF NO ONE) while the old
// primary goes on taking writes alone for a moment, so it admits orders the
// replica never sees (each answered 503, as no replica holds it) and workers
// may settle them; then it repoints the proxy to the promoted replica,
// cutting every connection, records the orders the old primary holds and
// the promoted one does not (the admissions the failover lost), and makes
// the old primary a replica of the new one.
//
// A client's retry of an order whose admission a failover lost is admitted
// again under a new order id; if a worker had taken the lost one from the
// old primary and settled it, settlement rejects whichever of the two comes
// second (duplicate_client_order_id, duplicate_of naming the first). So the
// checker asserts, once every acknowledged order is final:
//
//   - the client was acknowledged (202, or a 200 replay) for every order;
//   - no acknowledged order is among the admissions a failover lost: the
//     replica held each one, whatever failed;
//   - every acknowledged order has exactly one row, final or resting in the
//     book, of its client_order_id;
//   - every client_order_id with rows is one the client placed, and
//     exactly one of its orders holds it (duplicate_of empty); every other
//     order of it is rejected, duplicate_client_order_id, with duplicate_of
//     naming that holder; and each of its orders is the acknowledged one or
//     an admission a failover lost (so without a failover a client_order_id
//     has one order);
//   - nothing is pending, active, delayed or dead in the queue;
//   - no order held its funds twice, and every resting or filled order held
//     them once;
//   - the orders both traded and were rejected;
//   - postgres.Audit passes: the book, trades, holds, fees and the ledger,
//     and that no duplicate of a client_order_id moved money
//     (client_order_id_settled_once);
//   - every account's events, its log in Redis after the history the
//     workers' archivers wrote to PostgreSQL (a hot tail of 50 events or
//     5 s), are gapless from 1 with no event twice, hold
//     every acknowledged order's order.accepted, and its events end each
//     order at the state PostgreSQL holds (the workers wait for the replica
//     on their appends, WORKER_WAIT_REPLICAS=1), within 20 s of the drain;
//   - the book of every instrument, its resting orders in PostgreSQL, is
//     the one each owner held when the workers stopped (its digest, which
//     the owner logs as it gives the instrument up) and the one a fresh
//     owner taking the instrument over loads (orders, priority and
//     sequences, remaining quantities, holds);
//   - every cached account is served its balances as PostgreSQL holds them
//     within 15 s of the drain: through the Redis kill and the failovers,
//     the coherence job mode and the cache's heals leave nothing behind;
//   - after the run the replica follows the primary, and no process logged
//     an API key.
//
// The same seed draws the same schedule and the same orders (the timing of
// the processes is not replayed, so a failure may need a few runs):
//
//	make chaos SEED=7 ORDERS=5000
package chaos

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/metricsserver"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/ordergen"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// The checker's reads of the books.
var (
	//go:embed sql/orders_final_count.sql
	ordersFinalCountSQL string
	//go:embed sql/orders_read.sql
	ordersReadSQL string
	//go:embed sql/hold_doubles.sql
	holdDoublesSQL string
	//go:embed sql/trades_count.sql
	tradesCountSQL string
	//go:embed sql/orders_status_count.sql
	ordersStatusCountSQL string
)

// Config sizes one run.
type Config struct {
	Seed   uint64
	Orders int
	// Span is how long placing the orders should take at a steady pace;
	// faults fall inside it.
	Span time.Duration
	// Clients bounds the requests in flight.
	Clients  int
	Accounts int
	Workers  int
	Lease    time.Duration
	// Drain bounds how long, after the client is done, every acknowledged
	// order may take to reach its final state.
	Drain time.Duration
	// Binaries built by BuildBinaries.
	GatewayBinary, WorkerBinary string
}

func (c *Config) defaults() {
	if c.Span == 0 {
		c.Span = max(15*time.Second, time.Duration(c.Orders)*time.Second/100)
	}
	if c.Clients == 0 {
		c.Clients = 16
	}
	if c.Accounts == 0 {
		c.Accounts = 20
	}
	if c.Workers == 0 {
		c.Workers = 3
	}
	if c.Lease == 0 {
		c.Lease = 2 * time.Second
	}
	if c.Drain == 0 {
		c.Drain = 2 * time.Minute
	}
}

// FaultKind names a fault.
type FaultKind string

const (
	KillWorker    FaultKind = "sigkill-worker" // SIGKILL, then start a new process after Hold
	StopWorker    FaultKind = "sigstop-worker" // SIGSTOP for Hold (past the lease), then SIGCONT
	RestartRedis  FaultKind = "restart-redis"  // SIGKILL the Redis primary, start it again after Hold (AOF replay)
	RestartPostgr FaultKind = "restart-postgres"
	// FailoverRedis promotes the replica, leaves the old primary taking
	// writes alone for Hold, then repoints the proxy and makes the old
	// primary a replica of the new one (run.failover).
	FailoverRedis FaultKind = "failover-redis"
)

// Fault is one entry of the schedule.
type Fault struct {
	At     time.Duration // offset from the start of placing
	Kind   FaultKind
	Worker int // for worker faults
	// Hold is the downtime, how long the worker stays stopped, or how long
	// the old primary takes writes alone after a failover's promotion.
	Hold time.Duration
}

func (f Fault) String() string {
	switch f.Kind {
	case KillWorker, StopWorker:
		return fmt.Sprintf("%s worker-%d hold %s", f.Kind, f.Worker+1, f.Hold.Round(time.Millisecond))
	case FailoverRedis:
		return fmt.Sprintf("%s, the old primary alone for %s", f.Kind, f.Hold.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s hold %s", f.Kind, f.Hold.Round(time.Millisecond))
}

// Schedule draws the faults of a run from seed: three worker kills, one
// SIGSTOP past the lease, one Redis restart, one PostgreSQL restart and two
// Redis failovers (there and back), at random offsets within 10%–80% of the
// span, in time order. The failovers are drawn last, so a seed draws the
// other faults it drew before there were failovers.
func Schedule(seed uint64, span, lease time.Duration, workers int) []Fault {
	r := rand.New(rand.NewPCG(seed, 0xfa017))
	at := func() time.Duration {
		return span/10 + time.Duration(r.Int64N(int64(span*7/10)))
	}
	between := func(low, high time.Duration) time.Duration {
		return low + time.Duration(r.Int64N(int64(high-low)))
	}
	var faults []Fault
	for range 3 {
		faults = append(faults, Fault{At: at(), Kind: KillWorker, Worker: r.IntN(workers), Hold: between(0, time.Second)})
	}
	faults = append(faults,
		Fault{At: at(), Kind: StopWorker, Worker: r.IntN(workers), Hold: between(lease+time.Second, lease+3*time.Second)},
		Fault{At: at(), Kind: RestartRedis, Hold: between(200*time.Millisecond, 1500*time.Millisecond)},
		Fault{At: at(), Kind: RestartPostgr, Hold: between(200*time.Millisecond, 1500*time.Millisecond)},
	)
	for range 2 {
		faults = append(faults, Fault{At: at(), Kind: FailoverRedis, Hold: between(200*time.Millisecond, time.Second)})
	}
	slices.SortStableFunc(faults, func(a, b Fault) int { return int(a.At - b.At) })
	return faults
}

// Summary is what a run observed.
type Summary struct {
	Seed          uint64
	Orders        int
	Acknowledged  int
	Accepted      int // 202
	Replayed      int // 200 Idempotent-Replayed
	ClientRetries int
	// RetryStatuses counts why the client retried: a status code ("503
	// not replicated" for an admission no replica held in time), "conn" or
	// "timeout".
	RetryStatuses map[string]int
	// LostAdmissions counts the orders whose admission a failover lost
	// (none acknowledged); LostSettled, those of them a worker had settled
	// (taken from the old primary) before the loss. The client's retry of
	// such an order was admitted again, and one of the two was rejected as
	// the other's duplicate: AcknowledgedDuplicates counts the retries the
	// client was acknowledged for that were.
	LostAdmissions, LostSettled, AcknowledgedDuplicates int
	// Statuses counts the orders rows by status.
	Statuses map[string]int
	// Trades is how many trades the market made; Traded how many orders
	// took part in one at least.
	Trades, Traded  int
	Faults          []string
	PlaceTime       time.Duration
	DrainTime       time.Duration
	Reaped          float64
	StaleRefusals   float64
	WorkerRetries   float64
	WorkerRestarts  int
	GatewayAdmitted float64
	GatewayReplayed float64
	// LiveBooks counts the books owners held when the workers stopped,
	// LoadedBooks those a fresh owner loaded, each compared with
	// PostgreSQL's resting orders (checkBooks).
	LiveBooks, LoadedBooks int
	CheckerProblems        []string
}

func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chaos seed=%d orders=%d acknowledged=%d (202: %d, 200 replay: %d) trades=%d (orders in them: %d)\n",
		s.Seed, s.Orders, s.Acknowledged, s.Accepted, s.Replayed, s.Trades, s.Traded)
	fmt.Fprintf(&b, "  statuses %v\n", s.Statuses)
	fmt.Fprintf(&b, "  client retries=%d %v\n", s.ClientRetries, s.RetryStatuses)
	fmt.Fprintf(&b, "  failovers lost %d unacknowledged admissions, %d of them settled first; acknowledged retries rejected as their duplicates: %d\n",
		s.LostAdmissions, s.LostSettled, s.AcknowledgedDuplicates)
	fmt.Fprintf(&b, "  faults injected=%d, worker processes restarted=%d\n", len(s.Faults), s.WorkerRestarts)
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "    %s\n", f)
	}
	fmt.Fprintf(&b, "  workers (orders queue, at least; a killed process loses its last counts): reaped=%.0f stale refusals=%.0f retries=%.0f\n",
		s.Reaped, s.StaleRefusals, s.WorkerRetries)
	fmt.Fprintf(&b, "  gateway: orders_admitted_total=%.0f orders_replayed_total=%.0f\n", s.GatewayAdmitted, s.GatewayReplayed)
	fmt.Fprintf(&b, "  books compared with PostgreSQL's: %d held by owners as they stopped, %d loaded by a fresh owner\n", s.LiveBooks, s.LoadedBooks)
	fmt.Fprintf(&b, "  placing took %s, drain took %s after the last acknowledgement\n", s.PlaceTime.Round(time.Millisecond), s.DrainTime.Round(time.Millisecond))
	if len(s.CheckerProblems) == 0 {
		b.WriteString("  checker: OK (one row per acknowledged order, one holder per client order, queue empty, one hold per taken order, audit clean)\n")
	} else {
		fmt.Fprintf(&b, "  checker: %d problem(s)\n", len(s.CheckerProblems))
		for _, p := range s.CheckerProblems {
			fmt.Fprintf(&b, "    %s\n", p)
		}
	}
	return b.String()
}

// workerSlot is one of the worker processes, restarted under the same slot.
type workerSlot struct {
	index int
	mu    sync.Mutex // held through a fault on this worker

	stateMu     sync.Mutex
	proc        *process
	metricsAddr string
	instance    int
	// counters of the processes of this slot that are gone, and of the
	// current one at its last scrape
	gone, last map[string]float64
}

var workerCounters = []string{"emq_jobs_reaped_total", "emq_stale_refusals_total", "emq_jobs_retried_total"}

type run struct {
	t   testing.TB
	cfg Config
	dir string
	env []string
	// The processes reach the Redis primary through proxy, which a failover
	// repoints to the replica; primary and replica swap then (only the
	// test goroutine, which runs the faults on the servers, uses them).
	proxy            *testserver.Proxy
	primary, replica *testserver.Redis
	// cluster is the Redis Cluster the run uses instead of primary and
	// replica in cluster mode (EMQ_TEST_REDIS=cluster, see onCluster).
	cluster *testserver.RedisCluster
	// lost holds the orders whose admission a failover lost: the old
	// primary admitted them and the promoted replica never held them.
	lost map[string]bool
	// caches reads the balance cache for the checker.
	caches *coherence.Client
	pg     *testserver.PostgresInstance
	db     *pgxpool.Pool
	// the test's own view of the instruments' queues
	queues []*emq.Queue
	// events are the accounts' logs of events.
	events  *placement.EventLogs
	slots   []*workerSlot
	gateway *process
	gwAddr  string
	// gwMetricsAddr is the gateway's METRICS_ADDR, apart from the API's.
	gwMetricsAddr string
	start         time.Time

	errMu sync.Mutex
	errs  []string

	restarts atomic.Int64
}

func (r *run) errorf(format string, args ...any) {
	message := fmt.Sprintf(format, args...)
	r.errMu.Lock()
	r.errs = append(r.errs, message)
	r.errMu.Unlock()
	r.t.Errorf("chaos: %s", message)
}

func (r *run) logf(format string, args ...any) {
	r.t.Logf("[%8s] %s", time.Since(r.start).Round(time.Millisecond), fmt.Sprintf(format, args...))
}

// startRedis starts the run's Redis and returns the REDIS_URL of the
// processes: a primary and its replica behind the proxy, or, in cluster
// mode, a 3-master cluster of its own with a replica per master, so that
// the admissions and event appends waiting for a replica (ADMIT_ and
// WORKER_WAIT_REPLICAS=1) wait as they do on the single server. Not the
// shared cluster, which has no replicas.
func (r *run) startRedis() string {
	t := r.t
	t.Helper()
	if testserver.ClusterMode() {
		r.cluster = testserver.StartRedisCluster(t, testserver.WithReplicas(1))
		return r.cluster.URL()
	}
	redisConfig := []testserver.RedisOption{testserver.WithRedisConfig("appendonly", "yes"),
		testserver.WithRedisConfig("appendfsync", "always"), testserver.WithRedisConfig("repl-diskless-sync-delay", "0")}
	r.primary, r.replica = testserver.StartRedis(t, redisConfig...), testserver.StartRedis(t, redisConfig...)
	if err := replicaOf(r.replica.Addr, r.primary.Addr); err != nil {
		t.Fatalf("chaos: replica: %v", err)
	}
	if err := waitInSync(r.replica.Addr, 30*time.Second); err != nil {
		t.Fatalf("chaos: %v", err)
	}
	r.proxy = testserver.StartProxy(t, r.primary.Addr)
	return "redis://" + r.proxy.Addr(r.primary.Addr) + "/0"
}

// Run performs one chaos run. It uses the package's shared PostgreSQL
// (testserver.Postgres) and stops and starts it, so the calling test must
// not run in parallel with other PostgreSQL tests.
func Run(t testing.TB, cfg Config) Summary {
	t.Helper()
	cfg.defaults()
	ctx := context.Background()
	r := &run{t: t, cfg: cfg, dir: t.TempDir(), start: time.Now(), lost: map[string]bool{}}
	faults := Schedule(cfg.Seed, cfg.Span, cfg.Lease, cfg.Workers)
	if testserver.ClusterMode() {
		faults = slices.DeleteFunc(faults, func(f Fault) bool { return f.Kind == RestartRedis || f.Kind == FailoverRedis })
		t.Logf("chaos: on a 3-master Redis Cluster with a replica each (EMQ_TEST_REDIS=cluster), " +
			"without the Redis restart and failovers, which fail over a single primary through the proxy " +
			"(the single-server leg runs them)")
	}
	t.Logf("chaos: seed %d, %d orders over %s, %d workers (lease %s); replay with: make chaos SEED=%d ORDERS=%d",
		cfg.Seed, cfg.Orders, cfg.Span, cfg.Workers, cfg.Lease, cfg.Seed, cfg.Orders)
	for _, f := range faults {
		t.Logf("chaos: scheduled at +%s: %s", f.At.Round(time.Millisecond), f)
	}

	// Servers. A replica syncs at once (no wait for other replicas to
	// share a diskless sync, 5 s by default), so the admissions that wait
	// for it after a restart or a failover are refused for a moment only.
	redisURL := r.startRedis()
	database := testserver.Postgres(t)
	r.pg = testserver.PostgresServer(t)
	if err := migrations.Up(database.URL); err != nil {
		t.Fatalf("chaos: migrate: %v", err)
	}
	r.db = database.Pool(t)
	keys := fund(t, r.db, cfg.Accounts)
	queueClient, err := emq.Dial(ctx, redisURL)
	if err != nil {
		t.Fatalf("chaos: %v", err)
	}
	t.Cleanup(func() { _ = queueClient.Close() })
	instruments, err := postgres.NewInstruments(r.db).ReadInstruments(ctx)
	if err != nil {
		t.Fatalf("chaos: %v", err)
	}
	for _, symbol := range slices.Sorted(maps.Keys(instruments)) {
		r.queues = append(r.queues, queueClient.Queue(orders.InstrumentQueue(symbol)))
	}
	r.events = placement.NewEventLogs(queueClient)
	r.caches = coherence.New(queueClient.Redis())
	r.env = []string{"REDIS_URL=" + redisURL, "DATABASE_URL=" + database.URL, "MIGRATE=false"}

	// Processes.
	t.Cleanup(r.stopProcesses) // before the servers' cleanups (LIFO)
	for i := range cfg.Workers {
		slot := &workerSlot{index: i, gone: map[string]float64{}, last: map[string]float64{}}
		r.slots = append(r.slots, slot)
		if err := r.startWorker(slot, 30*time.Second); err != nil {
			t.Fatalf("chaos: %v", err)
		}
	}
	r.startGateway()

	// Client and faults.
	r.start = time.Now()
	scrapeCtx, stopScraping := context.WithCancel(ctx)
	var scraping sync.WaitGroup
	scraping.Go(func() { r.scrapeWorkers(scrapeCtx) })
	c := newClient(r, keys)
	placed := make(chan struct{})
	go func() {
		defer close(placed)
		c.placeAll()
	}()
	var faultsRunning sync.WaitGroup
	var injected []string
	for _, f := range faults {
		time.Sleep(time.Until(r.start.Add(f.At)))
		injected = append(injected, fmt.Sprintf("+%s %s", time.Since(r.start).Round(time.Millisecond), f))
		switch f.Kind {
		case RestartRedis, RestartPostgr, FailoverRedis:
			r.inject(f) // needs the test goroutine: testserver calls t.Fatal, and the servers swap
		default:
			faultsRunning.Go(func() { r.inject(f) })
		}
	}
	faultsRunning.Wait()
	<-placed
	placeTime := time.Since(r.start)
	r.logf("client done: %d acknowledged of %d", len(c.acked), cfg.Orders)

	summary := r.check(ctx, c)
	summary.PlaceTime = placeTime
	summary.Faults = injected

	stopScraping()
	scraping.Wait()
	r.scrapeOnce() // the last counts before the processes stop
	for _, slot := range r.slots {
		slot.stateMu.Lock()
		summary.Reaped += slot.gone["emq_jobs_reaped_total"] + slot.last["emq_jobs_reaped_total"]
		summary.StaleRefusals += slot.gone["emq_stale_refusals_total"] + slot.last["emq_stale_refusals_total"]
		summary.WorkerRetries += slot.gone["emq_jobs_retried_total"] + slot.last["emq_jobs_retried_total"]
		slot.stateMu.Unlock()
	}
	summary.WorkerRestarts = int(r.restarts.Load())
	if gw, err := metricsserver.Counters(context.Background(), &http.Client{Timeout: 2 * time.Second}, "http://"+r.gwMetricsAddr+"/metrics", "",
		"orders_admitted_total", "orders_replayed_total"); err == nil {
		summary.GatewayAdmitted, summary.GatewayReplayed = gw["orders_admitted_total"], gw["orders_replayed_total"]
	}
	summary.LiveBooks, summary.LoadedBooks = r.checkBooks(ctx)
	if summary.LiveBooks == 0 {
		r.errorf("books: no worker logged the book it gave up when it stopped")
	}
	r.checkLogsHoldNoKeys(keys)
	r.errMu.Lock()
	summary.CheckerProblems = append(summary.CheckerProblems, r.errs...)
	r.errMu.Unlock()
	t.Logf("\n%s", summary)
	if t.Failed() {
		r.dumpLogs()
	}
	return summary
}

// fund creates the accounts with keys and deposits in every asset, so each
// can buy and sell every instrument: rich, middling and poor, so orders both
// trade and are rejected for want of funds. The venue provides no liquidity:
// the accounts trade with each other.
func fund(t testing.TB, db *pgxpool.Pool, accounts int) []string {
	t.Helper()
	ctx := context.Background()
	ledger := postgres.NewLedger(db)
	store := postgres.NewAccounts(db)
	keys := make([]string, accounts)
	for i := range accounts {
		account, err := store.Create(ctx, fmt.Sprintf("chaos-%02d", i))
		if err != nil {
			t.Fatalf("chaos: create account: %v", err)
		}
		if _, keys[i], err = store.IssueKey(ctx, account); err != nil {
			t.Fatalf("chaos: issue key: %v", err)
		}
		amounts := [][3]string{{"10", "0.001", "0.01"}, {"5000", "1", "10"}, {"1000000", "100", "1000"}}[i%3]
		for j, asset := range []string{"USD", "BTC", "ETH"} {
			if err := ledger.Deposit(ctx, account, asset, amounts[j]); err != nil {
				t.Fatalf("chaos: deposit: %v", err)
			}
		}
	}
	return keys
}

func (r *run) startGateway() {
	addr, err := freeAddr()
	if err != nil {
		r.t.Fatalf("chaos: %v", err)
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		r.t.Fatalf("chaos: %v", err)
	}
	r.gwAddr, r.gwMetricsAddr = addr, metricsAddr
	// An admission is answered 202 only once the replica holds it, so a
	// failover loses no acknowledged order.
	env := append(slices.Clone(r.env), "GATEWAY_ADDR="+addr, "METRICS_ADDR="+metricsAddr, "LOG_LEVEL=warn",
		"ADMIT_WAIT_REPLICAS=1", "ADMIT_WAIT_TIMEOUT="+admitWaitTimeout.String())
	r.gateway, err = startProcess("gateway", r.cfg.GatewayBinary, filepath.Join(r.dir, "gateway.log"), env)
	if err != nil {
		r.t.Fatalf("chaos: %v", err)
	}
	if err := r.gateway.waitHTTP("http://"+addr+"/readyz", 60*time.Second); err != nil {
		r.t.Fatalf("chaos: %v", err)
	}
}

// startWorker starts a new process in slot, trying again while it exits
// during startup (Redis or PostgreSQL may be down), up to within.
func (r *run) startWorker(slot *workerSlot, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		slot.stateMu.Lock()
		slot.instance++
		name := fmt.Sprintf("worker-%d.%d", slot.index+1, slot.instance)
		slot.stateMu.Unlock()
		env := append(slices.Clone(r.env),
			"WORKER_LEASE="+r.cfg.Lease.String(), "WORKER_OWN_LEASE="+r.cfg.Lease.String(), "WORKER_CONCURRENCY=8",
			"WORKER_RETRY_BASE=50ms", "WORKER_RETRY_CAP=1s", "WORKER_DRAIN_TIMEOUT=2s",
			// The events a worker appends count as relayed once the replica
			// holds them, so a failover loses none (checkEvents).
			"WORKER_WAIT_REPLICAS=1", "WORKER_WAIT_TIMEOUT="+admitWaitTimeout.String(),
			// The logs keep a short hot tail, so the accounts' streams are
			// read back from the history the archivers wrote under the
			// faults too (checkEvents).
			"EVENTS_HOT_RETENTION=5s", "EVENTS_HOT_COUNT=50",
			"METRICS_ADDR="+addr, "LOG_LEVEL=info")
		proc, err := startProcess(name, r.cfg.WorkerBinary, filepath.Join(r.dir, name+".log"), env)
		if err != nil {
			return err
		}
		slot.stateMu.Lock()
		slot.proc, slot.metricsAddr = proc, addr
		slot.last = map[string]float64{}
		slot.stateMu.Unlock()
		err = proc.waitHTTP("http://"+addr+"/healthz", time.Until(deadline))
		if err == nil {
			return nil
		}
		if proc.alive() || time.Now().After(deadline) {
			proc.kill()
			return fmt.Errorf("start %s: %w", name, err)
		}
		r.logf("%s exited during startup; starting it again", name)
		time.Sleep(300 * time.Millisecond)
	}
}

// inject performs one fault; worker faults run on their own goroutines and
// must not call t.Fatal.
func (r *run) inject(f Fault) {
	switch f.Kind {
	case KillWorker:
		slot := r.slots[f.Worker]
		slot.mu.Lock()
		defer slot.mu.Unlock()
		slot.stateMu.Lock()
		proc := slot.proc
		slot.stateMu.Unlock()
		r.scrapeSlot(&http.Client{Timeout: 400 * time.Millisecond}, slot) // its last counts
		r.logf("fault: SIGKILL %s", proc.name)
		proc.kill()
		slot.stateMu.Lock()
		for name, v := range slot.last {
			slot.gone[name] += v
		}
		slot.last = map[string]float64{}
		slot.stateMu.Unlock()
		time.Sleep(f.Hold)
		if err := r.startWorker(slot, 60*time.Second); err != nil {
			r.errorf("restart worker-%d: %v", slot.index+1, err)
			return
		}
		r.restarts.Add(1)
		r.logf("fault: worker-%d restarted", slot.index+1)
	case StopWorker:
		slot := r.slots[f.Worker]
		slot.mu.Lock()
		defer slot.mu.Unlock()
		slot.stateMu.Lock()
		proc := slot.proc
		slot.stateMu.Unlock()
		r.stopWorker(proc, f.Hold)
	case RestartRedis:
		pid, err := redisPID(r.primary.Addr)
		if err != nil {
			r.errorf("redis pid: %v", err)
			return
		}
		r.logf("fault: SIGKILL the Redis primary %s (pid %d), down for %s", r.primary.Addr, pid, f.Hold.Round(time.Millisecond))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			r.errorf("kill redis: %v", err)
			return
		}
		time.Sleep(f.Hold)
		r.primary.Restart(r.t) // replays the AOF; the replica syncs with it again
		r.logf("fault: the Redis primary is back")
	case FailoverRedis:
		r.failover(f.Hold)
	case RestartPostgr:
		r.logf("fault: stop PostgreSQL, down for %s", f.Hold.Round(time.Millisecond))
		r.pg.Stop(r.t)
		time.Sleep(f.Hold)
		r.pg.Start(r.t)
		r.logf("fault: PostgreSQL back")
	}
}

// stopWorker SIGSTOPs proc for hold. A stop that catches the worker holding
// no lease tests nothing, so the first lease/2 checks which leases stop being
// renewed (the others renew every lease/3); if none, the worker is resumed
// and stopped again, a few times at most, before the stop is held.
func (r *run) stopWorker(proc *process, hold time.Duration) {
	for try := 1; ; try++ {
		r.logf("fault: SIGSTOP %s for %s (lease %s), try %d", proc.name, hold.Round(time.Millisecond), r.cfg.Lease, try)
		stoppedAt := time.Now()
		if err := proc.signal(syscall.SIGSTOP); err != nil {
			r.errorf("%v", err)
			return
		}
		held := r.unrenewedLeases()
		if len(held) > 0 || try == 5 {
			r.logf("fault: %s stopped holding %d lease(s) that are not renewed: %v", proc.name, len(held), held)
			time.Sleep(time.Until(stoppedAt.Add(hold)))
			break
		}
		if err := proc.signal(syscall.SIGCONT); err != nil {
			r.errorf("%v", err)
			return
		}
		time.Sleep(time.Duration(rand.Int64N(int64(300 * time.Millisecond))))
	}
	if err := proc.signal(syscall.SIGCONT); err != nil {
		r.errorf("%v", err)
	}
	r.logf("fault: SIGCONT %s", proc.name)
	// Let the resumed worker act on its stale leases (heartbeat, complete)
	// before another fault on this slot may kill it.
	time.Sleep(time.Second)
}

// unrenewedLeases returns the orders whose lease deadline did not move over
// half a lease: live workers renew theirs every lease/3.
func (r *run) unrenewedLeases() []string {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Lease)
	defer cancel()
	time.Sleep(50 * time.Millisecond)
	leases := func() ([]emq.Lease, error) {
		var all []emq.Lease
		for _, queue := range r.queues {
			held, err := queue.Leases(ctx)
			if err != nil {
				return nil, err
			}
			all = append(all, held...)
		}
		return all, nil
	}
	before, err := leases()
	if err != nil {
		return nil
	}
	time.Sleep(r.cfg.Lease / 2)
	after, err := leases()
	if err != nil {
		return nil
	}
	deadlines := make(map[string]time.Time, len(before))
	for _, lease := range before {
		deadlines[lease.ID] = lease.Deadline
	}
	var held []string
	for _, lease := range after {
		if deadline, ok := deadlines[lease.ID]; ok && deadline.Equal(lease.Deadline) {
			held = append(held, lease.ID)
		}
	}
	return held
}

// redisPID asks the server for its process id: testserver does not offer a
// crash, so the run SIGKILLs the server itself and lets Restart replay the AOF.
func redisPID(addr string) (int, error) {
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := client.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(value)
		}
	}
	return 0, fmt.Errorf("no process_id in INFO server")
}

func (r *run) scrapeWorkers(ctx context.Context) {
	ticker := time.NewTicker(500 * time.Millisecond)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			r.scrapeOnce()
		}
	}
}

func (r *run) scrapeOnce() {
	client := &http.Client{Timeout: 400 * time.Millisecond} // a stopped worker does not answer
	for _, slot := range r.slots {
		r.scrapeSlot(client, slot)
	}
}

func (r *run) scrapeSlot(client *http.Client, slot *workerSlot) {
	slot.stateMu.Lock()
	addr, instance, proc := slot.metricsAddr, slot.instance, slot.proc
	slot.stateMu.Unlock()
	if proc == nil || !proc.alive() {
		return
	}
	values, err := metricsserver.Counters(context.Background(), client, "http://"+addr+"/metrics", `queue="`+orders.QueuePrefix, workerCounters...)
	if err != nil {
		return
	}
	slot.stateMu.Lock()
	if slot.instance == instance && proc.alive() {
		slot.last = values
	}
	slot.stateMu.Unlock()
}

func (r *run) stopProcesses() {
	var stopping sync.WaitGroup
	for _, slot := range r.slots {
		slot.stateMu.Lock()
		proc := slot.proc
		slot.stateMu.Unlock()
		if proc != nil {
			stopping.Go(func() { proc.terminate(10 * time.Second) })
		}
	}
	if r.gateway != nil {
		stopping.Go(func() { r.gateway.terminate(10 * time.Second) })
	}
	stopping.Wait()
}

func (r *run) dumpLogs() {
	entries, _ := os.ReadDir(r.dir)
	for _, entry := range entries {
		if strings.HasSuffix(entry.Name(), ".log") {
			r.t.Logf("%s", logTail(filepath.Join(r.dir, entry.Name()), 3000))
		}
	}
}

// checkLogsHoldNoKeys reads everything the gateway and the workers logged
// through every fault and restart, and fails the run if any API key appears.
func (r *run) checkLogsHoldNoKeys(keys []string) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		r.errorf("logs: %v", err)
		return
	}
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), ".log") {
			continue
		}
		content, err := os.ReadFile(filepath.Join(r.dir, entry.Name()))
		if err != nil {
			r.errorf("logs: %v", err)
			continue
		}
		for _, key := range keys {
			if strings.Contains(string(content), key) {
				r.errorf("logs: %s holds an API key", entry.Name())
				break
			}
		}
	}
}

// check waits for every acknowledged order to be final, then reads the books.
func (r *run) check(ctx context.Context, c *client) Summary {
	s := Summary{Seed: r.cfg.Seed, Orders: r.cfg.Orders, Acknowledged: len(c.acked),
		Accepted: int(c.accepted.Load()), Replayed: int(c.replayed.Load()),
		ClientRetries: int(c.retries.Load()), RetryStatuses: c.retryStatuses()}
	if len(c.acked) != r.cfg.Orders {
		r.errorf("client: %d of %d orders acknowledged (gave up on the rest)", len(c.acked), r.cfg.Orders)
	}
	ids := make([]string, 0, len(c.acked))
	for _, a := range c.acked {
		ids = append(ids, a.id)
	}

	queueStats := func(ctx context.Context) (emq.Stats, error) {
		var sum emq.Stats
		for _, queue := range r.queues {
			stats, err := queue.Stats(ctx)
			if err != nil {
				return sum, err
			}
			sum.Pending, sum.Active, sum.Delayed, sum.Dead = sum.Pending+stats.Pending, sum.Active+stats.Active, sum.Delayed+stats.Delayed, sum.Dead+stats.Dead
		}
		return sum, nil
	}

	drainStart := time.Now()
	deadline := drainStart.Add(r.cfg.Drain)
	var final int
	var stats emq.Stats
	for {
		final = -1
		countErr := r.db.QueryRow(ctx, ordersFinalCountSQL, ids).Scan(&final)
		var statsErr error
		stats, statsErr = queueStats(ctx)
		if countErr == nil && statsErr == nil && final == len(ids) && stats.Pending+stats.Active+stats.Delayed == 0 {
			break
		}
		if time.Now().After(deadline) {
			r.errorf("drain: after %s, %d of %d acknowledged orders final; queue %+v (%v, %v)",
				r.cfg.Drain, final, len(ids), stats, countErr, statsErr)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.DrainTime = time.Since(drainStart)
	r.logf("drained in %s", s.DrainTime.Round(time.Millisecond))

	// Quiet period: stale workers, the reaper and retries get a chance to
	// do something wrong before the books are read.
	time.Sleep(2 * r.cfg.Lease)

	// The last failover's old primary follows the new one, so another
	// failover would lose no acknowledged order.
	if r.replica != nil {
		if err := waitInSync(r.replica.Addr, 30*time.Second); err != nil {
			r.errorf("after the run: %v", err)
		}
	}

	stats, err := queueStats(ctx)
	if err != nil {
		r.errorf("queue stats: %v", err)
	} else if stats.Pending+stats.Active+stats.Delayed+stats.Dead != 0 {
		r.errorf("queue not empty after the drain: pending %d active %d delayed %d dead %d",
			stats.Pending, stats.Active, stats.Delayed, stats.Dead)
	}
	r.checkCachedBalances(ctx)
	r.checkEvents(ctx, ids)

	// Every acknowledged order: exactly one row, final, of its client order.
	type row struct{ account, clientOrderID, status, rejectReason, duplicateOf string }
	rows := map[string]row{}
	pairs := map[[2]string][]string{} // (account, client order id) → its orders
	result, err := r.db.Query(ctx, ordersReadSQL)
	if err != nil {
		r.t.Fatalf("chaos: read orders: %v", err)
	}
	for result.Next() {
		var id string
		var o row
		if err := result.Scan(&id, &o.account, &o.clientOrderID, &o.status, &o.rejectReason, &o.duplicateOf); err != nil {
			r.t.Fatalf("chaos: read orders: %v", err)
		}
		rows[id] = o
		key := [2]string{o.account, o.clientOrderID}
		pairs[key] = append(pairs[key], id)
	}
	if err := result.Err(); err != nil {
		r.t.Fatalf("chaos: read orders: %v", err)
	}
	missing, lostInFailover := 0, 0
	for cid, a := range c.acked {
		o, ok := rows[a.id]
		switch {
		case !ok:
			missing++
			if missing <= 10 {
				r.errorf("lost: %s (%s) acknowledged with %d at +%s has no row in orders", a.id, cid, a.status, a.at.Round(time.Millisecond))
			}
		case o.clientOrderID != cid:
			r.errorf("order %s: client_order_id %s, acknowledged as %s", a.id, o.clientOrderID, cid)
		case !slices.Contains([]string{"open", "partially_filled", "filled", "canceled", "rejected"}, o.status):
			r.errorf("order %s (%s): status %s, want one the orders table holds", a.id, cid, o.status)
		case o.duplicateOf != "":
			s.AcknowledgedDuplicates++
		}
		if r.lost[a.id] {
			lostInFailover++
			if lostInFailover <= 10 {
				r.errorf("lost: %s (%s) acknowledged with %d at +%s was lost in a failover: the promoted replica never held it",
					a.id, cid, a.status, a.at.Round(time.Millisecond))
			}
		}
	}
	s.LostAdmissions = len(r.lost)
	if missing > 0 {
		r.errorf("lost: %d acknowledged orders have no row in orders", missing)
	}
	if lostInFailover > 0 {
		r.errorf("lost: %d acknowledged orders were lost in a failover", lostInFailover)
	}

	// Every client order: one order holds it, and any other is a refusal
	// naming the holder that a failover explains (see the package comment).
	placed := make(map[string]bool, len(c.bodies))
	for _, req := range c.bodies {
		placed[req.clientOrderID] = true
	}
	for key, ids := range pairs {
		if !placed[key[1]] {
			r.errorf("orders %v: client_order_id %s, which the client never placed", ids, key[1])
			continue
		}
		var holders []string
		for _, id := range ids {
			if rows[id].duplicateOf == "" {
				holders = append(holders, id)
			}
		}
		if len(holders) != 1 {
			r.errorf("client order %s of account %s: %d holders among its orders %v, want one", key[1], key[0], len(holders), ids)
			continue
		}
		for _, id := range ids {
			if id != holders[0] {
				if o := rows[id]; o.status != "rejected" || o.rejectReason != orders.ReasonDuplicateClientOrderID || o.duplicateOf != holders[0] {
					r.errorf("client order %s: order %s is %s (%s) a duplicate of %q; want rejected %s, a duplicate of its holder %s",
						key[1], id, o.status, o.rejectReason, o.duplicateOf, orders.ReasonDuplicateClientOrderID, holders[0])
				}
			}
			if r.lost[id] {
				s.LostSettled++
			} else if acked := c.acked[key[1]].id; id != acked {
				r.errorf("double placement: client order %s has orders %v; %s is neither the one acknowledged (%q) nor an admission a failover lost",
					key[1], ids, id, acked)
			}
		}
	}

	// Settling an order twice (a redelivery, a stale worker) would hold its
	// funds twice: in the ledger before migration 0014, on the balance row
	// since (the audit's held_matches_orders, below, proves those).
	doubles, err := r.db.Query(ctx, holdDoublesSQL)
	if err != nil {
		r.t.Fatalf("chaos: read ledger: %v", err)
	}
	for doubles.Next() {
		var id, status string
		var n int
		if err := doubles.Scan(&id, &status, &n); err != nil {
			r.t.Fatalf("chaos: read ledger: %v", err)
		}
		r.errorf("hold: order %s (%s) has %d hold transactions, want 1", id, status, n)
	}
	doubles.Close()
	if err := r.db.QueryRow(ctx, tradesCountSQL).Scan(&s.Trades, &s.Traded); err != nil {
		r.t.Fatalf("chaos: read trades: %v", err)
	}
	s.Statuses = map[string]int{}
	statuses, err := r.db.Query(ctx, ordersStatusCountSQL)
	if err != nil {
		r.t.Fatalf("chaos: read orders: %v", err)
	}
	for statuses.Next() {
		var status string
		var n int
		if err := statuses.Scan(&status, &n); err != nil {
			r.t.Fatalf("chaos: read orders: %v", err)
		}
		s.Statuses[status] = n
	}
	statuses.Close()

	violations, err := postgres.Audit(ctx, r.db)
	if err != nil {
		r.errorf("audit: %v", err)
	}
	for _, v := range violations {
		r.errorf("audit: %s", v)
	}
	if s.Trades == 0 || s.Statuses["rejected"] == 0 {
		r.errorf("the mix should both trade and reject: %d trades, statuses %v", s.Trades, s.Statuses)
	}
	return s
}

// ack is one acknowledged order.
type ack struct {
	id     string
	status int
	at     time.Duration
}

// client places the orders at a steady pace with bounded concurrency.
type client struct {
	r      *run
	keys   []string
	bodies []request
	http   *http.Client

	mu                          sync.Mutex
	acked                       map[string]ack // client_order_id → ack
	why                         map[string]int
	accepted, replayed, retries atomic.Int64
}

type request struct {
	key, clientOrderID, body string
}

func newClient(r *run, keys []string) *client {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0x0dde5))
	c := &client{r: r, keys: keys, acked: map[string]ack{}, why: map[string]int{},
		http: &http.Client{
			Timeout:   5 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: r.cfg.Clients, MaxConnsPerHost: r.cfg.Clients},
		}}
	for i := range r.cfg.Orders {
		clientOrderID := fmt.Sprintf("chaos-%d-%05d", r.cfg.Seed, i)
		c.bodies = append(c.bodies, request{keys[rng.IntN(len(keys))], clientOrderID, ordergen.RandomMarket(rng, clientOrderID)})
	}
	return c
}

func (c *client) retryStatuses() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.why)
}

func (c *client) placeAll() {
	work := make(chan request)
	var clients sync.WaitGroup
	for range c.r.cfg.Clients {
		clients.Go(func() {
			for req := range work {
				c.place(req)
			}
		})
	}
	interval := c.r.cfg.Span / time.Duration(len(c.bodies))
	for i, req := range c.bodies {
		time.Sleep(time.Until(c.r.start.Add(time.Duration(i) * interval)))
		work <- req
	}
	close(work)
	clients.Wait()
	c.http.CloseIdleConnections()
}

// place sends one order until it is acknowledged, replaying the same
// client_order_id and body on 5xx (a 503 not replicated among them),
// connection errors and timeouts.
func (c *client) place(req request) {
	giveUp := time.Now().Add(2 * time.Minute)
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		answer, err := c.post(req)
		status := answer.status
		why := ""
		var netErr net.Error
		switch {
		case errors.As(err, &netErr) && netErr.Timeout():
			why = "timeout"
		case err != nil:
			why = "conn"
		case status == http.StatusAccepted || (status == http.StatusOK && answer.replayed):
			if status == http.StatusAccepted {
				c.accepted.Add(1)
			} else {
				c.replayed.Add(1)
			}
			c.mu.Lock()
			c.acked[req.clientOrderID] = ack{id: answer.id, status: status, at: time.Since(c.r.start)}
			c.mu.Unlock()
			return
		case answer.notReplicated:
			why = "503 not replicated"
		case status >= 500:
			why = strconv.Itoa(status)
		default:
			c.r.errorf("place %s: unexpected %d (attempt %d)", req.clientOrderID, status, attempt)
			return
		}
		c.retries.Add(1)
		c.mu.Lock()
		c.why[why]++
		c.mu.Unlock()
		if time.Now().After(giveUp) {
			c.r.errorf("place %s: gave up after %d attempts (last: %s %v)", req.clientOrderID, attempt, why, err)
			return
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// answer is what the gateway answered a placement.
type answer struct {
	status   int
	id       string // the order's, on 202 or 200
	replayed bool   // Idempotent-Replayed
	// notReplicated: a 503 whose order was queued but held by no replica
	// in time.
	notReplicated bool
}

// post sends one placement.
func (c *client) post(req request) (answer, error) {
	httpReq, err := http.NewRequest(http.MethodPost, "http://"+c.r.gwAddr+"/v1/orders", bytes.NewReader([]byte(req.body)))
	if err != nil {
		return answer{}, err
	}
	httpReq.Header.Set("Authorization", "Bearer "+req.key)
	httpReq.Header.Set("Content-Type", "application/json")
	res, err := c.http.Do(httpReq)
	if err != nil {
		return answer{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	if res.StatusCode == http.StatusAccepted || res.StatusCode == http.StatusOK {
		var order struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &order); err != nil || order.ID == "" {
			return answer{}, fmt.Errorf("status %d with body %q: %v", res.StatusCode, body, err)
		}
		return answer{status: res.StatusCode, id: order.ID, replayed: res.Header.Get("Idempotent-Replayed") == "true"}, nil
	}
	if res.StatusCode >= 500 && res.StatusCode != http.StatusServiceUnavailable {
		c.r.logf("place %s: %d %s", req.clientOrderID, res.StatusCode, bytes.TrimSpace(body))
	}
	var problem struct {
		Detail string `json:"detail"`
	}
	// Only the problem's detail tells the two 503s apart; counted, not asserted.
	if res.StatusCode == http.StatusServiceUnavailable && json.Unmarshal(body, &problem) == nil && strings.Contains(problem.Detail, "replicas") {
		return answer{status: res.StatusCode, notReplicated: true}, nil
	}
	return answer{status: res.StatusCode}, nil
}

// cachedBalancesDeadline bounds how long after the drain the balance cache
// may take to equal PostgreSQL: the coherence queue's backlog, and a heal
// after the last failover or restart.
const cachedBalancesDeadline = 15 * time.Second

// checkCachedBalances checks that a reader is served every cached account's
// balances as PostgreSQL holds them once the coherence job mode and the heals
// have caught up: through Redis kills and failovers, no cached balance is
// left behind (an account without a hash is read from PostgreSQL).
func (r *run) checkCachedBalances(ctx context.Context) {
	truth := postgres.NewBalances(r.db)
	reader := placement.NewBalances(truth, r.caches, nil)
	deadline := time.Now().Add(cachedBalancesDeadline)
	for {
		stale, err := r.staleCachedBalances(ctx, truth, reader)
		if err == nil && len(stale) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.errorf("balance cache: %d accounts served otherwise than PostgreSQL holds them %s after the drain (%v), e.g. %v",
				len(stale), cachedBalancesDeadline, err, stale[:min(len(stale), 3)])
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// staleCachedBalances lists the cached accounts whose balances a reader is
// served otherwise than PostgreSQL holds them.
func (r *run) staleCachedBalances(ctx context.Context, truth *postgres.Balances, reader *placement.Balances) ([]string, error) {
	server, err := r.caches.CacheServer(ctx, placement.BalancesTable)
	if err != nil {
		return nil, err
	}
	var stale []string
	err = r.caches.ScanCache(ctx, placement.BalancesTable, server.Identity, func(accounts []string) error {
		current, err := truth.OfAccounts(ctx, accounts)
		if err != nil {
			return err
		}
		for _, account := range accounts {
			served, err := reader.Of(ctx, account)
			if err != nil {
				return err
			}
			if !slices.Equal(served, current[account]) {
				stale = append(stale, fmt.Sprintf("%s: served %v, PostgreSQL %v", account, served, current[account]))
			}
		}
		return nil
	})
	return stale, err
}

// eventsDeadline bounds how long after the drain the accounts' logs may
// take to hold every event: the relay's sweep carries what a killed worker
// or an unreplicated append left behind.
const eventsDeadline = 20 * time.Second

// checkEvents checks the accounts' logs of events, with their history in
// PostgreSQL, once the relay has caught up: each gapless from 1, no event
// twice, every acknowledged order's
// order.accepted in its account's log, and the last state each order's
// events announce the one PostgreSQL holds. With admissions and the
// workers' appends waiting for the replica, neither the Redis kill nor the
// failovers lose an acknowledged event.
func (r *run) checkEvents(ctx context.Context, acknowledged []string) {
	log := r.events
	deadline := time.Now().Add(eventsDeadline)
	for {
		problems, err := r.eventProblems(ctx, log, acknowledged)
		if err == nil && len(problems) == 0 {
			var chunks, events int64
			if err := r.db.QueryRow(ctx, `SELECT count(*), coalesce(sum(last_sequence - first_sequence + 1), 0) FROM account_event_chunks`).Scan(&chunks, &events); err == nil {
				r.logf("events: every account's stream whole; the history holds %d events in %d chunks", events, chunks)
			}
			return
		}
		if time.Now().After(deadline) {
			r.errorf("events: %d problems %s after the drain (%v), e.g. %v", len(problems), eventsDeadline, err, problems[:min(len(problems), 5)])
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// accountEvents reads all of an account's events as a stream does: the
// log in Redis, and before its first the history the workers' archivers
// wrote to PostgreSQL. The log first: what it no longer holds was
// archived before it was dropped.
func accountEvents(ctx context.Context, log *emq.Queue, history *postgres.EventHistory, account string) ([]emq.LogEvent, error) {
	events, err := log.ReadLog(ctx, account, 0, 1_000_000)
	if err != nil {
		return nil, err
	}
	first, last, err := log.LogBounds(ctx, account)
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		first = events[0].Sequence
	} else {
		first = last + 1
	}
	if first <= 1 {
		return events, nil
	}
	archived, err := history.EventsAfter(ctx, account, 0, int(first-1))
	if err != nil {
		return nil, err
	}
	older := make([]emq.LogEvent, 0, len(archived)+len(events))
	for _, event := range archived {
		if event.Sequence < first {
			older = append(older, emq.LogEvent{Sequence: event.Sequence, ID: event.ID, Type: string(event.Type), At: event.Time, Data: event.Data})
		}
	}
	return append(older, events...), nil
}

// eventProblems lists what the accounts' logs (and their history) get
// wrong now.
func (r *run) eventProblems(ctx context.Context, log *placement.EventLogs, acknowledged []string) ([]string, error) {
	rows, err := r.db.Query(ctx, ordersReadSQL)
	if err != nil {
		return nil, err
	}
	status, accountOf := map[string]string{}, map[string]string{}
	for rows.Next() {
		var id, account, clientOrderID, orderStatus, reason, duplicateOf string
		if err := rows.Scan(&id, &account, &clientOrderID, &orderStatus, &reason, &duplicateOf); err != nil {
			rows.Close()
			return nil, err
		}
		status[id], accountOf[id] = orderStatus, account
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	accounts := map[string]bool{}
	for _, account := range accountOf {
		accounts[account] = true
	}
	accepted, announced := map[string]bool{}, map[string]string{}
	var problems []string
	history := postgres.NewEventHistory(r.db)
	for account := range accounts {
		events, err := accountEvents(ctx, log.For(account), history, account)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		if len(events) > 0 && events[0].Sequence != 1 {
			problems = append(problems, fmt.Sprintf("%s: the stream starts at %d", account, events[0].Sequence))
		}
		for i, event := range events {
			if i > 0 && event.Sequence != events[i-1].Sequence+1 {
				problems = append(problems, fmt.Sprintf("%s: sequence %d after %d", account, event.Sequence, events[i-1].Sequence))
			}
			if seen[event.ID] {
				problems = append(problems, fmt.Sprintf("%s: event %s twice", account, event.ID))
			}
			seen[event.ID] = true
			var order struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			}
			switch orders.EventType(event.Type) {
			case orders.EventFill, orders.EventBalance:
				continue
			case orders.EventOrderAccepted:
				if err := json.Unmarshal(event.Data, &order); err == nil {
					accepted[order.ID] = true
				}
			default:
				if err := json.Unmarshal(event.Data, &order); err == nil {
					announced[order.ID] = order.Status
				}
			}
		}
	}
	for _, id := range acknowledged {
		if !accepted[id] {
			problems = append(problems, fmt.Sprintf("%s: acknowledged, no order.accepted", id))
		}
		if want, settled := status[id]; settled && announced[id] != want {
			problems = append(problems, fmt.Sprintf("%s: events end at %q, PostgreSQL holds %q", id, announced[id], want))
		}
	}
	return problems, nil
}
