package postgres_test

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/postgres"
)

// TestSettlementGrownPlansProbeKeys: the owner's read and write keep
// reading the rows they name by their keys on a connection that made its
// generic plans while the tables were small, after the tables grew far
// past the statistics without an analysis (a new venue's first minute
// under load, before autovacuum's next analysis). Each case takes its
// statistics, plans the read or the write on one connection with one
// order, grows the tables to 20,000 orders, 8,000 trades and 1,000
// accounts, then runs it again there for 1 and 200 orders and counts the
// blocks each relation gave (the nested statements' included) against
// what a connection planned on the grown tables reads: at most four
// blocks a key more (a probe of another index), and eight for the
// statement (a first probe after the growth). A scan, the failure, reads
// hundreds, once a key or once a statement.
// Cases: statistics of 40 orders, 41 accounts and 10 trades; statistics
// of one order and one account (a probe by id through an index holding id
// as a later column then costs what one through orders_pkey does);
// statistics of the empty tables.
func TestSettlementGrownPlansProbeKeys(t *testing.T) {
	for _, stats := range []struct {
		name     string
		oneOrder bool
		empty    bool
	}{{name: "analyzed small"}, {name: "analyzed with one order", oneOrder: true}, {name: "analyzed empty", empty: true}} {
		for _, run := range []struct {
			name   string
			blocks func(testing.TB, *pgx.Conn, int) map[string]int64
		}{{"read", grownReadBlocks}, {"write", grownWriteBlocks}} {
			t.Run(stats.name+", "+run.name, func(t *testing.T) {
				db := smallAnalyzedPool(t, stats.oneOrder, stats.empty)
				planned := freshConn(t, db)
				run.blocks(t, planned, 1)
				grownExec(t, db, planRows(41, 1000, 40, 20000, 10, 8000, 10, 10000))
				for _, n := range []int{1, 200} {
					got := run.blocks(t, planned, n)
					fresh := freshConn(t, db)
					run.blocks(t, fresh, n)
					want := run.blocks(t, fresh, n)
					for _, name := range relationNames(got, want) {
						if bound := want[name] + 4*int64(n) + 8; got[name] > bound {
							t.Errorf("%d orders: %s gave %d blocks on the connection planned small, %d on a fresh one; want at most %d",
								n, name, got[name], want[name], bound)
						}
					}
				}
			})
		}
	}
}

// smallAnalyzedPool is a migrated database with autovacuum off, its
// statistics taken on 40 orders, 41 accounts and 10 trades, or, with
// oneOrder, on one order and one account, or, with empty, on the empty
// tables, the small rows then added.
func smallAnalyzedPool(t testing.TB, oneOrder, empty bool) *pgxpool.Pool {
	t.Helper()
	db := migratedPool(t)
	grownExec(t, db, `DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		         WHERE n.nspname = 'public' AND c.relkind = 'r' LOOP
			EXECUTE format('ALTER TABLE %I SET (autovacuum_enabled = false)', r.relname);
		END LOOP; END $$`)
	if empty {
		grownExec(t, db, "ANALYZE")
		grownExec(t, db, planRows(0, 41, 0, 40, 0, 10, 0, 10))
		return db
	}
	if !oneOrder {
		grownExec(t, db, planRows(0, 41, 0, 40, 0, 10, 0, 10))
		grownExec(t, db, "ANALYZE")
		return db
	}
	grownExec(t, db, `INSERT INTO accounts (id, name, kind) VALUES ('ACC_' || lpad('2', 26, '0'), 'a2', 'customer')`)
	grownExec(t, db, `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, time_in_force, quantity, price,
		status, filled_quantity, filled_notional, created_at, finished_at)
		VALUES ('ORD_' || lpad('1', 26, '0'), 'ACC_' || lpad('2', 26, '0'), 'c1', 'BTC-USD', 'sell', 'limit', 'gtc', 1, 100,
		'filled', 1, 100, now(), now())`)
	grownExec(t, db, "ANALYZE")
	rows := planRows(0, 41, 1, 40, 0, 10, 0, 10)
	grownExec(t, db, strings.Replace(rows, "generate_series(1, 41) g;", "generate_series(1, 41) g WHERE g <> 2;", 1))
	return db
}

func grownExec(t testing.TB, db *pgxpool.Pool, sql string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%v\n%s", err, sql)
	}
}

// blocksByRelation: the blocks each table and index of the schema gave the
// current transaction, its nested statements' included.
const blocksByRelation = `SELECT c.relname, pg_stat_get_xact_blocks_fetched(c.oid)
	FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') AND pg_stat_get_xact_blocks_fetched(c.oid) > 0`

func scanBlocks(rows pgx.Rows) (map[string]int64, error) {
	got := map[string]int64{}
	var name string
	var blocks int64
	_, err := pgx.ForEachRow(rows, []any{&name, &blocks}, func() error { got[name] = blocks; return nil })
	return got, err
}

// grownWriteBlocks runs genericPlanWrite(n) on conn in a transaction it
// rolls back, and returns the blocks each relation gave it.
func grownWriteBlocks(t testing.TB, conn *pgx.Conn, n int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	runGenericPlanWrite(t, tx, n)
	rows, err := tx.Query(ctx, blocksByRelation)
	if err != nil {
		t.Fatal(err)
	}
	got, err := scanBlocks(rows)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// grownReadBlocks sends genericPlanRead(n) on conn in one pipeline, as
// readOwned does, and returns the blocks each relation gave it.
func grownReadBlocks(t testing.TB, conn *pgx.Conn, n int) map[string]int64 {
	t.Helper()
	read := &pgx.Batch{}
	for _, s := range genericPlanRead(n) {
		read.Queue(postgres.SettlementWriteSQL[s.name], s.args...)
	}
	var got map[string]int64
	read.Queue(blocksByRelation).Query(func(rows pgx.Rows) error {
		var err error
		got, err = scanBlocks(rows)
		return err
	})
	if err := conn.SendBatch(context.Background(), read).Close(); err != nil {
		t.Fatal(err)
	}
	return got
}

func relationNames(maps ...map[string]int64) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range maps {
		for name := range m {
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names
}
