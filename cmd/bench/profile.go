package main

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/postgres"
)

// The matching phase's profile (-profile): where a run's time goes, read
// from PostgreSQL's statistics views, /proc and the workers' settlement
// metrics over the run's window, from the workers' start until the
// coherence queue is drained. docs/performance.md ("Where the matching
// time goes") says what each figure is.

var (
	//go:embed sql/profile_statements.sql
	profileStatementsSQL string
	//go:embed sql/profile_tables.sql
	profileTablesSQL string
	//go:embed sql/profile_database.sql
	profileDatabaseSQL string
	//go:embed sql/profile_wal.sql
	profileWALSQL string
	//go:embed sql/profile_activity.sql
	profileActivitySQL string
	//go:embed sql/profile_backends.sql
	profileBackendsSQL string
)

// profileServerSettings are what -profile starts the bench's PostgreSQL
// with: pg_stat_statements loaded (tracking statements inside functions
// and triggers too, which it marks as not top level), block and WAL I/O
// timed, and the whole of each statement's text in pg_stat_activity.
var profileServerSettings = []string{
	"shared_preload_libraries=pg_stat_statements",
	"pg_stat_statements.track=all",
	"track_io_timing=on",
	"track_wal_io_timing=on",
	// pg_stat_activity's query text, by which a lock wait is named: the
	// settlement's statements' comments run past the default 1,024 bytes.
	"track_activity_query_size=8192",
}

// activityInterval is how often the profile samples pg_stat_activity.
const activityInterval = 20 * time.Millisecond

// runProfile is one matching run's profile.
type runProfile struct {
	// Seconds is the window: the workers' start until the coherence queue
	// was drained.
	Seconds float64 `json:"seconds"`
	// Orders and Trades are the run's, the divisors of every per-order and
	// per-trade figure.
	Orders int `json:"orders"`
	Trades int `json:"trades"`

	CPU cpuProfile `json:"cpu"`
	// Statements are pg_stat_statements' rows of the run's database, by
	// postgres/sql file (or text), most time first.
	Statements      []statementProfile `json:"statements,omitempty"`
	StatementsError string             `json:"statements_error,omitempty"`
	Tables          []tableProfile     `json:"tables"`
	Database        databaseCounters   `json:"database"`
	WAL             walCounters        `json:"wal"`
	Waits           waitProfile        `json:"waits"`
	Batches         batchProfile       `json:"batches"`
	// GoAllocs are the bench process's heap allocations in the window.
	GoAllocs goAllocs `json:"go_allocs"`
	// RedisCommands are Redis's commands in the window, most calls first
	// (the bench's own polling of the queues' depth included).
	RedisCommands []redisCommand `json:"redis_commands,omitempty"`
	RedisError    string         `json:"redis_error,omitempty"`
	// WorkerRedisCalls are the workers' calls to Redis by script (a
	// command sent directly: "· name"), counted by their clients.
	WorkerRedisCalls map[string]int64 `json:"worker_redis_calls,omitempty"`
}

// cpuProfile is the CPU seconds of the window by process.
type cpuProfile struct {
	Seconds float64 `json:"seconds"`
	// MachineBusy and MachineIdle are every CPU's, from /proc/stat.
	MachineBusy float64 `json:"machine_busy_seconds"`
	MachineIdle float64 `json:"machine_idle_seconds"`
	// Postgres is the bench's server: the postmaster and every child,
	// those that exited included; PostgresKinds splits it by process kind.
	HasPostgres   bool       `json:"has_postgres"`
	Postgres      float64    `json:"postgres_seconds"`
	PostgresKinds []cpuShare `json:"postgres_kinds,omitempty"`
	// PostgresStarted and PostgresExited count the server's processes
	// seen to start and to exit in the window (a backend per connection).
	PostgresStarted int `json:"postgres_started"`
	PostgresExited  int `json:"postgres_exited"`
	// Bench is the bench process, which hosts the workers; BenchGC and
	// BenchGoUser are the Go runtime's estimates of its GC and user code.
	Bench       float64 `json:"bench_seconds"`
	BenchGC     float64 `json:"bench_gc_seconds"`
	BenchGoUser float64 `json:"bench_go_user_seconds"`
	HasRedis    bool    `json:"has_redis"`
	Redis       float64 `json:"redis_seconds"`
}

