package migrations_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func TestUpDownUp(t *testing.T) {
	database := testserver.Postgres(t)
	db := database.Pool(t)
	tables := func() int {
		var n int
		if err := db.QueryRow(context.Background(),
			`SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name <> 'schema_migrations'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	steps := []struct {
		name       string
		apply      func(string) error
		wantTables bool
	}{
		{"up", migrations.Up, true},
		{"up again changes nothing", migrations.Up, true},
		{"down", migrations.Down, false},
		{"up after down", migrations.Up, true},
	}
	for _, step := range steps {
		if err := step.apply(database.URL); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := tables(); (got > 0) != step.wantTables {
			t.Fatalf("%s: %d tables", step.name, got)
		}
		if version, dirty, err := migrations.Version(database.URL); err != nil || dirty {
			t.Fatalf("%s: version %d dirty %v: %v", step.name, version, dirty, err)
		}
	}
	var instruments int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM instruments WHERE symbol IN ('BTC-USD', 'ETH-USD', 'ETH-BTC')`).Scan(&instruments); err != nil || instruments != 3 {
		t.Fatalf("seeded instruments = %d, %v", instruments, err)
	}
}

func TestLedgerRefusesUnbalancedAndRewrittenEntries(t *testing.T) {
	db := testserver.MigratedPostgres(t).Pool(t)
	ctx := context.Background()
	setup := `INSERT INTO balances (account_id, asset) VALUES ('ACC_0000000000000000000000000V', 'USD'), ('ACC_0000000000000000000000000X', 'USD'),
		('ACC_0000000000000000000000000V', 'BTC')`
	if _, err := db.Exec(ctx, setup); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sql  string
		want string // in the error
	}{
		{"unbalanced transaction", `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT id, 'ACC_0000000000000000000000000V', 'USD', 10 FROM tx`, "does not balance in USD"},
		{"off by a fraction", `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT id, 'ACC_0000000000000000000000000V', 'USD', 10 FROM tx UNION ALL
			SELECT id, 'ACC_0000000000000000000000000X', 'USD', -9.999999999 FROM tx`, "does not balance in USD"},
		// Each statement's entries balance per transaction (0014): entries
		// that balance only with a later statement's are refused at once.
		{"balanced only across two statements", `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT id, 'ACC_0000000000000000000000000V', 'USD', 10 FROM tx;
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			VALUES (currval(pg_get_serial_sequence('ledger_transactions', 'id')), 'ACC_0000000000000000000000000X', 'USD', -10)`, "does not balance in USD"},
		{"unbalanced addition to a balanced transaction", `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT id, 'ACC_0000000000000000000000000V', 'USD', 10 FROM tx UNION ALL
			SELECT id, 'ACC_0000000000000000000000000X', 'USD', -10 FROM tx;
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			VALUES (currval(pg_get_serial_sequence('ledger_transactions', 'id')), 'ACC_0000000000000000000000000X', 'USD', -1)`, "does not balance in USD"},
		{"balanced in one asset, not in another", `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT id, 'ACC_0000000000000000000000000V', 'USD', 10 FROM tx UNION ALL
			SELECT id, 'ACC_0000000000000000000000000X', 'USD', -10 FROM tx UNION ALL
			SELECT id, 'ACC_0000000000000000000000000V', 'BTC', 1 FROM tx`, "does not balance in BTC"},
		{"negative customer-side balance", `UPDATE balances SET available = -1 WHERE account_id = 'ACC_0000000000000000000000000V'`, "balances_check"},
		{"settlement without an order", `INSERT INTO ledger_transactions (kind) VALUES ('settlement')`, "ledger_transactions_order_check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.Exec(ctx, tt.sql)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
		})
	}
	balanced := `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
		INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
		SELECT id, 'ACC_0000000000000000000000000V', 'USD', 10 FROM tx UNION ALL
		SELECT id, 'ACC_0000000000000000000000000X', 'USD', -10 FROM tx`
	if _, err := db.Exec(ctx, balanced); err != nil {
		t.Fatalf("balanced transaction refused: %v", err)
	}
	for _, rewrite := range []string{`UPDATE ledger_entries SET amount = 20`, `DELETE FROM ledger_entries`, `DELETE FROM ledger_transactions`} {
		if _, err := db.Exec(ctx, rewrite); err == nil {
			t.Errorf("%s accepted on an append-only ledger", rewrite)
		}
	}
}

