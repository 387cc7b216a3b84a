package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestProfileParsesProcStat(t *testing.T) {
	// comm with a space and a parenthesis; utime 250, stime 50, cutime 7,
	// cstime 3 ticks; starttime 424242.
	line := "4711 (postgres: a) b) S 4700 4700 4700 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 424242 1000 100 18446744073709551615"
	st, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.comm != "postgres: a) b" || st.ppid != 4700 || st.cpu != 3 || st.children != 0.1 || st.start != 424242 {
		t.Errorf("parsed %+v", st)
	}
	if _, err := parseProcStat("4711 (short) S 1 2"); err == nil {
		t.Error("a short line parsed")
	}
	busy, idle, err := parseMachineCPU("cpu  1000 10 300 5000 100 20 30 40 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(busy-14) > 1e-9 || math.Abs(idle-51) > 1e-9 {
		t.Errorf("busy %v, idle %v; want 14 and 51", busy, idle)
	}
}

func TestProfileSortsPostgresProcesses(t *testing.T) {
	for _, tt := range []struct {
		title string
		pid   int
		want  string
	}{
		{"postgres: walwriter ", 10, pgWALWriter},
		{"postgres: checkpointer ", 10, pgCheckpoint},
		{"postgres: background writer ", 10, pgCheckpoint},
		{"postgres: autovacuum worker bench_match_hot_1", 10, pgVacuum},
		{"postgres: logical replication launcher ", 10, pgRest},
		{"postgres: postgres bench_match_hot_1 127.0.0.1(4711) idle", 10, pgBackends},
		{"postgres: postgres bench_match_hot_1 127.0.0.1(4711) SELECT", 99, pgProfiler},
		{"postgres: postgres postgres 127.0.0.1(4712) idle", 10, pgOther},
		{"/usr/lib/postgresql/15/bin/postgres -D data", 10, pgRest},
	} {
		if got := postgresKind(tt.title, "bench_match_hot_1", tt.pid, 99); got != tt.want {
			t.Errorf("%q (pid %d) is %q, want %q", tt.title, tt.pid, got, tt.want)
		}
	}
}

func TestProfileBucketQuantile(t *testing.T) {
	uppers := []float64{1, 2, 4, 8}
	// 10 in (0,1], 10 in (1,2], 0 in (2,4], 80 in (4,8]
	cumulative := []uint64{10, 20, 20, 100}
	for _, tt := range []struct{ q, want float64 }{
		{0.05, 0.5}, {0.10, 1}, {0.15, 1.5}, {0.60, 6}, {0.99, 7.95},
	} {
		if got := bucketQuantile(tt.q, uppers, cumulative, 100); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("q%.2f = %v, want %v", tt.q, got, tt.want)
		}
	}
	// Past the last finite bound: that bound.
	if got := bucketQuantile(0.99, uppers, []uint64{0, 0, 0, 1}, 10); got != 8 {
		t.Errorf("a quantile past the buckets is %v, want 8", got)
	}
	if got := bucketQuantile(0.5, uppers, cumulative, 0); got != 0 {
		t.Errorf("an empty histogram's quantile is %v", got)
	}
}

// TestProfileHistogramsAddUp: queues' histograms add bucket by bucket,
// an empty one (a queue that observed nothing) adding nothing.
func TestProfileHistogramsAddUp(t *testing.T) {
	a := histogramSum{uppers: []float64{1, 2}, cumulative: []uint64{1, 3}, count: 3, sum: 4}
	b := histogramSum{uppers: []float64{1, 2}, cumulative: []uint64{2, 2}, count: 2, sum: 1.5}
	for _, tt := range []struct {
		name       string
		got        histogramSum
		cumulative []uint64
		count      uint64
		sum        float64
	}{
		{name: "two", got: a.plus(b), cumulative: []uint64{3, 5}, count: 5, sum: 5.5},
		{name: "empty first", got: histogramSum{}.plus(a), cumulative: []uint64{1, 3}, count: 3, sum: 4},
		{name: "empty second", got: a.plus(histogramSum{}), cumulative: []uint64{1, 3}, count: 3, sum: 4},
	} {
		if !slices.Equal(tt.got.cumulative, tt.cumulative) || tt.got.count != tt.count || tt.got.sum != tt.sum {
			t.Errorf("%s: %v %d %v, want %v %d %v", tt.name, tt.got.cumulative, tt.got.count, tt.got.sum, tt.cumulative, tt.count, tt.sum)
		}
	}
	if a.cumulative[0] != 1 {
		t.Errorf("plus changed its receiver: %v", a.cumulative)
	}
}