type cpuShare struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// others is the machine's busy time that none of the bench's processes
// account for: other engineers' work on a shared machine.
func (c cpuProfile) others() float64 {
	return max(0, c.MachineBusy-c.Postgres-c.Bench-c.Redis)
}

// transactionControl reports whether the statement opens, ends or
// marks a point of a transaction.
func (s statementProfile) transactionControl() bool {
	word, _, _ := strings.Cut(s.Name, " ")
	switch strings.ToUpper(word) {
	case "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE":
		return true
	}
	return false
}

// statementProfile is pg_stat_statements' counts of one statement.
type statementProfile struct {
	Name string `json:"name"`
	// File: Name is a file of postgres/sql (the rest are named by their
	// text: transaction control, a trigger's or a function's statements).
	File bool `json:"file"`
	// TopLevel: sent by a client, not run inside a function or trigger
	// (whose time is in its caller's too).
	TopLevel   bool    `json:"top_level"`
	Calls      int64   `json:"calls"`
	TotalMs    float64 `json:"total_exec_ms"`
	Rows       int64   `json:"rows"`
	SharedHit  int64   `json:"shared_blocks_hit"`
	SharedRead int64   `json:"shared_blocks_read"`
	WALBytes   int64   `json:"wal_bytes"`
}

// tableProfile is one table's row counters over the window.
type tableProfile struct {
	Name       string `json:"name"`
	Inserted   int64  `json:"inserted"`
	Updated    int64  `json:"updated"`
	HOTUpdated int64  `json:"hot_updated"`
	Deleted    int64  `json:"deleted"`
	SeqScans   int64  `json:"seq_scans"`
	IdxScans   int64  `json:"idx_scans"`
}

func (t tableProfile) written() int64 { return t.Inserted + t.Updated + t.Deleted }

// databaseCounters are pg_stat_database's of the run's database.
type databaseCounters struct {
	Commits    int64   `json:"xact_commit"`
	Rollbacks  int64   `json:"xact_rollback"`
	BlksRead   int64   `json:"blks_read"`
	BlksHit    int64   `json:"blks_hit"`
	Deadlocks  int64   `json:"deadlocks"`
	TempBytes  int64   `json:"temp_bytes"`
	BlkReadMs  float64 `json:"blk_read_ms"`
	BlkWriteMs float64 `json:"blk_write_ms"`
}

func (d databaseCounters) minus(b databaseCounters) databaseCounters {
	return databaseCounters{d.Commits - b.Commits, d.Rollbacks - b.Rollbacks, d.BlksRead - b.BlksRead, d.BlksHit - b.BlksHit,
		d.Deadlocks - b.Deadlocks, d.TempBytes - b.TempBytes, d.BlkReadMs - b.BlkReadMs, d.BlkWriteMs - b.BlkWriteMs}
}

// walCounters are pg_stat_wal's: the server's, whatever database wrote.
type walCounters struct {
	Records     int64   `json:"records"`
	FPI         int64   `json:"full_page_images"`
	Bytes       int64   `json:"bytes"`
	BuffersFull int64   `json:"buffers_full"`
	Writes      int64   `json:"writes"`
	Syncs       int64   `json:"syncs"`
	WriteMs     float64 `json:"write_ms"`
	SyncMs      float64 `json:"sync_ms"`
}

func (w walCounters) minus(b walCounters) walCounters {
	return walCounters{w.Records - b.Records, w.FPI - b.FPI, w.Bytes - b.Bytes, w.BuffersFull - b.BuffersFull,
		w.Writes - b.Writes, w.Syncs - b.Syncs, w.WriteMs - b.WriteMs, w.SyncMs - b.SyncMs}
}

// waitProfile is what the run's database's client backends were doing,
// from pg_stat_activity sampled every activityInterval.
type waitProfile struct {
	Samples int     `json:"samples"`
	Seconds float64 `json:"seconds"`
	// States: each one's backends on average over the samples.
	States []waitState `json:"states"`
}

