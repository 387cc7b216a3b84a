package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// The audit's tests build their books row by row, bypassing settlement: a
// clean book is what settlement must leave behind (docs/market.md), and each
// corruption is one it must never leave.

// auditEntry is one ledger entry a planted transaction writes.
type auditEntry struct{ account, asset, part, amount string }

// plantTransaction writes a ledger transaction of kind for order (none when
// empty) with its entries, opening missing balance rows and moving each
// balance's part and version with every entry, as the ledger does.
func plantTransaction(t testing.TB, db *pgxpool.Pool, kind, order string, entries ...auditEntry) int64 {
	t.Helper()
	ctx := context.Background()
	var id int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO ledger_transactions (kind, order_id) VALUES ($1, NULLIF($2, '')) RETURNING id`,
			kind, order).Scan(&id); err != nil {
			return err
		}
		// One statement for the entries: the ledger checks that each
		// statement's entries balance (migration 0014).
		var accounts, assets, parts, amounts []string
		for _, e := range entries {
			if _, err := tx.Exec(ctx, `INSERT INTO balances (account_id, asset) VALUES ($1, $2) ON CONFLICT DO NOTHING`, e.account, e.asset); err != nil {
				return err
			}
			accounts, assets = append(accounts, e.account), append(assets, e.asset)
			parts, amounts = append(parts, e.part), append(amounts, e.amount)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (transaction_id, account_id, asset, part, amount)
				SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::numeric[])`,
			id, accounts, assets, parts, amounts); err != nil {
			return err
		}
		for _, e := range entries {
			if _, err := tx.Exec(ctx, `UPDATE balances SET
					available = available + CASE $3 WHEN 'available' THEN $4::numeric ELSE 0 END,
					held = held + CASE $3 WHEN 'held' THEN $4::numeric ELSE 0 END,
					version = version + 1
				WHERE account_id = $1 AND asset = $2`, e.account, e.asset, e.part, e.amount); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("plant a %s transaction of %q: %v", kind, order, err)
	}
	return id
}

// auditOrder is an orders row; empty strings are NULL (or the column's
// default for filled amounts and hold).
type auditOrder struct {
	id, account, symbol, side, typ, quantity, price, status, reason string
	filled, notional, fees, hold                                    string
	sequence                                                        int64 // 0: not resting
	// an order settled before the market
	fillPrice, fillQuantity, fillNotional string
	transaction                           int64
}

func plantOrder(t testing.TB, db *pgxpool.Pool, o auditOrder) {
	t.Helper()
	null := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	zero := func(s string) string {
		if s == "" {
			return "0"
		}
		return s
	}
	var sequence, transaction *int64
	if o.sequence != 0 {
		sequence = &o.sequence
	}
	if o.transaction != 0 {
		transaction = &o.transaction
	}
	tif := "gtc"
	if o.typ == "market" {
		tif = "ioc"
	}
	_, err := db.Exec(context.Background(), `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, time_in_force,
			quantity, price, status, reject_reason, filled_quantity, filled_notional, fees, hold, sequence,
			fill_price, fill_quantity, fill_notional, ledger_transaction_id, created_at)
		VALUES ($1, $2, 'c-' || right($1, 8), $3, $4, $5, $6, $7::numeric, $8::numeric, $9, $10, $11::numeric, $12::numeric,
			$13::numeric, $14::numeric, $15, $16::numeric, $17::numeric, $18::numeric, $19, now())`,
		o.id, o.account, o.symbol, o.side, o.typ, tif, o.quantity, null(o.price), o.status, null(o.reason),
		zero(o.filled), zero(o.notional), zero(o.fees), zero(o.hold), sequence,
		null(o.fillPrice), null(o.fillQuantity), null(o.fillNotional), transaction)
	if err != nil {
		t.Fatalf("plant order %s: %v", o.id, err)
	}
}

// auditTrade is a trades row.
type auditTrade struct {
	symbol, maker, taker, makerAccount, takerAccount, takerSide string
	price, quantity, makerFee, takerFee                         string
	transaction                                                 int64
}

