package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/cputime"
)

// BenchmarkOwnedSmallWrites is an owner's write at moderate rates, where
// each write carries one order and pays its whole fixed cost: one
// instrument, a buy that rests then a sell that takes it (every other write
// trades). It reports the CPU the database's backends spent per write
// (pg-µs/write, from /proc/<pid>/schedstat: run the benchmark on the
// machine of the server), the CPU the test process spent (go-µs/write: the
// settler, with the goroutines that drive it) and, where
// pg_stat_statements is loaded (ORDERGATE_BENCH_POSTGRES_URL), statements
// per write: top-level (what the settler sends) and nested (what functions
// and triggers run). Variants "held": a transaction holds a snapshot from
// before the writes, as a reader or relay running longer than a few writes
// does in production; PostgreSQL then keeps every version a write leaves
// of a row, and each later probe of that row walks them. "moving": each
// trade at another price than the one before (cmd/bench's backlog moves it
// on most trades). Compare the figures of one run.
func BenchmarkOwnedSmallWrites(b *testing.B) {
	for _, variant := range []struct {
		name         string
		held, moving bool
	}{{"quiet", false, false}, {"held", true, false}, {"held-moving", true, true}} {
		held := variant.held
		b.Run(variant.name, func(b *testing.B) {
			ctx := context.Background()
			db, accounts := benchCustomers(b, "", 20)
			registry := prometheus.NewRegistry()
			settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler)).
				WithMetrics(postgres.NewSettlementMetrics(registry))
			if err := settler.TakeOver(ctx, "BTC-USD", 1); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { settler.GiveUp("BTC-USD") })
			settle := func(from, n int) {
				for i := from; i < from+n; i++ {
					side := orders.Buy
					if i%2 == 1 {
						side = orders.Sell
					}
					price := "50000.00"
					if variant.moving {
						price = fmt.Sprintf("%d.00", 50000+i/2%2)
					}
					order := newOrder(accounts[(i/2+i%2)%len(accounts)], "BTC-USD", side, "0.00100", price)
					if err := settler.Settle(ctx, order, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Warm: the pool's connections open and their plans are made.
			settle(0, 40)
			if held {
				holdSnapshot(b, db)
			}
			before, beforeCalls := readBatchStats(b, registry), statementCalls(b, db)
			cpu, goCPU := backendCPU(b, db), cputime.Process(b)
			b.ResetTimer()
			settle(40, 2*b.N)
			b.StopTimer()
			spent, goSpent := backendCPU(b, db)-cpu, cputime.Process(b)-goCPU
			after, afterCalls := readBatchStats(b, registry), statementCalls(b, db)
			writes := float64(after.transactions - before.transactions)
			b.ReportMetric(float64(spent)/1e3/writes, "pg-µs/write")
			b.ReportMetric(float64(goSpent)/1e3/writes, "go-µs/write")
			b.ReportMetric(float64(after.orders-before.orders)/writes, "orders/write")
			if beforeCalls != nil {
				b.ReportMetric(float64(afterCalls[true]-beforeCalls[true])/writes, "top/write")
				b.ReportMetric(float64(afterCalls[false]-beforeCalls[false])/writes, "nested/write")
			}
			mustAudit(b, db)
		})
	}
}