type waitState struct {
	Name     string  `json:"name"`
	Backends float64 `json:"backends"`
	// InTransaction: counted in the share of backends with a transaction
	// open (every state but idle).
	InTransaction bool `json:"in_transaction"`
}

// inTransaction is the backends with a transaction open, on average.
func (w waitProfile) inTransaction() float64 {
	sum := 0.0
	for _, s := range w.States {
		if s.InTransaction {
			sum += s.Backends
		}
	}
	return sum
}

// waitKey is one row of a pg_stat_activity sample; statement names what
// waits on a lock.
type waitKey struct{ state, waitType, event, statement string }

func (k waitKey) name() (string, bool) {
	switch {
	case k.state == "idle":
		return "idle, no transaction open", false
	case k.state == "idle in transaction":
		return "idle in transaction: waiting on its worker", true
	case k.state == "active" && k.waitType == "":
		return "running: on a CPU or waiting for one", true
	case k.state == "active" && k.statement != "":
		return k.waitType + ": " + k.event + " in " + k.statement, true
	case k.state == "active":
		return k.waitType + ": " + k.event, true
	}
	name := k.state
	if name == "" {
		name = "no state yet (connecting)"
	}
	if k.waitType != "" {
		name += ", " + k.waitType + ": " + k.event
	}
	return name, true
}

// batchProfile is the workers' settlement batches, from
// postgres.SettlementMetrics summed over the workers.
type batchProfile struct {
	Batches   uint64  `json:"batches"`
	Orders    float64 `json:"orders"`
	Redecided float64 `json:"redecided"`
	// Phases are the parts of a batch's cycle (settleTogether).
	Phases []phaseProfile `json:"phases"`
}

type phaseProfile struct {
	Name    string  `json:"name"`
	Count   uint64  `json:"count"`
	Seconds float64 `json:"seconds"`
	P50Ms   float64 `json:"p50_ms"`
	P99Ms   float64 `json:"p99_ms"`
}

// cycleSeconds is the phases' seconds summed: every batch's cycle.
func (b batchProfile) cycleSeconds() float64 {
	sum := 0.0
	for _, p := range b.Phases {
		sum += p.Seconds
	}
	return sum
}

// runProfiler measures one run; nil measures nothing.
type runProfiler struct {
	database string
	// admin is on the server's maintenance database: the cluster-wide
	// views, pg_stat_statements among them. reader is on the run's
	// database, for its tables' counters; sampler samples
	// pg_stat_activity (from the maintenance database, so that its
	// transactions are not the run's).
	admin, reader, sampler *pgx.Conn
	cpu                    *cpuWatch
	registries             []*prometheus.Registry
	statementsErr          error

	tablesBefore   map[string]tableProfile
	databaseBefore databaseCounters
	walBefore      walCounters

	began, drainedAt time.Time
	stopSampling     chan struct{}
	sampling         sync.WaitGroup
	waits            map[waitKey]int
	samples          int
	samplingErr      error
	cpuResult        cpuProfile
	cpuErr           error

	// rdb reads Redis's command counters.
	rdb                           redis.UniversalClient
	scripts                       *scriptCounter
	scriptsBefore, scriptsAfter   map[string]int64
	allocsBefore, allocs          goAllocs
	commandsBefore, commandsAfter map[string]redisCommand
	redisErr                      error
}

// newRunProfiler connects to the run's database and the server's.
func newRunProfiler(ctx context.Context, s *servers, rdb redis.UniversalClient, databaseURL, database string) (_ *runProfiler, err error) {
	p := &runProfiler{database: database, waits: map[waitKey]int{}, rdb: rdb, scripts: newScriptCounter()}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if p.admin, err = pgx.Connect(ctx, s.databaseURL); err != nil {
		return nil, err
	}
	if p.reader, err = pgx.Connect(ctx, databaseURL); err != nil {
		return nil, err
	}
	if p.sampler, err = pgx.Connect(ctx, s.databaseURL); err != nil {
		return nil, err
	}
	if _, err := p.admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		p.statementsErr = err
	}
	redis := 0
	if s.redis != nil && s.redis.Process != nil {
		redis = s.redis.Process.Pid
	}
	p.cpu = newCPUWatch(s.postmasterPID(), redis, int(p.sampler.PgConn().PID()), database)
	return p, nil
}

