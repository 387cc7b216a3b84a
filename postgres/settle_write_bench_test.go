package postgres_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// BenchmarkOwnedSmallWrites is an owner's write at moderate rates, where
// each write carries one order and pays its whole fixed cost: one
// instrument, a buy that rests then a sell that takes it (every other write
// trades). It reports the CPU the database's backends spent per write
// (pg-µs/write, from /proc/<pid>/schedstat: run the benchmark on the
// machine of the server) and, where pg_stat_statements is loaded
// (ORDERGATE_BENCH_POSTGRES_URL), statements per write: top-level (what the
// settler sends) and nested (what functions and triggers run). Variants
// "held": a transaction holds a snapshot from before the writes, as a
// reader or relay running longer than a few writes does in production;
// PostgreSQL then keeps every version a write leaves of a row, and each
// later probe of that row walks them. "moving": each trade at another
// price than the one before (cmd/bench's backlog moves it on most
// trades). Compare the figures of one run.
func BenchmarkOwnedSmallWrites(b *testing.B) {
	for _, variant := range []struct {
		name         string
		held, moving bool
	}{{"quiet", false, false}, {"held", true, false}, {"held-moving", true, true}} {
		held := variant.held
		b.Run(variant.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := pgxpool.New(ctx, benchDatabaseURL(b))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(db.Close)
			m := &market{db: db}
			accounts := make([]string, 20)
			for i := range accounts {
				accounts[i] = m.newCustomer(b)
			}
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
			cpu := backendCPU(b, db)
			b.ResetTimer()
			settle(40, 2*b.N)
			b.StopTimer()
			spent := backendCPU(b, db) - cpu
			after, afterCalls := readBatchStats(b, registry), statementCalls(b, db)
			writes := float64(after.transactions - before.transactions)
			b.ReportMetric(float64(spent)/1e3/writes, "pg-µs/write")
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