// TestKeysCheckedPerStatement: since 0016 the keys of ledger entries,
// trades and orders are checked by a trigger per statement instead of
// foreign keys, and the rows they name refuse to go.
func TestKeysCheckedPerStatement(t *testing.T) {
	db := testserver.MigratedPostgres(t).Pool(t)
	ctx := context.Background()
	const venue, external = "ACC_0000000000000000000000000V", "ACC_0000000000000000000000000X"
	setup := []string{
		`INSERT INTO balances (account_id, asset) VALUES ('` + venue + `', 'USD'), ('` + external + `', 'USD')`,
		`INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
			VALUES ('ORD_00000000000000000000000001', '` + venue + `', 'a', 'BTC-USD', 'buy', 'limit', 1, 1, 'canceled', now()),
			('ORD_00000000000000000000000002', '` + external + `', 'b', 'BTC-USD', 'sell', 'limit', 1, 1, 'canceled', now())`,
		`INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE VALUES (1000, 'trade', 'ORD_00000000000000000000000002'),
			(1001, 'trade', 'ORD_00000000000000000000000002')`,
		`INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side, price,
			quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
			VALUES ('BTC-USD', 'ORD_00000000000000000000000001', 'ORD_00000000000000000000000002', '` + venue + `', '` + external + `',
			'sell', 1, 1, 0, 0, 1000, 0, 0)`,
	}
	for _, statement := range setup {
		if _, err := db.Exec(ctx, statement); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
	trade := func(symbol, maker, taker, makerAccount string, txn int) string {
		return `INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side, price,
			quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
			VALUES ('` + symbol + `', '` + maker + `', '` + taker + `', '` + makerAccount + `', '` + external + `', 'sell', 1, 1, 0, 0, ` +
			strconv.Itoa(txn) + `, 0, 0)`
	}
	const o1, o2, nobody = "ORD_00000000000000000000000001", "ORD_00000000000000000000000002", "ACC_00000000000000000000000000"
	tests := []struct {
		name, sql, want string
	}{
		{"entry of no transaction", `INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			VALUES (999999, '` + venue + `', 'USD', 1), (999999, '` + external + `', 'USD', -1)`, "ledger transaction 999999 does not exist"},
		{"entry of no balance", `WITH tx AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
			INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT id, '` + venue + `', 'BTC', 1 FROM tx UNION ALL SELECT id, '` + external + `', 'BTC', -1 FROM tx`, "balance (" + venue + ", BTC) does not exist"},
		{"trade of no instrument", trade("XXX-USD", o1, o2, venue, 1001), "instrument XXX-USD does not exist"},
		{"trade of no account", trade("BTC-USD", o1, o2, nobody, 1001), "account " + nobody + " does not exist"},
		{"trade of no order", trade("BTC-USD", "ORD_00000000000000000000000009", o2, venue, 1001), "order ORD_00000000000000000000000009 does not exist"},
		{"trade of no transaction", trade("BTC-USD", o1, o2, venue, 999999), "ledger transaction 999999 does not exist"},
		{"order of no account", `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
			VALUES ('ORD_00000000000000000000000003', '` + nobody + `', 'c', 'BTC-USD', 'buy', 'limit', 1, 1, 'canceled', now())`, "account " + nobody + " does not exist"},
		{"order of no instrument", `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
			VALUES ('ORD_00000000000000000000000003', '` + venue + `', 'c', 'XXX-USD', 'buy', 'limit', 1, 1, 'canceled', now())`, "instrument XXX-USD does not exist"},
		{"order moved to no account", `UPDATE orders SET account_id = '` + nobody + `' WHERE id = '` + o1 + `'`, "refers to a row that does not exist"},
		{"trade moved to no account", `UPDATE trades SET maker_account_id = '` + nobody + `'`, "refers to a row that does not exist"},
		{"a traded order deleted", `DELETE FROM orders WHERE id = '` + o1 + `'`, "has trades"},
		{"an account deleted", `DELETE FROM accounts WHERE id = '` + venue + `'`, "DELETE on accounts refused"},
		{"an instrument renamed", `UPDATE instruments SET symbol = 'XBT-USD' WHERE symbol = 'BTC-USD'`, "UPDATE on instruments refused"},
		{"a balance deleted", `DELETE FROM balances`, "DELETE on balances refused"},
		{"balances truncated", `TRUNCATE balances CASCADE`, "TRUNCATE on balances refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := db.Exec(ctx, tt.sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, tt.want) {
				t.Fatalf("got %v, want an error naming %q", err, tt.want)
			}
			if pgErr.Code != "23503" {
				t.Errorf("SQLSTATE %s, want 23503 (foreign_key_violation)", pgErr.Code)
			}
		})
	}
	// An order no trade names may go, as before.
	if _, err := db.Exec(ctx, `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
		VALUES ('ORD_00000000000000000000000003', '`+venue+`', 'c', 'BTC-USD', 'buy', 'limit', 1, 1, 'canceled', now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `DELETE FROM orders WHERE id = 'ORD_00000000000000000000000003'`); err != nil {
		t.Fatalf("an order without trades: %v", err)
	}
}

// TestJournalViewsGo: migration 0004 kept the outbox's old names as views
// for workers of the release before it; 0010 drops them, and its down
// migration brings them back as 0004 made them.
func TestJournalViewsGo(t *testing.T) {
	database := testserver.Postgres(t)
	db := database.Pool(t)
	views := func() []string {
		t.Helper()
		rows, err := db.Query(context.Background(),
			`SELECT table_name FROM information_schema.views WHERE table_schema = 'public' AND table_name LIKE 'journal%' ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	steps := []struct {
		version uint
		want    []string
	}{
		{9, []string{"journal_applied", "journal_outbox"}},
		{10, nil},
		{9, []string{"journal_applied", "journal_outbox"}},
	}
	for _, step := range steps {
		if err := migrations.UpTo(database.URL, step.version); err != nil {
			t.Fatalf("to %d: %v", step.version, err)
		}
		if got := views(); !slices.Equal(got, step.want) {
			t.Errorf("at version %d the views are %v, want %v", step.version, got, step.want)
		}
	}
	// Written through again, as 0004's were: an insert lands in outbox.
	if _, err := db.Exec(context.Background(),
		`INSERT INTO journal_outbox (name, version, payload) VALUES ('balances:x:USD', 1, 'balances:x:USD@1')`); err != nil {
		t.Fatalf("writing through the restored view: %v", err)
	}
}