// postmasterPID is the bench's own PostgreSQL server's, from its data
// directory; 0 for a server it did not start.
func (s *servers) postmasterPID() int {
	if s.pgData == "" {
		return 0
	}
	data, err := os.ReadFile(filepath.Join(s.pgData, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(first))
	return pid
}

func (p *runProfiler) close() {
	if p == nil {
		return
	}
	if p.stopSampling != nil && p.drainedAt.IsZero() {
		p.drained() // the run failed: the samplers stop
	}
	for _, conn := range []*pgx.Conn{p.admin, p.reader, p.sampler} {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}
}

// begin reads the counters, resets pg_stat_statements and starts the
// samplers: the window opens.
func (p *runProfiler) begin(ctx context.Context) error {
	if p == nil {
		return nil
	}
	var err error
	if p.tablesBefore, err = readTables(ctx, p.reader); err != nil {
		return err
	}
	if p.databaseBefore, err = readDatabase(ctx, p.admin, p.database); err != nil {
		return err
	}
	if p.walBefore, err = readWAL(ctx, p.admin); err != nil {
		return err
	}
	if p.statementsErr == nil {
		if _, err := p.admin.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
			p.statementsErr = err
		}
	}
	p.commandsBefore, p.redisErr = readCommandStats(ctx, p.rdb)
	if err := p.cpu.start(); err != nil {
		return err
	}
	p.allocsBefore = readGoAllocs()
	p.scriptsBefore = p.scripts.snapshot()
	p.began = time.Now()
	p.stopSampling = make(chan struct{})
	p.sampling.Go(func() { p.sample(ctx) })
	return nil
}

// sample counts the run's backends by state and wait until stopped.
func (p *runProfiler) sample(ctx context.Context) {
	tick := time.NewTicker(activityInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.stopSampling:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rows, err := p.sampler.Query(ctx, profileActivitySQL, p.database)
		if err != nil {
			p.samplingErr = err
			return
		}
		for rows.Next() {
			var k waitKey
			var query string
			var n int
			if err := rows.Scan(&k.state, &k.waitType, &k.event, &query, &n); err != nil {
				p.samplingErr = err
				break
			}
			if query != "" {
				k.statement = cmp.Or(postgres.StatementFile(query), statementName(query))
			}
			p.waits[k] += n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			p.samplingErr = err
			return
		}
		p.samples++
	}
}

// redisHook counts a worker's Redis calls by script; nil when nothing is
// measured.
func (p *runProfiler) redisHook() redis.Hook {
	if p == nil {
		return nil
	}
	return p.scripts
}

// registerer is where a worker of the run registers its metrics: nil (a
// registry of its own) when nothing is measured.
func (p *runProfiler) registerer() prometheus.Registerer {
	if p == nil {
		return nil
	}
	registry := prometheus.NewRegistry()
	p.registries = append(p.registries, registry)
	return registry
}

// drained closes the window: the run's work is done.
func (p *runProfiler) drained() {
	if p == nil {
		return
	}
	p.drainedAt = time.Now()
	p.allocs = readGoAllocs().minus(p.allocsBefore)
	p.scriptsAfter = p.scripts.snapshot()
	close(p.stopSampling)
	p.sampling.Wait()
	p.cpuResult, p.cpuErr = p.cpu.end()
	if p.redisErr == nil {
		p.commandsAfter, p.redisErr = readCommandStats(context.Background(), p.rdb)
	}
}

