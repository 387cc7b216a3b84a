package postgres_test

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/postgres"
)

//go:embed testdata/settle_generic_plans_rows.sql
var planRowsTemplate string

// genericPlansRows is the database TestSettlementGenericPlansProbeKeys
// plans on: 1,000 accounts, 20,000 orders, 9,999 trades, 1,000 outbox rows.
var genericPlansRows = planRows(0, 1000, 0, 20000, 0, 9999, 0, 1000)

// planRows are testdata/settle_generic_plans_rows.sql's rows for accounts
// (a0, a1], orders (o0, o1], trades and their ledger transactions (t0, t1]
// and relayed outbox rows (x0, x1].
func planRows(a0, a1, o0, o1, t0, t1, x0, x1 int) string {
	return strings.NewReplacer("A0", fmt.Sprint(a0+1), "A1", fmt.Sprint(a1), "O0", fmt.Sprint(o0+1), "O1", fmt.Sprint(o1),
		"T0", fmt.Sprint(t0+1), "T1", fmt.Sprint(t1), "X0", fmt.Sprint(x0+1), "X1", fmt.Sprint(x1)).Replace(planRowsTemplate)
}

// TestSettlementGenericPlansProbeKeys: an owner's write runs with generic
// plans (settle_owned_fence.sql sets plan_cache_mode for its transaction),
// made once per connection without the batch's arrays, and each of its
// statements must still read the rows it names by their keys, however many
// it names and whatever the statistics: no statement, nor a function or
// trigger it runs, scans a table of the write (every one has an index on
// the key it is read by). instruments and assets, three rows each, a page,
// are read by a scan where that is cheaper. Each case runs the whole write
// on a new connection, so every plan is made in the case's state:
// statistics taken while the tables were empty (a fresh database, whose
// plans judged balances by its size on disk and hashed it whole), then
// statistics of the filled tables; arrays of 1 and of 200 orders.
func TestSettlementGenericPlansProbeKeys(t *testing.T) {
	ctx := context.Background()
	forEachPlanCase(t, func(t *testing.T, conn *pgx.Conn, n int) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		runGenericPlanWrite(t, tx, n)
		var mode string
		if err := tx.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != "force_generic_plan" {
			t.Errorf("plan_cache_mode = %s in the write; want force_generic_plan", mode)
		}
		// This transaction's own counts, the nested statements' included.
		rows, err := tx.Query(ctx, "SELECT relname, seq_scan FROM pg_stat_xact_user_tables WHERE seq_scan > 0")
		if err != nil {
			t.Fatal(err)
		}
		scanned, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			Table string
			Scans int64
		}])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range scanned {
			if !smallTables[s.Table] {
				t.Errorf("the write scanned %s %d times", s.Table, s.Scans)
			}
		}
	})
}

// TestSettlementReadGenericPlansProbeKeys: an owner's read before a write
// (readOwned) runs its statements with generic plans, from
// settle_read_plans.sql to the end of its pipeline and no further, and
// each reads the rows it names by their keys whatever the statistics, as
// TestSettlementGenericPlansProbeKeys asks of the write.
func TestSettlementReadGenericPlansProbeKeys(t *testing.T) {
	ctx := context.Background()
	forEachPlanCase(t, func(t *testing.T, conn *pgx.Conn, n int) {
		var modes []string
		var scanned []string
		read := &pgx.Batch{}
		for _, s := range genericPlanRead(n) {
			read.Queue(postgres.SettlementWriteSQL[s.name], s.args...)
		}
		read.Queue("SELECT current_setting('plan_cache_mode')").QueryRow(func(row pgx.Row) error {
			var mode string
			modes = append(modes, mode)
			return row.Scan(&modes[len(modes)-1])
		})
		// The pipeline's own counts, its one implicit transaction's.
		read.Queue("SELECT relname || ' ' || seq_scan FROM pg_stat_xact_user_tables WHERE seq_scan > 0").Query(
			func(rows pgx.Rows) error {
				var err error
				scanned, err = pgx.CollectRows(rows, pgx.RowTo[string])
				return err
			})
		if err := conn.SendBatch(ctx, read).Close(); err != nil {
			t.Fatal(err)
		}
		var after string
		if err := conn.QueryRow(ctx, "SELECT current_setting('plan_cache_mode')").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if len(modes) != 1 || modes[0] != "force_generic_plan" || after != "auto" {
			t.Errorf("plan_cache_mode = %v in the read, %s after it; want force_generic_plan, then auto", modes, after)
		}
		for _, s := range scanned {
			if table, _, _ := strings.Cut(s, " "); !smallTables[table] {
				t.Errorf("the read scanned %s times", s)
			}
		}
	})
}