// A DATABASE_URL tuned for the binaries' connection pool (pool_* parameters,
// which pgxpool reads) migrates too: the parameters are the pool's, not
// PostgreSQL's.
func TestUpWithPoolParameters(t *testing.T) {
	database := testserver.Postgres(t)
	separator := "?"
	if strings.Contains(database.URL, "?") {
		separator = "&"
	}
	url := database.URL + separator + "pool_max_conns=4&pool_min_conns=1&pool_max_conn_lifetime=1h"
	if err := migrations.Up(url); err != nil {
		t.Fatalf("up with pool parameters: %v", err)
	}
	if version, dirty, err := migrations.Version(url); err != nil || dirty || version == 0 {
		t.Fatalf("version %d dirty %v: %v", version, dirty, err)
	}
}

// TestClientOrderIDGuardMarksEarlierDuplicates: rows from before migration
// 0007 that share an account's client order id keep their data; the first
// that moved money holds the pair (not merely the first), the others are
// marked its duplicates by the migration, and the unique index then holds.
func TestClientOrderIDGuardMarksEarlierDuplicates(t *testing.T) {
	ctx := context.Background()
	database := testserver.Postgres(t)
	db := database.Pool(t)
	if err := migrations.UpTo(database.URL, 6); err != nil {
		t.Fatal(err)
	}
	const account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"
	ids := []string{"ORD_01J9Z7W2X3Y4Z5A6B7C8D9E0F1", "ORD_01J9Z7W2X3Y4Z5A6B7C8D9E0F2", "ORD_01J9Z7W2X3Y4Z5A6B7C8D9E0F3"}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO accounts (id, name, kind) VALUES ($1, 'old', 'customer')`, account)
	exec(`INSERT INTO balances (account_id, asset) VALUES ($1, 'USD')`, account)
	for i, id := range ids {
		// Three rejections of one client order id, a millisecond apart;
		// the second held funds (as a retry settled twice would have).
		exec(`INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status,
				reject_reason, created_at, finished_at, time_in_force)
			VALUES ($1, $2, 'same', 'BTC-USD', 'buy', 'limit', 1, 100, 'rejected', 'insufficient_funds',
				now() + $3 * interval '1 ms', now(), 'gtc')`, id, account, i)
	}
	exec(`WITH t AS (INSERT INTO ledger_transactions (kind, order_id) VALUES ('hold', $1) RETURNING id)
		INSERT INTO ledger_entries (transaction_id, account_id, asset, amount, part)
		SELECT t.id, $2, 'USD', e.amount, e.part FROM t, (VALUES (-1, 'available'), (1, 'held')) AS e(amount, part)`, ids[1], account)

	if err := migrations.Up(database.URL); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{ids[1], "", ids[1]} {
		var duplicateOf *string
		var marked bool
		if err := db.QueryRow(ctx, `SELECT duplicate_of, duplicate_marked_by_migration FROM orders WHERE id = $1`, ids[i]).Scan(&duplicateOf, &marked); err != nil {
			t.Fatal(err)
		}
		if got := ""; duplicateOf != nil {
			got = *duplicateOf
			if got != want || !marked {
				t.Errorf("order %d: a duplicate of %q (marked %v), want of %q, marked", i, got, marked, want)
			}
		} else if want != "" || marked {
			t.Errorf("order %d holds the pair, want it a duplicate of %s", i, want)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price,
			status, reject_reason, created_at, finished_at, time_in_force)
		VALUES ('ORD_01J9Z7W2X3Y4Z5A6B7C8D9E0F4', $1, 'same', 'BTC-USD', 'buy', 'limit', 1, 100, 'rejected',
			'insufficient_funds', now(), now(), 'gtc')`, account); err == nil {
		t.Error("a second holder of the pair was inserted")
	}
}