// holdSnapshot opens a transaction on db that holds a snapshot until the
// benchmark ends.
func holdSnapshot(b *testing.B, db *pgxpool.Pool) {
	b.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM orders`); err != nil {
		b.Fatal(err)
	}
}

// backendCPU is the CPU time, in ns, the backends of db's database have
// spent since they started (their /proc/<pid>/schedstat).
func backendCPU(t testing.TB, db *pgxpool.Pool) int64 {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'`)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int32
	for rows.Next() {
		var pid int32
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
		if err != nil {
			t.Fatalf("the server is not on this machine: %v", err)
		}
		ns, err := strconv.ParseInt(strings.Fields(string(stat))[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		total += ns
	}
	return total
}

// statementCalls counts the statements pg_stat_statements has seen in db's
// database, top-level (true) and nested (false); nil when the server has
// not loaded it.
func statementCalls(t testing.TB, db *pgxpool.Pool) map[bool]int64 {
	t.Helper()
	ctx := context.Background()
	var preloaded bool
	if err := db.QueryRow(ctx, `SELECT 'pg_stat_statements' = ANY (string_to_array(
			replace(current_setting('shared_preload_libraries'), ' ', ''), ','))`).Scan(&preloaded); err != nil {
		t.Fatal(err)
	}
	if !preloaded {
		return nil
	}
	if _, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Query(ctx, `SELECT toplevel, sum(calls)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY toplevel`)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[bool]int64{}
	for rows.Next() {
		var top bool
		var n int64
		if err := rows.Scan(&top, &n); err != nil {
			t.Fatal(err)
		}
		calls[top] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return calls
}

// BenchmarkOwnedBatchWrites is the owners' writes at the sustained rate,
// where each write carries tens of orders: three owned instruments, each
// settled by 40 goroutines at once (a write gathers the orders that came
// while the one before was written), buys and sells alternating at one
// price so most orders trade. It reports, per order, the CPU the
// database's backends spent (pg-µs/order, /proc/<pid>/schedstat: run it on
// the server's machine) and the test process (go-µs/order), the rows the
// write inserted into the settlement's tables, the WAL it wrote and, where
// pg_stat_statements is loaded (ORDERGATE_BENCH_POSTGRES_URL), the
// statements: top-level and nested (functions and triggers).
func BenchmarkOwnedBatchWrites(b *testing.B) {
	ctx := context.Background()
	db, accounts := benchCustomers(b, "&pool_max_conns=20", 50)
	markets := []struct{ symbol, quantity, price string }{
		{"BTC-USD", "0.00100", "50000.00"}, {"ETH-USD", "0.010", "3000.00"}, {"ETH-BTC", "0.005", "0.06000"},
	}
	registry := prometheus.NewRegistry()
	settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler)).
		WithMetrics(postgres.NewSettlementMetrics(registry))
	for epoch, market := range markets {
		if err := settler.TakeOver(ctx, market.symbol, int64(epoch)+1); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { settler.GiveUp(market.symbol) })
	}
	const perInstrument = 40
	settle := func(from, n int) {
		work := make(chan orders.Order, n)
		for i := from; i < from+n; i++ {
			market := markets[i%len(markets)]
			side := orders.Buy
			if i/len(markets)%2 == 1 {
				side = orders.Sell
			}
			work <- newOrder(accounts[i%len(accounts)], market.symbol, side, market.quantity, market.price)
		}
		close(work)
		var wg sync.WaitGroup
		for range perInstrument * len(markets) {
			wg.Go(func() {
				for order := range work {
					if err := settler.Settle(ctx, order, 1); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	// Warm: the pool's connections open and their plans are made.
	settle(0, 600)
	before, beforeCalls, beforeRows := readBatchStats(b, registry), statementCalls(b, db), settledRows(b, db)
	var beforeWAL string
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&beforeWAL); err != nil {
		b.Fatal(err)
	}
	cpu, goCPU := backendCPU(b, db), cputime.Process(b)
	b.ResetTimer()
	settle(600, b.N)
	b.StopTimer()
	spent, goSpent := backendCPU(b, db)-cpu, cputime.Process(b)-goCPU
	after, afterCalls, afterRows := readBatchStats(b, registry), statementCalls(b, db), settledRows(b, db)
	var wal int64
	if err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, beforeWAL).Scan(&wal); err != nil {
		b.Fatal(err)
	}
	settled := float64(after.orders - before.orders)
	b.ReportMetric(float64(spent)/1e3/settled, "pg-µs/order")
	b.ReportMetric(float64(goSpent)/1e3/settled, "go-µs/order")
	b.ReportMetric(settled/float64(after.transactions-before.transactions), "orders/write")
	b.ReportMetric(float64(afterRows-beforeRows)/settled, "rows/order")
	b.ReportMetric(float64(wal)/settled, "WAL-B/order")
	if beforeCalls != nil {
		b.ReportMetric(float64(afterCalls[true]-beforeCalls[true])/settled, "top/order")
		b.ReportMetric(float64(afterCalls[false]-beforeCalls[false])/settled, "nested/order")
	}
	mustAudit(b, db)
}

// settledRows counts the rows of the tables a settlement write inserts
// into.
func settledRows(t testing.TB, db *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM trades)
		+ (SELECT count(*) FROM ledger_transactions) + (SELECT count(*) FROM ledger_entries)
		+ (SELECT count(*) FROM outbox)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
