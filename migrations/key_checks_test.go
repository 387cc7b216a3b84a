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
// database, against tables of a few rows. A plan that read such a table
// whole (once, to compare every key against) then went on reading all of
// it on every write as the table grew: the orders table, on each write
// that traded.
func TestKeyChecksProbeByKey(t *testing.T) {
	database := testserver.MigratedPostgres(t)
	db := database.Pool(t)
	ctx := context.Background()
	const venue, external = "ACC_0000000000000000000000000V", "ACC_0000000000000000000000000X"
	run := func(statements ...string) {
		t.Helper()
		for _, statement := range statements {
			if _, err := db.Exec(ctx, statement); err != nil {
				t.Fatalf("%s: %v", statement, err)
			}
		}
	}
	// The statistics stay those of the small tables, as between two of
	// autovacuum's analyses of a growing one.
	run(`ALTER TABLE orders SET (autovacuum_enabled = false)`, `ALTER TABLE accounts SET (autovacuum_enabled = false)`,
		`ALTER TABLE balances SET (autovacuum_enabled = false)`, `ALTER TABLE ledger_transactions SET (autovacuum_enabled = false)`,
		`INSERT INTO balances (account_id, asset) VALUES ('`+venue+`', 'USD'), ('`+external+`', 'USD')`)
	trades := func(n, firstTransaction int) string {
		sql := `INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side,
			price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps) VALUES `
		for i := range n {
			if i > 0 {
				sql += ", "
			}
			sql += `('BTC-USD', '` + fmt.Sprintf("ORD_%026d", 2*i+1) + `', '` + fmt.Sprintf("ORD_%026d", 2*i+2) + `', '` + venue + `', '` + external + `', 'sell', 1, 1, 0, 0, ` +
				strconv.Itoa(firstTransaction+i) + `, 0, 0)`
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
	if _, err := db.Exec(ctx, orders, 1, few); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, transactions, 1, few); err != nil {
		t.Fatal(err)
	}

	// One connection, whose checks are planned against the few rows.
	conn, err := db.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	checks := []struct {
		name   string
		sql    func(round int) string
		tables []string
	}{
		{"trades", func(round int) string { return trades(7, 1+7*round) }, []string{"orders", "accounts", "ledger_transactions"}},
		{"ledger entries", func(round int) string { return entries(1 + round) }, []string{"ledger_transactions", "balances"}},
		{"orders", func(round int) string {
			return `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
				VALUES ('` + fmt.Sprintf("ORD_9%025d", round) + `', '` + venue + `', 'x` + strconv.Itoa(round) +
				`', 'BTC-USD', 'buy', 'limit', 1, 1, 'canceled', now())`
		}, []string{"accounts"}},
	}
	for _, check := range checks {
		if _, err := conn.Exec(ctx, check.sql(0)); err != nil {
			t.Fatalf("%s, planned: %v", check.name, err)
		}
	}

	if _, err := db.Exec(ctx, orders, few+1, many); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, transactions, few+1, many); err != nil {
		t.Fatal(err)
	}
	run(`INSERT INTO accounts (id, name, kind) SELECT 'ACC_' || lpad(g::text, 26, '0'), 'a' || g, 'customer'
			FROM generate_series(1, `+strconv.Itoa(many)+`) AS g`,
		`INSERT INTO balances (account_id, asset) SELECT 'ACC_' || lpad(g::text, 26, '0'), 'USD'
			FROM generate_series(1, `+strconv.Itoa(many)+`) AS g`)

	for _, check := range checks {
		t.Run(check.name, func(t *testing.T) {
			read := rowsReadBy(t, conn, check.sql(1), check.tables)
			for table, n := range read {
				// A probe reads a key or two: a scan reads the table.
				if n > 100 {
					t.Errorf("checking against %s read %d rows of its %d", table, n, many)
				}
			}
		})
	}
}

// rowsReadBy runs sql in a transaction it rolls back and returns the rows
// it read of each of tables: scanned, or fetched through an index.
func rowsReadBy(t testing.TB, conn *pgxpool.Conn, sql string, tables []string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	read := map[string]int64{}
	for _, table := range tables {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_returned(t.oid) + pg_stat_get_xact_tuples_fetched(t.oid)
				+ (SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(i.indexrelid)), 0) FROM pg_index i WHERE i.indrelid = t.oid)
			FROM pg_class t WHERE t.oid = $1::regclass`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		read[table] = n
	}
	return read
}