// end reads the counters once the workers have stopped and their
// backends, which flush their statistics as they exit, are gone.
func (p *runProfiler) end(ctx context.Context) (*runProfile, error) {
	if p == nil {
		return nil, nil
	}
	defer p.close()
	if p.drainedAt.IsZero() {
		return nil, errors.New("the run never drained")
	}
	if p.cpuErr != nil {
		return nil, fmt.Errorf("CPU by process: %w", p.cpuErr)
	}
	if p.samplingErr != nil {
		return nil, fmt.Errorf("sampling pg_stat_activity: %w", p.samplingErr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left int
		if err := p.admin.QueryRow(ctx, profileBackendsSQL, p.database, p.reader.PgConn().PID()).Scan(&left); err != nil {
			return nil, err
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := &runProfile{Seconds: p.drainedAt.Sub(p.began).Seconds(), CPU: p.cpuResult, GoAllocs: p.allocs}
	if p.redisErr != nil {
		r.RedisError = p.redisErr.Error()
	} else {
		r.RedisCommands = commandsBetween(p.commandsBefore, p.commandsAfter)
	}
	r.WorkerRedisCalls = map[string]int64{}
	for name, n := range p.scriptsAfter {
		if d := n - p.scriptsBefore[name]; d > 0 {
			r.WorkerRedisCalls[name] = d
		}
	}
	var err error
	if p.statementsErr == nil {
		if r.Statements, err = readStatements(ctx, p.admin, p.database); err != nil {
			p.statementsErr = err
		}
	}
	if p.statementsErr != nil {
		r.StatementsError = p.statementsErr.Error()
	}
	tables, err := readTables(ctx, p.reader)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(tables)) {
		t, b := tables[name], p.tablesBefore[name]
		d := tableProfile{Name: name, Inserted: t.Inserted - b.Inserted, Updated: t.Updated - b.Updated, HOTUpdated: t.HOTUpdated - b.HOTUpdated,
			Deleted: t.Deleted - b.Deleted, SeqScans: t.SeqScans - b.SeqScans, IdxScans: t.IdxScans - b.IdxScans}
		if d.written() > 0 || d.SeqScans > 0 {
			r.Tables = append(r.Tables, d)
		}
	}
	database, err := readDatabase(ctx, p.admin, p.database)
	if err != nil {
		return nil, err
	}
	r.Database = database.minus(p.databaseBefore)
	wal, err := readWAL(ctx, p.admin)
	if err != nil {
		return nil, err
	}
	r.WAL = wal.minus(p.walBefore)
	r.Waits = waitProfile{Samples: p.samples, Seconds: r.Seconds}
	for key, n := range p.waits {
		name, inTx := key.name()
		i := slices.IndexFunc(r.Waits.States, func(s waitState) bool { return s.Name == name })
		if i < 0 {
			r.Waits.States = append(r.Waits.States, waitState{Name: name, InTransaction: inTx})
			i = len(r.Waits.States) - 1
		}
		if p.samples > 0 {
			r.Waits.States[i].Backends += float64(n) / float64(p.samples)
		}
	}
	slices.SortFunc(r.Waits.States, func(a, b waitState) int { return cmp.Compare(b.Backends, a.Backends) })
	if r.Batches, err = gatherBatches(p.registries); err != nil {
		return nil, err
	}
	return r, nil
}

func readTables(ctx context.Context, conn *pgx.Conn) (map[string]tableProfile, error) {
	rows, err := conn.Query(ctx, profileTablesSQL)
	if err != nil {
		return nil, err
	}
	tables := map[string]tableProfile{}
	var t tableProfile
	_, err = pgx.ForEachRow(rows, []any{&t.Name, &t.Inserted, &t.Updated, &t.HOTUpdated, &t.Deleted, &t.SeqScans, &t.IdxScans}, func() error {
		tables[t.Name] = t
		return nil
	})
	return tables, err
}

func readDatabase(ctx context.Context, conn *pgx.Conn, database string) (databaseCounters, error) {
	var d databaseCounters
	err := conn.QueryRow(ctx, profileDatabaseSQL, database).Scan(&d.Commits, &d.Rollbacks, &d.BlksRead, &d.BlksHit,
		&d.Deadlocks, &d.TempBytes, &d.BlkReadMs, &d.BlkWriteMs)
	return d, err
}

func readWAL(ctx context.Context, conn *pgx.Conn) (walCounters, error) {
	var w walCounters
	err := conn.QueryRow(ctx, profileWALSQL).Scan(&w.Records, &w.FPI, &w.Bytes, &w.BuffersFull, &w.Writes, &w.Syncs, &w.WriteMs, &w.SyncMs)
	return w, err
}

// readStatements reads pg_stat_statements' rows of the database, summed by
// statement name and level, most time first.
func readStatements(ctx context.Context, conn *pgx.Conn, database string) ([]statementProfile, error) {
	rows, err := conn.Query(ctx, profileStatementsSQL, database)
	if err != nil {
		return nil, err
	}
	type key struct {
		name     string
		topLevel bool
	}
	byName := map[key]*statementProfile{}
	var query string
	var s statementProfile
	if _, err := pgx.ForEachRow(rows, []any{&query, &s.TopLevel, &s.Calls, &s.TotalMs, &s.Rows, &s.SharedHit, &s.SharedRead, &s.WALBytes}, func() error {
		file := postgres.StatementFile(query)
		k := key{cmp.Or(file, statementName(query)), s.TopLevel}
		sum := byName[k]
		if sum == nil {
			sum = &statementProfile{Name: k.name, TopLevel: k.topLevel, File: file != ""}
			byName[k] = sum
		}
		sum.Calls += s.Calls
		sum.TotalMs += s.TotalMs
		sum.Rows += s.Rows
		sum.SharedHit += s.SharedHit
		sum.SharedRead += s.SharedRead
		sum.WALBytes += s.WALBytes
		return nil
	}); err != nil {
		return nil, err
	}
	list := make([]statementProfile, 0, len(byName))
	for _, s := range byName {
		list = append(list, *s)
	}
	slices.SortFunc(list, func(a, b statementProfile) int {
		return cmp.Or(cmp.Compare(b.TotalMs, a.TotalMs), strings.Compare(a.Name, b.Name))
	})
	return list, nil
}

// statementName is a statement's text on one line, without comments, cut
// short.
func statementName(query string) string {
	var lines []string
	for line := range strings.Lines(query) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "--") {
			lines = append(lines, line)
		}
	}
	text := strings.Join(strings.Fields(strings.Join(lines, " ")), " ")
	if len(text) > 72 {
		text = text[:69] + "…"
	}
	return text
}