func plantTrade(t testing.TB, db *pgxpool.Pool, tr auditTrade) int64 {
	t.Helper()
	var id int64
	err := db.QueryRow(context.Background(), `INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id,
			taker_account_id, taker_side, price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
		VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $9::numeric, $10::numeric, $11,
			(SELECT maker_fee_bps FROM instruments WHERE symbol = $1), (SELECT taker_fee_bps FROM instruments WHERE symbol = $1))
		RETURNING id`,
		tr.symbol, tr.maker, tr.taker, tr.makerAccount, tr.takerAccount, tr.takerSide, tr.price, tr.quantity,
		tr.makerFee, tr.takerFee, tr.transaction).Scan(&id)
	if err != nil {
		t.Fatalf("plant trade %s × %s: %v", tr.maker, tr.taker, err)
	}
	return id
}

// book is a clean BTC-USD book (maker fee 10 bps, taker 20 bps, the
// schema's defaults), as settlement leaves it:
//
//   - legacy: alice bought 0.01 at 50000 from the venue before the market
//     (one settlement transaction);
//   - maker: bob sells 0.1 at 50000, resting, 0.04 of it filled, holding
//     the other 0.06 BTC;
//   - taker: alice bought 0.04 with a limit of 50100, filled whole by the
//     maker at 50000 (hold, trade, release of what was left);
//   - resting: alice bids 0.02 at 49000, holding 981.96 USD (980 and the
//     taker fee on it);
//   - rejected: bob's buy of 1000 BTC, for want of funds.
type book struct {
	db                                      *pgxpool.Pool
	alice, bob                              string
	legacy, maker, taker, resting, rejected string
	settlement, deposit, trade              int64
}