// TestKeyScopesAndSigning: keys issued before migration 0008 keep what
// they could do (every scope, no signing); going back down revokes the
// keys that are narrower than that (a scope short, or signed), so a
// downgrade never lets a key do more than it was issued for.
func TestKeyScopesAndSigning(t *testing.T) {
	ctx := context.Background()
	database := testserver.Postgres(t)
	db := database.Pool(t)
	if err := migrations.UpTo(database.URL, 7); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`INSERT INTO accounts (id, name, kind) VALUES ('ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1', 'old', 'customer')`)
	exec(`INSERT INTO api_keys (id, account_id, key_hash) VALUES ('KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F0', 'ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1', sha256('old'))`)
	if err := migrations.Up(database.URL); err != nil {
		t.Fatal(err)
	}
	var scopes []string
	var sealed []byte
	if err := db.QueryRow(ctx, `SELECT scopes, signing_secret_sealed FROM api_keys WHERE id = 'KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F0'`).Scan(&scopes, &sealed); err != nil {
		t.Fatal(err)
	}
	if strings.Join(scopes, ",") != "read,trade" || sealed != nil {
		t.Errorf("a key from before: scopes %v, sealed secret %x; want read and trade, none", scopes, sealed)
	}
	// A writer from before scopes, during a rolling upgrade (its
	// api_key_issue.sql), still issues keys: with both scopes.
	exec(`INSERT INTO api_keys (id, account_id, key_hash)
		SELECT 'KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F6', id, sha256('older writer') FROM accounts WHERE id = 'ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1' AND kind = 'customer'`)
	if err := db.QueryRow(ctx, `SELECT scopes FROM api_keys WHERE id = 'KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F6'`).Scan(&scopes); err != nil || strings.Join(scopes, ",") != "read,trade" {
		t.Errorf("a key an older writer issued: scopes %v, %v; want read and trade", scopes, err)
	}
	keys := []struct {
		id, scopes string
		sealed     []byte
		revoked    bool
	}{
		{"KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F2", "{read,trade}", nil, false},
		{"KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F3", "{read}", nil, true},
		{"KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F4", "{trade,read}", make([]byte, 60), true},
	}
	for _, key := range keys {
		exec(`INSERT INTO api_keys (id, account_id, key_hash, scopes, signing_secret_sealed)
			VALUES ($1, 'ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1', sha256(convert_to($1::text, 'UTF8')), $2, $3)`, key.id, key.scopes, key.sealed)
	}
	for _, refused := range []string{`{}`, `{read,write}`} {
		if _, err := db.Exec(ctx, `INSERT INTO api_keys (id, account_id, key_hash, scopes)
			VALUES ('KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F5', 'ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1', sha256('refused'), $1)`, refused); err == nil {
			t.Errorf("a key with scopes %s was stored", refused)
		}
	}
	if err := migrations.UpTo(database.URL, 7); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		var revoked bool
		if err := db.QueryRow(ctx, `SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = $1`, key.id).Scan(&revoked); err != nil || revoked != key.revoked {
			t.Errorf("%s with scopes %s after going down: revoked %v, %v; want %v", key.id, key.scopes, revoked, err, key.revoked)
		}
	}
}