// gatherBatches sums the workers' settlement batch metrics.
func gatherBatches(registries []*prometheus.Registry) (batchProfile, error) {
	var b batchProfile
	type phase struct {
		uppers     []float64
		cumulative []uint64
		count      uint64
		sum        float64
	}
	phases := map[string]*phase{}
	for _, registry := range registries {
		families, err := registry.Gather()
		if err != nil {
			return b, err
		}
		for _, family := range families {
			for _, metric := range family.GetMetric() {
				switch family.GetName() {
				case "orders_settlement_batch_orders":
					b.Batches += metric.GetHistogram().GetSampleCount()
					b.Orders += metric.GetHistogram().GetSampleSum()
				case "orders_settlement_redecided_total":
					b.Redecided += metric.GetCounter().GetValue()
				case "orders_settlement_phase_seconds":
					name := ""
					for _, label := range metric.GetLabel() {
						if label.GetName() == "phase" {
							name = label.GetValue()
						}
					}
					h := metric.GetHistogram()
					ph := phases[name]
					if ph == nil {
						ph = &phase{}
						for _, bucket := range h.GetBucket() {
							ph.uppers = append(ph.uppers, bucket.GetUpperBound())
						}
						ph.cumulative = make([]uint64, len(ph.uppers))
						phases[name] = ph
					}
					for i, bucket := range h.GetBucket() {
						if i < len(ph.cumulative) {
							ph.cumulative[i] += bucket.GetCumulativeCount()
						}
					}
					ph.count += h.GetSampleCount()
					ph.sum += h.GetSampleSum()
				}
			}
		}
	}
	for _, name := range []string{"acquire", "read", "decide", "write", "redecide"} {
		ph := phases[name]
		if ph == nil {
			continue
		}
		b.Phases = append(b.Phases, phaseProfile{Name: name, Count: ph.count, Seconds: ph.sum,
			P50Ms: 1000 * bucketQuantile(0.50, ph.uppers, ph.cumulative, ph.count),
			P99Ms: 1000 * bucketQuantile(0.99, ph.uppers, ph.cumulative, ph.count)})
	}
	return b, nil
}