func newBook(t testing.TB) *book {
	t.Helper()
	ctx := context.Background()
	db := migratedPool(t)
	b := &book{db: db}
	store, ledger := postgres.NewAccounts(db), postgres.NewLedger(db)
	for _, account := range []*string{&b.alice, &b.bob} {
		id, err := store.Create(ctx, "audit")
		if err != nil {
			t.Fatal(err)
		}
		*account = id
		for _, funds := range [][2]string{{"USD", "100000.00"}, {"BTC", "2"}} {
			if err := ledger.Deposit(ctx, id, funds[0], funds[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ledger.Deposit(ctx, orders.VenueAccount, "BTC", "10"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT min(id) FROM ledger_transactions WHERE kind = 'deposit'`).Scan(&b.deposit); err != nil {
		t.Fatal(err)
	}
	const venue = orders.VenueAccount
	b.legacy, b.maker, b.taker, b.resting, b.rejected =
		orders.NewOrderID(), orders.NewOrderID(), orders.NewOrderID(), orders.NewOrderID(), orders.NewOrderID()

	b.settlement = plantTransaction(t, db, "settlement", b.legacy,
		auditEntry{b.alice, "BTC", "available", "0.01"}, auditEntry{b.alice, "USD", "available", "-500"},
		auditEntry{venue, "BTC", "available", "-0.01"}, auditEntry{venue, "USD", "available", "500"})
	plantOrder(t, db, auditOrder{id: b.legacy, account: b.alice, symbol: "BTC-USD", side: "buy", typ: "limit",
		quantity: "0.01", price: "50000", status: "filled", filled: "0.01", notional: "500",
		fillPrice: "50000", fillQuantity: "0.01", fillNotional: "500", transaction: b.settlement})

	plantTransaction(t, db, "hold", b.maker,
		auditEntry{b.bob, "BTC", "available", "-0.1"}, auditEntry{b.bob, "BTC", "held", "0.1"})
	plantTransaction(t, db, "hold", b.taker,
		auditEntry{b.alice, "USD", "available", "-2008.008"}, auditEntry{b.alice, "USD", "held", "2008.008"})
	trade := plantTransaction(t, db, "trade", b.taker,
		auditEntry{b.alice, "USD", "held", "-2004"}, auditEntry{b.alice, "BTC", "available", "0.04"},
		auditEntry{b.bob, "BTC", "held", "-0.04"}, auditEntry{b.bob, "USD", "available", "1998"},
		auditEntry{venue, "USD", "available", "6"})
	plantTransaction(t, db, "release", b.taker,
		auditEntry{b.alice, "USD", "held", "-4.008"}, auditEntry{b.alice, "USD", "available", "4.008"})
	plantOrder(t, db, auditOrder{id: b.maker, account: b.bob, symbol: "BTC-USD", side: "sell", typ: "limit",
		quantity: "0.1", price: "50000", status: "partially_filled", filled: "0.04", notional: "2000", fees: "2",
		hold: "0.06", sequence: 1})
	plantOrder(t, db, auditOrder{id: b.taker, account: b.alice, symbol: "BTC-USD", side: "buy", typ: "limit",
		quantity: "0.04", price: "50100", status: "filled", filled: "0.04", notional: "2000", fees: "4"})
	b.trade = plantTrade(t, db, auditTrade{symbol: "BTC-USD", maker: b.maker, taker: b.taker, makerAccount: b.bob,
		takerAccount: b.alice, takerSide: "buy", price: "50000", quantity: "0.04", makerFee: "2", takerFee: "4", transaction: trade})

	plantTransaction(t, db, "hold", b.resting,
		auditEntry{b.alice, "USD", "available", "-981.96"}, auditEntry{b.alice, "USD", "held", "981.96"})
	plantOrder(t, db, auditOrder{id: b.resting, account: b.alice, symbol: "BTC-USD", side: "buy", typ: "limit",
		quantity: "0.02", price: "49000", status: "open", hold: "981.96", sequence: 2})

	plantOrder(t, db, auditOrder{id: b.rejected, account: b.bob, symbol: "BTC-USD", side: "buy", typ: "limit",
		quantity: "1000", price: "50000", status: "rejected", reason: "insufficient_funds"})
	return b
}

func (b *book) exec(t testing.TB, statements ...string) {
	t.Helper()
	for _, statement := range statements {
		if _, err := b.db.Exec(context.Background(), statement); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
}

// lastTransaction is the newest ledger transaction's id.
func (b *book) lastTransaction(t testing.TB) int64 {
	t.Helper()
	var id int64
	if err := b.db.QueryRow(context.Background(), `SELECT max(id) FROM ledger_transactions`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// dropCheck removes the CHECK constraint of table whose definition contains
// fragment: the corruption it guards against is what the audit must catch.
func dropCheck(t testing.TB, db *pgxpool.Pool, table, fragment string) {
	t.Helper()
	var name string
	err := db.QueryRow(context.Background(), `SELECT conname FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%' || $2 || '%'`,
		table, fragment).Scan(&name)
	if err != nil {
		t.Fatalf("find the check of %s containing %q: %v", table, fragment, err)
	}
	if _, err := db.Exec(context.Background(), fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %q`, table, name)); err != nil {
		t.Fatal(err)
	}
}

type found struct{ check, subject string }

func auditFinds(t testing.TB, db *pgxpool.Pool) []found {
	t.Helper()
	violations, err := postgres.Audit(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	var got []found
	for _, v := range violations {
		got = append(got, found{v.Check, v.Subject})
		if v.Detail == "" {
			t.Errorf("%s has no detail", v)
		}
		t.Log(v)
	}
	return got
}

func TestAuditPassesACleanBook(t *testing.T) {
	b := newBook(t)
	if got := auditFinds(t, b.db); len(got) != 0 {
		t.Fatalf("a clean book: %v", got)
	}
	report, err := postgres.RunAudit(context.Background(), b.db)
	if err != nil {
		t.Fatal(err)
	}
	// balances: alice and bob USD, BTC; the venue BTC, USD; the external
	// world USD, BTC. Transactions: 5 deposits, a settlement, 3 holds, a
	// trade, a release.
	if report.Balances != 8 || report.Transactions != 11 || report.Orders != 5 {
		t.Errorf("audit counted %d balances, %d transactions, %d orders; want 8, 11, 5",
			report.Balances, report.Transactions, report.Orders)
	}
}

func TestAuditReportsCorruption(t *testing.T) {
	const venue = orders.VenueAccount
	// The ledger is append-only and a trigger keeps every transaction
	// balanced: corrupting it takes switching those off first.
	const unguarded = `ALTER TABLE ledger_entries DISABLE TRIGGER USER`
	tests := []struct {
		name    string
		corrupt func(t *testing.T, b *book) []found
	}{
		{"available changed outside the ledger", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE balances SET available = available + 1 WHERE account_id = '%s' AND asset = 'USD'`, b.alice))
			return []found{
				{postgres.CheckBalanceLedger, orders.BalanceName(b.alice, "USD")},
				{postgres.CheckConservation, "USD"},
			}
		}},
		{"held changed outside the ledger", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE balances SET held = held + 0.01 WHERE account_id = '%s' AND asset = 'BTC'`, b.bob))
			return []found{
				{postgres.CheckBalanceLedger, orders.BalanceName(b.bob, "BTC")},
				{postgres.CheckConservation, "BTC"},
				{postgres.CheckHeldOrders, orders.BalanceName(b.bob, "BTC")},
			}
		}},
		{"held moved to available without an order's hold changing", func(t *testing.T, b *book) []found {
			// The total stands: a hold or release is no ledger entry, and
			// the resting orders' holds are what proves held.
			b.exec(t, fmt.Sprintf(`UPDATE balances SET held = held - 0.01, available = available + 0.01
				WHERE account_id = '%s' AND asset = 'BTC'`, b.bob))
			return []found{{postgres.CheckHeldOrders, orders.BalanceName(b.bob, "BTC")}}
		}},
		{"version below its entries", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE balances SET version = 0 WHERE account_id = '%s' AND asset = 'BTC'`, b.alice))
			return []found{{postgres.CheckBalanceVersion, orders.BalanceName(b.alice, "BTC")}}
		}},
		{"value moved between balances outside the ledger, one below zero", func(t *testing.T, b *book) []found {
			dropCheck(t, b.db, "balances", "available >=")
			b.exec(t, fmt.Sprintf(`UPDATE balances SET available = available + CASE account_id WHEN '%s' THEN -200000 ELSE 200000 END
				WHERE asset = 'USD' AND account_id IN ('%s', '%s')`, b.alice, b.alice, b.bob))
			return []found{
				{postgres.CheckBalanceLedger, orders.BalanceName(b.alice, "USD")},
				{postgres.CheckBalanceLedger, orders.BalanceName(b.bob, "USD")},
				{postgres.CheckNegative, orders.BalanceName(b.alice, "USD")},
			}
		}},
		{"resting order's hold lowered", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET hold = hold - 0.01 WHERE id = '%s'`, b.maker))
			return []found{{postgres.CheckHeldOrders, orders.BalanceName(b.bob, "BTC")}}
		}},
		{"resting order holding an asset its account has no balance of", func(t *testing.T, b *book) []found {
			plantOrder(t, b.db, auditOrder{id: orders.NewOrderID(), account: b.bob, symbol: "ETH-USD", side: "sell", typ: "limit",
				quantity: "1", price: "3000", status: "open", hold: "1", sequence: 3})
			return []found{{postgres.CheckHeldOrders, orders.BalanceName(b.bob, "ETH")}}
		}},
		{"hold of an order that has no row", func(t *testing.T, b *book) []found {
			txn := plantTransaction(t, b.db, "hold", orders.NewOrderID(),
				auditEntry{b.alice, "USD", "available", "-1"}, auditEntry{b.alice, "USD", "held", "1"})
			return []found{
				{postgres.CheckHeldOrders, orders.BalanceName(b.alice, "USD")},
				{postgres.CheckOrderTransaction, fmt.Sprintf("txn/%d", txn)},
			}
		}},
		{"trade transaction without a trade", func(t *testing.T, b *book) []found {
			txn := plantTransaction(t, b.db, "trade", b.taker,
				auditEntry{b.alice, "USD", "available", "-1"}, auditEntry{venue, "USD", "available", "1"})
			return []found{{postgres.CheckOrderTransaction, fmt.Sprintf("txn/%d", txn)}}
		}},
		{"book crossed at rest", func(t *testing.T, b *book) []found {
			// an ask below the resting bid, holding nothing so that only the
			// book is wrong
			plantOrder(t, b.db, auditOrder{id: orders.NewOrderID(), account: b.bob, symbol: "BTC-USD", side: "sell", typ: "limit",
				quantity: "0.01", price: "48000", status: "open", sequence: 3})
			return []found{{postgres.CheckBookCrossed, "BTC-USD"}}
		}},
		{"trade not at the maker's price", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET price = 49990 WHERE id = '%s'`, b.maker))
			return []found{{postgres.CheckTradePrice, fmt.Sprintf("trade/%d", b.trade)}}
		}},
		{"trade above the buy's limit", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET price = 49900 WHERE id = '%s'`, b.taker))
			return []found{{postgres.CheckTradeLimits, fmt.Sprintf("trade/%d", b.trade)}}
		}},
		{"market buy traded above its protection price", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET type = 'market', time_in_force = 'ioc', price = NULL,
				protection_price = 49999.99 WHERE id = '%s'`, b.taker))
			return []found{{postgres.CheckMarketProtection, fmt.Sprintf("trade/%d", b.trade)}}
		}},
		{"market buy traded at its protection price", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET type = 'market', time_in_force = 'ioc', price = NULL,
				protection_price = 50000 WHERE id = '%s'`, b.taker))
			return nil
		}},
		{"market sell maker traded below its protection price", func(t *testing.T, b *book) []found {
			// No market order rests; the check holds either side of a
			// trade to it all the same.
			b.exec(t, fmt.Sprintf(`UPDATE orders SET type = 'market', time_in_force = 'ioc', price = NULL,
				protection_price = 50000.01 WHERE id = '%s'`, b.maker))
			return []found{
				{postgres.CheckTradePrice, fmt.Sprintf("trade/%d", b.trade)},
				{postgres.CheckMarketProtection, fmt.Sprintf("trade/%d", b.trade)},
			}
		}},
		{"trade whose taker is on the maker's side", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET side = 'sell', price = 50000 WHERE id = '%s'`, b.taker))
			return []found{{postgres.CheckTradeLimits, fmt.Sprintf("trade/%d", b.trade)}}
		}},
		{"trade between two orders of one account", func(t *testing.T, b *book) []found {
			dropCheck(t, b.db, "trades", "maker_account_id <> taker_account_id")
			// alice sells 0.01 at 49000 into her own resting bid, every row
			// as settlement would write it
			seller := orders.NewOrderID()
			plantTransaction(t, b.db, "hold", seller,
				auditEntry{b.alice, "BTC", "available", "-0.01"}, auditEntry{b.alice, "BTC", "held", "0.01"})
			txn := plantTransaction(t, b.db, "trade", seller,
				auditEntry{b.alice, "BTC", "held", "-0.01"}, auditEntry{b.alice, "USD", "available", "489.02"},
				auditEntry{b.alice, "USD", "held", "-490.49"}, auditEntry{b.alice, "BTC", "available", "0.01"},
				auditEntry{venue, "USD", "available", "1.47"})
			b.exec(t, fmt.Sprintf(`UPDATE orders SET status = 'partially_filled', filled_quantity = 0.01, filled_notional = 490,
				fees = 0.49, hold = 491.47 WHERE id = '%s'`, b.resting))
			plantOrder(t, b.db, auditOrder{id: seller, account: b.alice, symbol: "BTC-USD", side: "sell", typ: "limit",
				quantity: "0.01", price: "49000", status: "filled", filled: "0.01", notional: "490", fees: "0.98"})
			trade := plantTrade(t, b.db, auditTrade{symbol: "BTC-USD", maker: b.resting, taker: seller, makerAccount: b.alice,
				takerAccount: b.alice, takerSide: "sell", price: "49000", quantity: "0.01", makerFee: "0.49", takerFee: "0.98", transaction: txn})
			return []found{{postgres.CheckTradeAccounts, fmt.Sprintf("trade/%d", trade)}}
		}},
		{"trade naming an account its order does not belong to", func(t *testing.T, b *book) []found {
			outsider, err := postgres.NewAccounts(b.db).Create(context.Background(), "outsider")
			if err != nil {
				t.Fatal(err)
			}
			b.exec(t, fmt.Sprintf(`UPDATE trades SET maker_account_id = '%s' WHERE id = %d`, outsider, b.trade))
			return []found{
				{postgres.CheckTradeAccounts, fmt.Sprintf("trade/%d", b.trade)},
				{postgres.CheckTradeEntries, fmt.Sprintf("trade/%d", b.trade)},
			}
		}},
		{"trade entries rewritten, balances to match", func(t *testing.T, b *book) []found {
			b.exec(t, unguarded,
				fmt.Sprintf(`UPDATE ledger_entries SET amount = amount + CASE account_id WHEN '%s' THEN 1 ELSE -1 END
					WHERE transaction_id = (SELECT ledger_transaction_id FROM trades WHERE id = %d)
					AND asset = 'USD' AND account_id IN ('%s', '%s')`, venue, b.trade, venue, b.bob),
				fmt.Sprintf(`UPDATE balances SET available = available + CASE account_id WHEN '%s' THEN 1 ELSE -1 END
					WHERE asset = 'USD' AND account_id IN ('%s', '%s')`, venue, venue, b.bob))
			return []found{{postgres.CheckTradeEntries, fmt.Sprintf("trade/%d", b.trade)}}
		}},
		{"maker fee rewritten, its order's fees to match", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE trades SET maker_fee = 1 WHERE id = %d`, b.trade),
				fmt.Sprintf(`UPDATE orders SET fees = 1 WHERE id = '%s'`, b.maker))
			return []found{
				{postgres.CheckTradeFees, fmt.Sprintf("trade/%d", b.trade)},
				{postgres.CheckTradeEntries, fmt.Sprintf("trade/%d", b.trade)},
			}
		}},
		{"the rate a trade records rewritten", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE trades SET maker_fee_bps = 5 WHERE id = %d`, b.trade))
			return []found{{postgres.CheckTradeFees, fmt.Sprintf("trade/%d", b.trade)}}
		}},
		{"filled more than its quantity", func(t *testing.T, b *book) []found {
			dropCheck(t, b.db, "orders", "filled_quantity <= quantity")
			b.exec(t, fmt.Sprintf(`UPDATE orders SET filled_quantity = 0.2 WHERE id = '%s'`, b.maker))
			return []found{{postgres.CheckOrderFill, b.maker}}
		}},
		{"filled notional not its trades'", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET filled_notional = filled_notional + 1 WHERE id = '%s'`, b.taker))
			return []found{{postgres.CheckOrderFill, b.taker}}
		}},
		{"partially filled with nothing filled", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET status = 'partially_filled' WHERE id = '%s'`, b.resting))
			return []found{{postgres.CheckOrderFill, b.resting}}
		}},
		{"filled with no trade", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET status = 'filled', reject_reason = NULL, filled_quantity = quantity,
				filled_notional = quantity * price WHERE id = '%s'`, b.rejected))
			return []found{{postgres.CheckOrderFill, b.rejected}}
		}},
		{"settled order deleted", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`DELETE FROM orders WHERE id = '%s'`, b.legacy))
			return []found{{postgres.CheckOrphanSettlement, fmt.Sprintf("txn/%d", b.settlement)}}
		}},
		{"settled order turned rejected", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET status = 'rejected', reject_reason = 'insufficient_funds', fill_price = NULL,
				fill_quantity = NULL, fill_notional = NULL, ledger_transaction_id = NULL, filled_quantity = 0, filled_notional = 0
				WHERE id = '%s'`, b.legacy))
			return []found{
				{postgres.CheckUnsettledOrder, b.legacy},
				{postgres.CheckOrphanSettlement, fmt.Sprintf("txn/%d", b.settlement)},
			}
		}},
		{"order settled by a deposit", func(t *testing.T, b *book) []found {
			order := orders.NewOrderID()
			plantOrder(t, b.db, auditOrder{id: order, account: b.alice, symbol: "ETH-USD", side: "sell", typ: "limit",
				quantity: "1", price: "3000", status: "filled", filled: "1", notional: "3000",
				fillPrice: "3000", fillQuantity: "1", fillNotional: "3000", transaction: b.deposit})
			return []found{{postgres.CheckSettledOrder, order}}
		}},
		{"order settled without any transaction", func(t *testing.T, b *book) []found {
			dropCheck(t, b.db, "orders", "ledger_transaction_id IS NOT NULL")
			order := orders.NewOrderID()
			plantOrder(t, b.db, auditOrder{id: order, account: b.alice, symbol: "ETH-USD", side: "sell", typ: "limit",
				quantity: "1", price: "3000", status: "filled", filled: "1", notional: "3000",
				fillPrice: "3000", fillQuantity: "1", fillNotional: "3000"})
			return []found{{postgres.CheckSettledOrder, order}, {postgres.CheckOrderFill, order}}
		}},
		{"rejected order with a settlement", func(t *testing.T, b *book) []found {
			txn := plantTransaction(t, b.db, "settlement", b.rejected,
				auditEntry{b.bob, "USD", "available", "-1"}, auditEntry{venue, "USD", "available", "1"})
			return []found{
				{postgres.CheckUnsettledOrder, b.rejected},
				{postgres.CheckOrphanSettlement, fmt.Sprintf("txn/%d", txn)},
			}
		}},
		{"unbalanced transaction of one entry", func(t *testing.T, b *book) []found {
			b.exec(t, unguarded)
			txn := plantTransaction(t, b.db, "deposit", "", auditEntry{b.alice, "USD", "available", "5"})
			return []found{
				{postgres.CheckConservation, "USD"},
				{postgres.CheckTransactionBalanced, fmt.Sprintf("txn/%d", txn)},
				{postgres.CheckTransactionEntries, fmt.Sprintf("txn/%d", txn)},
			}
		}},
		{"transaction without entries", func(t *testing.T, b *book) []found {
			b.exec(t, `INSERT INTO ledger_transactions (kind) VALUES ('withdrawal')`)
			return []found{{postgres.CheckTransactionEntries, fmt.Sprintf("txn/%d", b.lastTransaction(t))}}
		}},
		{"settlement entries rewritten, balances to match", func(t *testing.T, b *book) []found {
			b.exec(t, unguarded,
				fmt.Sprintf(`UPDATE ledger_entries SET amount = amount + CASE account_id WHEN '%s' THEN 1 ELSE -1 END
					WHERE transaction_id = %d AND asset = 'USD'`, b.alice, b.settlement),
				fmt.Sprintf(`UPDATE balances SET available = available + CASE account_id WHEN '%s' THEN 1 ELSE -1 END
					WHERE asset = 'USD' AND account_id IN ('%s', '%s')`, b.alice, b.alice, venue))
			return []found{{postgres.CheckSettlementEntries, b.legacy}}
		}},
		{"a retry settled twice", func(t *testing.T, b *book) []found {
			// Alice's resting order, made a duplicate of her taker after
			// the fact: a duplicate that holds funds.
			b.exec(t, fmt.Sprintf(`UPDATE orders SET client_order_id = (SELECT client_order_id FROM orders WHERE id = '%s'),
				duplicate_of = '%s' WHERE id = '%s'`, b.taker, b.taker, b.resting))
			return []found{{postgres.CheckClientOrderOnce, b.resting}}
		}},
		{"a retry settled twice before the guard", func(t *testing.T, b *book) []found {
			// As migration 0007 marks rows of a pair from before it: history.
			b.exec(t, fmt.Sprintf(`UPDATE orders SET client_order_id = (SELECT client_order_id FROM orders WHERE id = '%s'),
				duplicate_of = '%s', duplicate_marked_by_migration = true WHERE id = '%s'`, b.taker, b.taker, b.resting))
			return nil
		}},
		{"fill notional rewritten", func(t *testing.T, b *book) []found {
			b.exec(t, fmt.Sprintf(`UPDATE orders SET fill_notional = fill_notional + 0.01 WHERE id = '%s'`, b.legacy))
			return []found{
				{postgres.CheckSettledOrder, b.legacy},
				{postgres.CheckSettlementEntries, b.legacy},
				{postgres.CheckOrderFill, b.legacy},
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBook(t)
			want := tt.corrupt(t, b)
			got := auditFinds(t, b.db)
			order := func(a, b found) int { return strings.Compare(a.check+" "+a.subject, b.check+" "+b.subject) }
			slices.SortFunc(got, order)
			slices.SortFunc(want, order)
			if !slices.Equal(got, want) {
				t.Errorf("violations\n got %v\nwant %v", got, want)
			}
		})
	}
}