// smallTables are read by a scan where that is cheaper: three rows each,
// a page.
var smallTables = map[string]bool{"instruments": true, "assets": true}

// forEachPlanCase runs check, on a fresh connection (no statement
// prepared, no plan cached) to a database of genericPlansRows, for arrays
// of 1 and of 200 orders: with no statistics ever taken (a database the
// bench filled before autovacuum came, whose plans hashed balances whole
// for the takers' read), under statistics taken while the tables were
// empty, then under statistics of the rows.
func forEachPlanCase(t *testing.T, check func(t *testing.T, conn *pgx.Conn, n int)) {
	t.Helper()
	ctx := context.Background()
	exec := func(db *pgxpool.Pool, sql string) {
		t.Helper()
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	unanalyzed := migratedPool(t)
	exec(unanalyzed, genericPlansRows)
	for _, n := range []int{1, 200} {
		t.Run(fmt.Sprintf("no statistics, %d orders", n), func(t *testing.T) {
			check(t, freshConn(t, unanalyzed), n)
		})
	}
	db := migratedPool(t)
	exec(db, "ANALYZE")
	exec(db, genericPlansRows)
	for _, stats := range []struct {
		name    string
		analyze bool
	}{{name: "statistics of empty tables"}, {name: "statistics of the rows", analyze: true}} {
		if stats.analyze {
			exec(db, "ANALYZE")
		}
		for _, n := range []int{1, 200} {
			t.Run(fmt.Sprintf("%s, %d orders", stats.name, n), func(t *testing.T) {
				check(t, freshConn(t, db), n)
			})
		}
	}
}

// genericPlanRead is readOwned's read before genericPlanWrite(n), in the
// order it sends its statements.
func genericPlanRead(n int) []genericPlanStatement {
	var ids, accounts, clientIDs, symbols []string
	for g := 1; g <= n; g++ {
		ids = append(ids, fmt.Sprintf("ORD_%026d", 900000+g))
		accounts = append(accounts, fmt.Sprintf("ACC_%026d", g%1000+1))
		clientIDs, symbols = append(clientIDs, fmt.Sprintf("n%d", g)), append(symbols, "BTC-USD")
	}
	return []genericPlanStatement{
		{name: "settle_read_plans"},
		{name: "settle_existing", args: []any{ids}},
		{name: "settle_duplicates", args: []any{ids, accounts, clientIDs}},
		{name: "settle_takers", args: []any{accounts, symbols}},
	}
}

// freshConn is a connection of its own to db's database, closed when the
// test ends: no statement prepared, no plan cached.
func freshConn(t testing.TB, db *pgxpool.Pool) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(context.Background(), db.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

type genericPlanStatement struct {
	name string
	args []any
}

// genericPlanWrite is an owner's write of n new orders of
// testdata/settle_generic_plans_rows.sql's accounts on BTC-USD, each
// filling one resting order there against a ledger transaction of two
// entries, in the order settle_write.go sends its statements.
func genericPlanWrite(n int) []genericPlanStatement {
	account := func(i int) string { return fmt.Sprintf("ACC_%026d", i%1000+1) }
	repeat := func(s string) []string { return slices.Repeat([]string{s}, n) }
	var ids, accounts, makerAccounts, clientIDs, makers, entryAccounts []string
	var positions, entryTxns, tokens []int64
	var created []time.Time
	var entryAmounts []string
	nulls, falses := make([]*string, n), make([]bool, n)
	var lockAccounts, lockAssets []string
	for g := 1; g <= n; g++ {
		ids = append(ids, fmt.Sprintf("ORD_%026d", 900000+g))
		accounts, makerAccounts = append(accounts, account(g)), append(makerAccounts, account(g+1))
		clientIDs = append(clientIDs, fmt.Sprintf("n%d", g))
		makers = append(makers, fmt.Sprintf("ORD_%026d", 20*g))
		positions, tokens, created = append(positions, int64(g)), append(tokens, 1), append(created, time.Now())
		entryTxns = append(entryTxns, int64(g), int64(g))
		entryAccounts = append(entryAccounts, account(g), account(g+1))
		entryAmounts = append(entryAmounts, "1", "-1")
		for _, asset := range []string{"BTC", "USD"} {
			lockAccounts, lockAssets = append(lockAccounts, account(g)), append(lockAssets, asset)
		}
	}
	lockAccounts, lockAssets = postgres.SortedBalanceKeys(lockAccounts, lockAssets)
	k := len(lockAccounts)
	names := make([]string, k)
	for i := range names {
		names[i] = "balance:" + lockAccounts[i] + ":" + lockAssets[i]
	}
	zerosK, onesK, stepsK := make([]string, k), make([]string, k), make([]int64, k)
	for i := range zerosK {
		zerosK[i], onesK[i], stepsK[i] = "0", "1", 1
	}
	boundsK := make([]*string, k)
	ones, hundreds, zeros := repeat("1"), repeat("100"), repeat("0")
	symbols, sides, filled := repeat("BTC-USD"), repeat("buy"), repeat("filled")
	return []genericPlanStatement{
		{name: "settle_owned_fence", args: []any{"BTC-USD", int64(0)}},
		{name: "settle_open", args: []any{lockAccounts, lockAssets}},
		{name: "settle_insert_orders", args: []any{ids, accounts, clientIDs, symbols, sides, repeat("limit"), repeat("gtc"),
			falses, ones, hundreds, filled, nulls, nulls, ones, hundreds, zeros, zeros, falses, tokens, created, nulls, nulls}},
		{name: "settle_owned_makers", args: []any{makers, ones, zeros}},
		{name: "settle_update_makers", args: []any{makers, ones, hundreds, zeros, zeros, filled, nulls}},
		{name: "settle_write_ledger", args: []any{repeat("trade"), ids, entryTxns, entryAccounts, append(repeat("USD"), repeat("USD")...),
			entryAmounts, append(repeat("available"), repeat("available")...),
			positions, symbols, makers, ids, makerAccounts, accounts, sides, hundreds, ones, zeros, zeros, zeros, zeros,
			[]string{"BTC-USD"}, []string{"101"}}},
		{name: "settle_events", args: []any{append(append([]string{}, ids...), makers...), ids, ids}},
		{name: "settle_lock", args: []any{lockAccounts, lockAssets}},
		{name: "settle_guard", args: []any{lockAccounts, lockAssets, boundsK, boundsK}},
		{name: "settle_balances", args: []any{names, lockAccounts, lockAssets, zerosK, zerosK, stepsK, "balances:write", true}},
	}
}

// runGenericPlanWrite runs genericPlanWrite(n)'s statements in tx, the
// fence with the instrument's terms as they stand.
func runGenericPlanWrite(t testing.TB, tx pgx.Tx, n int) {
	t.Helper()
	ctx := context.Background()
	for _, s := range genericPlanWrite(n) {
		if s.name == "settle_owned_fence" {
			var terms string
			if err := tx.QueryRow(ctx, `SELECT settlement_instrument_terms(i) FROM instruments i WHERE symbol = 'BTC-USD'`).Scan(&terms); err != nil {
				t.Fatal(err)
			}
			s.args = append(s.args, terms)
		}
		rows, err := tx.Query(ctx, postgres.SettlementWriteSQL[s.name], s.args...)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
}