// histogramSum is one histogram series summed over registries.
type histogramSum struct {
	uppers     []float64
	cumulative []uint64
	count      uint64
	sum        float64
}

// gatherHistograms sums family's histograms over registries, by the value
// of label.
func gatherHistograms(registries []*prometheus.Registry, family, label string) (map[string]histogramSum, error) {
	sums := make(map[string]histogramSum)
	for _, registry := range registries {
		families, err := registry.Gather()
		if err != nil {
			return nil, err
		}
		for _, f := range families {
			if f.GetName() != family {
				continue
			}
			for _, metric := range f.GetMetric() {
				name := ""
				for _, l := range metric.GetLabel() {
					if l.GetName() == label {
						name = l.GetValue()
					}
				}
				h, sum := metric.GetHistogram(), sums[name]
				if sum.uppers == nil {
					for _, bucket := range h.GetBucket() {
						sum.uppers = append(sum.uppers, bucket.GetUpperBound())
					}
					sum.cumulative = make([]uint64, len(sum.uppers))
				}
				for i, bucket := range h.GetBucket() {
					if i < len(sum.cumulative) {
						sum.cumulative[i] += bucket.GetCumulativeCount()
					}
				}
				sum.count += h.GetSampleCount()
				sum.sum += h.GetSampleSum()
				sums[name] = sum
			}
		}
	}
	return sums, nil
}

// minus is what h observed since before.
func (h histogramSum) minus(before histogramSum) histogramSum {
	d := histogramSum{uppers: h.uppers, cumulative: slices.Clone(h.cumulative), count: h.count - before.count, sum: h.sum - before.sum}
	for i := range d.cumulative {
		if i < len(before.cumulative) {
			d.cumulative[i] -= before.cumulative[i]
		}
	}
	return d
}

// plus is h and other together: histograms of the same buckets (either
// may be empty).
func (h histogramSum) plus(other histogramSum) histogramSum {
	if h.uppers == nil {
		return other
	}
	d := histogramSum{uppers: h.uppers, cumulative: slices.Clone(h.cumulative), count: h.count + other.count, sum: h.sum + other.sum}
	for i := range d.cumulative {
		if i < len(other.cumulative) {
			d.cumulative[i] += other.cumulative[i]
		}
	}
	return d
}

// profile is h as a phase's figures.
func (h histogramSum) profile(name string) phaseProfile {
	return phaseProfile{Name: name, Count: h.count, Seconds: h.sum,
		P50Ms: 1000 * bucketQuantile(0.50, h.uppers, h.cumulative, h.count),
		P99Ms: 1000 * bucketQuantile(0.99, h.uppers, h.cumulative, h.count)}
}

// bucketQuantile is the q-quantile of a histogram's cumulative buckets,
// interpolated within its bucket as Prometheus's histogram_quantile does;
// past the last finite bound it is that bound.
func bucketQuantile(q float64, uppers []float64, cumulative []uint64, count uint64) float64 {
	if count == 0 || len(uppers) == 0 {
		return 0
	}
	rank := q * float64(count)
	lower, below := 0.0, uint64(0)
	for i, upper := range uppers {
		if float64(cumulative[i]) >= rank {
			in := cumulative[i] - below
			if in == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = upper, cumulative[i]
	}
	return lower
}

// goCPU is the Go runtime's estimate of the process's CPU seconds in GC
// and in user code.
func goCPU() (gc, user float64) {
	samples := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/cpu/classes/user:cpu-seconds"}}
	metrics.Read(samples)
	if samples[0].Value.Kind() == metrics.KindFloat64 {
		gc = samples[0].Value.Float64()
	}
	if samples[1].Value.Kind() == metrics.KindFloat64 {
		user = samples[1].Value.Float64()
	}
	return gc, user
}

// postgresSettings are the settings the bench's PostgreSQL starts with
// beyond its own: profileServerSettings when the matching phase is
// profiled.
func (c config) postgresSettings() []string {
	if c.phases["matching"] && c.matching.profile {
		return profileServerSettings
	}
	return nil
}