func TestProfileNamesStatementsAndWaits(t *testing.T) {
	if got := statementName("-- a comment\nSELECT a,\n    b   FROM t\nWHERE x = $1"); got != "SELECT a, b FROM t WHERE x = $1" {
		t.Errorf("statementName = %q", got)
	}
	if got := statementName(strings.Repeat("x ", 100)); len([]rune(got)) != 70 || !strings.HasSuffix(got, "…") {
		t.Errorf("a long statement is named %q", got)
	}
	for _, tt := range []struct {
		key  waitKey
		name string
		inTx bool
	}{
		{waitKey{"idle", "Client", "ClientRead", ""}, "idle, no transaction open", false},
		{waitKey{"idle in transaction", "Client", "ClientRead", ""}, "idle in transaction: waiting on its worker", true},
		{waitKey{"active", "", "", ""}, "running: on a CPU or waiting for one", true},
		{waitKey{"active", "Lock", "transactionid", ""}, "Lock: transactionid", true},
		{waitKey{"active", "Lock", "tuple", "settle_instruments"}, "Lock: tuple in settle_instruments", true},
		{waitKey{"", "", "", ""}, "no state yet (connecting)", true},
	} {
		if name, inTx := tt.key.name(); name != tt.name || inTx != tt.inTx {
			t.Errorf("%+v is %q (%v), want %q (%v)", tt.key, name, inTx, tt.name, tt.inTx)
		}
	}
	for _, s := range []statementProfile{{Name: "BEGIN"}, {Name: "COMMIT"}, {Name: "SAVEPOINT settle_decided"}, {Name: "ROLLBACK TO SAVEPOINT settle_decided"}} {
		if !s.transactionControl() {
			t.Errorf("%s is not transaction control", s.Name)
		}
	}
	if (statementProfile{Name: "SELECT 1"}).transactionControl() {
		t.Error("SELECT is transaction control")
	}
}

// TestProfileWatchesTheBenchsCPU: with no server of its own, the watch
// still reads the bench process and the machine.
func TestProfileWatchesTheBenchsCPU(t *testing.T) {
	w := newCPUWatch(0, 0, 0, "none")
	if err := w.start(); err != nil {
		t.Fatal(err)
	}
	x := 0.0
	for i := range 100_000_000 {
		x += math.Sqrt(float64(i))
	}
	p, err := w.end()
	if err != nil {
		t.Fatal(err)
	}
	// The kernel counts CPU in ticks of 10 ms, the machine's and the
	// process's each read at its own moment: two ticks of each apart.
	if p.Seconds <= 0 || p.Bench <= 0 || p.MachineBusy < p.Bench-0.04 || p.HasPostgres || p.HasRedis || x == 0 {
		t.Errorf("watched %+v", p)
	}
}

// TestMatchRunProfile profiles the hot run at 200 orders, its backlog
// admitted first and open loop at 400 orders/s, against the harness's
// servers (whose PostgreSQL has no pg_stat_statements, which the
// profile says, and which the bench did not start, so its CPU is not
// read): the rows written, the batches and their phases, the samples.
func TestMatchRunProfile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs worker processes over two fresh databases")
	}
	redisServer := testserver.QueueRedisServer(t)
	database := testserver.Postgres(t)
	s := &servers{redisURL: redisServer.URL(), databaseURL: database.URL}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	queue, err := emq.Dial(ctx, s.redisURL, emq.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = queue.Close() })
	for _, rate := range []float64{0, 400} {
		t.Run("rate "+strconv.Itoa(int(rate)), func(t *testing.T) {
			e := &env{queue: queue, logger: log, run: "profile" + strconv.Itoa(int(rate))}
			c := matchingConfig{orders: 200, accounts: 20, workers: 2, profile: true, rate: rate}
			r, err := e.matchRun(ctx, c, s, "hot", []string{"BTC-USD"}, t.Logf)
			if err != nil {
				t.Fatal(err)
			}
			p := r.Profile
			if p == nil {
				t.Fatal("no profile")
			}
			if p.Orders != 200 || p.Trades != r.AllTrades || p.Seconds <= 0 {
				t.Errorf("profile of %d orders, %d trades over %.3f s", p.Orders, p.Trades, p.Seconds)
			}
			written := map[string]tableProfile{}
			for _, table := range p.Tables {
				written[table.Name] = table
			}
			if written["orders"].Inserted != 200 || written["trades"].Inserted != int64(r.AllTrades) || written["ledger_entries"].Inserted == 0 || written["balances"].Updated == 0 {
				t.Errorf("rows written: %+v", p.Tables)
			}
			if p.Database.Commits < p.Database.Rollbacks || p.Database.Commits == 0 || p.WAL.Bytes <= 0 {
				t.Errorf("database %+v, WAL %+v", p.Database, p.WAL)
			}
			if p.StatementsError == "" && len(p.Statements) == 0 {
				t.Error("neither statements nor why there are none")
			}
			if p.Batches.Batches == 0 || p.Batches.Orders < 200 || len(p.Batches.Phases) != 5 {
				t.Fatalf("batches %+v", p.Batches)
			}
			for _, ph := range p.Batches.Phases[:4] {
				if ph.Count == 0 || ph.Seconds <= 0 || ph.P99Ms < ph.P50Ms {
					t.Errorf("phase %+v", ph)
				}
			}
			if p.CPU.HasPostgres || p.CPU.Bench <= 0 {
				t.Errorf("CPU %+v", p.CPU)
			}
			table := profileMarkdown([]matchRun{r})
			for _, want := range []string{"CPU by process", "· orders: inserted", "a settlement batch's cycle", "| decide |"} {
				if !strings.Contains(table, want) {
					t.Errorf("the profile's tables lack %q:\n%s", want, table)
				}
			}
		})
	}
}
