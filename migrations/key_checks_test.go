package migrations_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestKeyChecksProbeByKey: the statement triggers that check an insert's
// keys (0016) probe each key, so what a check reads does not grow with the
// tables it checks against. PL/pgSQL keeps a check's plan for the
// connection's life, and a worker makes it on its first write: in a fresh
// database, against tables of a few rows, with no statistics yet or with
// statistics of fewer rows still. A plan that read such a table whole
// (once, to compare every key against) then went on reading all of it on
// every write as the table grew: the orders table, on each write that
// traded. A probe "id = key" through an index that holds id as a later
// column reads that index whole for each key: on statistics of an orders
// table of one row the planner judged it as cheap as orders_pkey.
func TestKeyChecksProbeByKey(t *testing.T) {
	for _, state := range []struct {
		name string
		// analyzeAt: the number of orders when orders is analyzed, 0 for never.
		analyzeAt int
	}{{name: "no statistics"}, {name: "statistics of one order", analyzeAt: 1}} {
		t.Run(state.name, func(t *testing.T) { keyChecksProbeByKey(t, state.analyzeAt) })
	}
}

func keyChecksProbeByKey(t *testing.T, analyzeAt int) {
	database := testserver.MigratedPostgres(t)
	db := database.Pool(t)
	ctx := context.Background()
	const venue, external = "ACC_0000000000000000000000000V", "ACC_0000000000000000000000000X"
	run := func(statement string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, statement, args...); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
	// The statistics stay those of the small tables, as between two of
	// autovacuum's analyses of a growing one.
	for _, table := range []string{"orders", "accounts", "balances", "ledger_transactions"} {
		run(`ALTER TABLE ` + table + ` SET (autovacuum_enabled = false)`)
	}
	run(`INSERT INTO balances (account_id, asset) VALUES ('` + venue + `', 'USD'), ('` + external + `', 'USD')`)
	// n trades of orders after the first order firstOrder and of ledger
	// transactions from firstTransaction on.
	trades := func(n, firstOrder, firstTransaction int) string {
		sql := `INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side,
			price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps) VALUES `
		for i := range n {
			if i > 0 {
				sql += ", "
			}
			sql += `('BTC-USD', '` + fmt.Sprintf("ORD_%026d", firstOrder+2*i+1) + `', '` + fmt.Sprintf("ORD_%026d", firstOrder+2*i+2) +
				`', '` + venue + `', '` + external + `', 'sell', 1, 1, 0, 0, ` + strconv.Itoa(firstTransaction+i) + `, 0, 0)`
		}
		return sql
	}
	orders := `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
		SELECT 'ORD_' || lpad(g::text, 26, '0'), CASE WHEN g % 2 = 1 THEN '` + venue + `' ELSE '` + external + `' END,
			'c' || g, 'BTC-USD', CASE WHEN g % 2 = 1 THEN 'buy' ELSE 'sell' END, 'limit', 1, 1, 'canceled', now()
		FROM generate_series($1::int, $2::int) AS g`
	transactions := `INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE
		SELECT g, 'settlement', 'ORD_' || lpad(g::text, 26, '0') FROM generate_series($1::int, $2::int) AS g`
	entries := func(transaction int) string {
		return `INSERT INTO ledger_entries (transaction_id, account_id, asset, amount) VALUES (` + strconv.Itoa(transaction) +
			`, '` + venue + `', 'USD', 1), (` + strconv.Itoa(transaction) + `, '` + external + `', 'USD', -1)`
	}
	const few, many = 20, 20000
	if analyzeAt > 0 {
		run(orders, 1, analyzeAt)
		run(`ANALYZE orders`)
	}
	run(orders, analyzeAt+1, few)
	run(transactions, 1, few)

	// One connection, whose checks are planned against the few rows.
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// Each check names the newest rows once the tables have grown: a whole
	// index read in key order up to them reaches them last.
	checks := []struct {
		name string
		sql  func(grown bool) string
		keys map[string]int // the keys it names, by the table they are of
	}{
		{"trades", func(grown bool) string {
			if grown {
				return trades(7, many-14, many-6)
			}
			return trades(7, 0, 1)
		}, map[string]int{"orders": 14, "accounts": 2, "ledger_transactions": 7}},
		{"ledger entries", func(grown bool) string {
			if grown {
				return entries(many)
			}
			return entries(1)
		}, map[string]int{"ledger_transactions": 1, "balances": 2}},
		{"orders", func(grown bool) string {
			id, client := "ORD_90000000000000000000000000", "x0"
			if grown {
				id, client = "ORD_90000000000000000000000001", "x1"
			}
			return `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
				VALUES ('` + id + `', '` + venue + `', '` + client + `', 'BTC-USD', 'buy', 'limit', 1, 1, 'canceled', now())`
		}, map[string]int{"accounts": 1}},
	}
	for _, check := range checks {
		if _, err := conn.Exec(ctx, check.sql(false)); err != nil {
			t.Fatalf("%s, planned: %v", check.name, err)
		}
	}

	run(orders, few+1, many)
	run(transactions, few+1, many)
	run(`INSERT INTO accounts (id, name, kind) SELECT 'ACC_' || lpad(g::text, 26, '0'), 'a' || g, 'customer'
		FROM generate_series(1, ` + strconv.Itoa(many) + `) AS g`)
	run(`INSERT INTO balances (account_id, asset) SELECT 'ACC_' || lpad(g::text, 26, '0'), 'USD'
		FROM generate_series(1, ` + strconv.Itoa(many) + `) AS g`)

	for _, check := range checks {
		t.Run(check.name, func(t *testing.T) {
			tables := make([]string, 0, len(check.keys))
			for table := range check.keys {
				tables = append(tables, table)
			}
			read := blocksReadBy(t, conn, check.sql(true), tables)
			for table, n := range read {
				// A probe reads a block or two of an index and one of the
				// table: a scan reads hundreds.
				if limit := int64(8 * check.keys[table]); n > limit {
					t.Errorf("checking %d keys against %s read %d blocks (table and indexes), more than %d", check.keys[table], table, n, limit)
				}
			}
		})
	}
}

// blocksReadBy runs sql in a transaction it rolls back and returns the
// blocks it read of each of tables and of their indexes. The counts are
// taken before and after sql in that transaction: a backend's counts
// include those of its earlier transactions until it reports them, which
// it does at most once a second.
func blocksReadBy(t testing.TB, conn *pgxpool.Conn, sql string, tables []string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	count := func() map[string]int64 {
		counts := map[string]int64{}
		for _, table := range tables {
			var n int64
			if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_blocks_fetched(t.oid)
					+ (SELECT coalesce(sum(pg_stat_get_xact_blocks_fetched(i.indexrelid)), 0) FROM pg_index i WHERE i.indrelid = t.oid)
				FROM pg_class t WHERE t.oid = $1::regclass`, table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			counts[table] = n
		}
		return counts
	}
	before := count()
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	read := count()
	for table := range read {
		read[table] -= before[table]
	}
	return read
}