// TestOrderDeleteWaitsForTradesInFlight: a trade's key check locks nothing,
// so a delete of the order it names waits for the trade's transaction and
// then refuses, as the foreign key's lock made it.
func TestOrderDeleteWaitsForTradesInFlight(t *testing.T) {
	db := testserver.MigratedPostgres(t).Pool(t)
	ctx := context.Background()
	const venue, external = "ACC_0000000000000000000000000V", "ACC_0000000000000000000000000X"
	const maker, taker = "ORD_00000000000000000000000001", "ORD_00000000000000000000000002"
	for _, statement := range []string{
		`INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status, created_at)
			VALUES ('` + maker + `', '` + venue + `', 'a', 'BTC-USD', 'buy', 'limit', 1, 1, 'canceled', now()),
			('` + taker + `', '` + external + `', 'b', 'BTC-USD', 'sell', 'limit', 1, 1, 'canceled', now())`,
		`INSERT INTO ledger_transactions (id, kind, order_id) OVERRIDING SYSTEM VALUE VALUES (1000, 'trade', '` + taker + `')`,
	} {
		if _, err := db.Exec(ctx, statement); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
	inserter, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = inserter.Rollback(ctx) })
	if _, err := inserter.Exec(ctx, `INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id,
			taker_side, price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
			VALUES ('BTC-USD', '`+maker+`', '`+taker+`', '`+venue+`', '`+external+`', 'sell', 1, 1, 0, 0, 1000, 0, 0)`); err != nil {
		t.Fatal(err)
	}
	deleted := make(chan error, 1)
	go func() {
		_, err := db.Exec(ctx, `DELETE FROM orders WHERE id = '`+maker+`'`)
		deleted <- err
	}()
	// The delete must be waiting on the trade's transaction, not done.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM orders%')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		select {
		case err := <-deleted:
			t.Fatalf("the delete did not wait for the trade in flight: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the delete neither waited nor returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := inserter.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-deleted
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" || !strings.Contains(pgErr.Message, "has trades") {
		t.Fatalf("delete after the trade committed: got %v, want a refusal naming its trades", err)
	}
	var dangling int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM trades t
		WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id = t.maker_order_id)`).Scan(&dangling); err != nil {
		t.Fatal(err)
	}
	if dangling != 0 {
		t.Errorf("%d trade(s) name an order that does not exist", dangling)
	}
}
