package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// TestAuditPassesACleanLedger settles many random orders from several
// accounts at once, some unaffordable and some on an instrument halted
// midway, with deposits and withdrawals running beside them. Two accounts
// hold only USD, so their first orders open balances concurrently.
func TestAuditPassesACleanLedger(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	accounts := []string{m.alice, m.bob}
	for range 2 {
		accounts = append(accounts, m.newCustomer(t), m.newCustomerWith(t, map[string]string{"USD": "50000.00"}))
	}
	random := rand.New(rand.NewPCG(4, 2))
	type pick struct{ symbol, quantity, price string }
	picks := []pick{
		{"BTC-USD", "0.01", "50000.00"}, {"BTC-USD", "0.5", ""}, {"BTC-USD", "3", "49999.99"},
		{"ETH-USD", "0.333", "3100.05"}, {"ETH-USD", "7", ""}, {"ETH-USD", "25", "2999.95"},
		{"ETH-BTC", "0.005", "0.06001"}, {"ETH-BTC", "1.5", ""}, {"ETH-BTC", "40", "0.05"},
	}
	const total = 300
	placed := make([]orders.Order, total)
	for i := range placed {
		p := picks[random.IntN(len(picks))]
		side := orders.Buy
		if random.IntN(2) == 0 {
			side = orders.Sell
		}
		placed[i] = newOrder(accounts[random.IntN(len(accounts))], p.symbol, side, p.quantity, p.price)
	}

	work := make(chan orders.Order)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for order := range work {
				if err := settlement.Settle(m.settler)(ctx, claimOf(t, order, 1)); err != nil {
					t.Errorf("settle %s: %v", order.ID, err)
				}
			}
		})
	}
	wg.Go(func() {
		ledger := postgres.NewLedger(m.db)
		for i := range 40 {
			account := accounts[i%len(accounts)]
			if err := ledger.Deposit(ctx, account, "USD", "100.00"); err != nil {
				t.Errorf("deposit: %v", err)
			}
			if err := ledger.Withdraw(ctx, account, "BTC", "0.001"); err != nil && !strings.Contains(err.Error(), "insufficient") {
				t.Errorf("withdraw: %v", err)
			}
		}
	})
	for i, order := range placed {
		if i == total/2 {
			if _, err := m.db.Exec(ctx, `UPDATE instruments SET status = 'halted' WHERE symbol = 'ETH-BTC'`); err != nil {
				t.Fatal(err)
			}
		}
		work <- order
	}
	close(work)
	wg.Wait()

	report, err := postgres.RunAudit(ctx, m.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range report.Violations {
		t.Errorf("audit: %s", v)
	}
	var settled, rejected, transactions int64
	if err := m.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'rejected'), count(*) FILTER (WHERE status = 'rejected'),
		(SELECT count(*) FROM ledger_transactions) FROM orders`).Scan(&settled, &rejected, &transactions); err != nil {
		t.Fatal(err)
	}
	if settled+rejected != total || settled == 0 || rejected == 0 {
		t.Errorf("%d settled, %d rejected of %d; want every order final, some of each", settled, rejected, total)
	}
	// by now every account holds all three assets, the external account
	// too; the venue's fee account holds the quote assets, USD and BTC
	if report.Orders != total || report.Transactions != transactions || report.Balances != int64(3*(len(accounts)+1)+2) {
		t.Errorf("audit counted %d orders, %d transactions, %d balances; want %d, %d, %d",
			report.Orders, report.Transactions, report.Balances, total, transactions, 3*(len(accounts)+1)+2)
	}
}

// corruptible is a market with one order settled before the market (against
// the venue, as 0005 left such orders), one rejected order and a deposit,
// which a test then corrupts behind the ledger's back.
type corruptible struct {
	*market
	account           string
	settled, rejected string
	settlement        int64
	deposit           int64
}

func newCorruptible(t testing.TB) *corruptible {
	t.Helper()
	c := &corruptible{market: newMarket(t)}
	c.account = c.alice
	settled := newOrder(c.account, "BTC-USD", orders.Buy, "0.01", "50000.00")
	rejected := newOrder(c.account, "BTC-USD", orders.Buy, "1000", "50000.00")
	c.settlement = settleAgainstTheVenue(t, c.db, settled)
	c.settle(t, rejected, 1)
	c.settled, c.rejected = settled.ID, rejected.ID
	if err := c.db.QueryRow(context.Background(), `SELECT min(id) FROM ledger_transactions WHERE kind = 'deposit'`).Scan(&c.deposit); err != nil {
		t.Fatal(err)
	}
	mustAudit(t, c.db)
	return c
}

// settleAgainstTheVenue writes a limit buy as settlement did before the
// market: one settlement transaction against the venue at the order's own
// price, the order filled whole. It returns the transaction's id.
func settleAgainstTheVenue(t testing.TB, db *pgxpool.Pool, order orders.Order) int64 {
	t.Helper()
	ctx := context.Background()
	for asset, amount := range map[string]string{"BTC": "10", "ETH": "100", "USD": "1000000"} {
		deposit(t, db, orders.VenueAccount, asset, amount)
	}
	notional := order.Price.String() + " * " + order.Quantity.String()
	var txn int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO ledger_transactions (kind, order_id) VALUES ('settlement', $1) RETURNING id`,
			order.ID).Scan(&txn); err != nil {
			return err
		}
		moves := fmt.Sprintf(`(VALUES ('%s', 'USD', -(%s)), ('%s', 'BTC', %s), ('%s', 'USD', %s), ('%s', 'BTC', -%s))
			AS m(account_id, asset, amount)`, order.Account, notional, order.Account, order.Quantity,
			orders.VenueAccount, notional, orders.VenueAccount, order.Quantity)
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			SELECT $1, account_id, asset, amount FROM `+moves, txn); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE balances b SET available = b.available + m.amount, version = b.version + 1
			FROM `+moves+` WHERE b.account_id = m.account_id AND b.asset = m.asset`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price,
				status, fill_price, fill_quantity, fill_notional, filled_quantity, filled_notional, ledger_transaction_id,
				settled_by_token, created_at)
			VALUES ($1, $2, $3, $4, 'buy', 'limit', $5::numeric, $6::numeric, 'filled', $6::numeric, $5::numeric,
				$5::numeric * $6::numeric, $5::numeric, $5::numeric * $6::numeric, $7, 1, $8)`,
			order.ID, order.Account, order.ClientOrderID, order.Symbol, order.Quantity.String(), order.Price.String(),
			txn, order.CreatedAt)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return txn
}

func (c *corruptible) exec(t testing.TB, statements ...string) {
	t.Helper()
	for _, statement := range statements {
		if _, err := c.db.Exec(context.Background(), statement); err != nil {
			t.Fatalf("%s: %v", statement, err)
		}
	}
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

func TestAuditReportsCorruption(t *testing.T) {
	const venue = orders.VenueAccount
	// The ledger is append-only and a trigger keeps every transaction
	// balanced: corrupting it takes switching those off first.
	const unguarded = `ALTER TABLE ledger_entries DISABLE TRIGGER USER`
	tests := []struct {
		name    string
		corrupt func(t *testing.T, c *corruptible) []found
	}{
		{"balance changed outside the ledger", func(t *testing.T, c *corruptible) []found {
			c.exec(t, fmt.Sprintf(`UPDATE balances SET available = available + 1 WHERE account_id = '%s' AND asset = 'USD'`, c.account))
			return []found{
				{postgres.CheckBalanceLedger, orders.BalanceName(c.account, "USD")},
				{postgres.CheckConservation, "USD"},
			}
		}},
		{"version bumped without an entry", func(t *testing.T, c *corruptible) []found {
			c.exec(t, fmt.Sprintf(`UPDATE balances SET version = version + 1 WHERE account_id = '%s' AND asset = 'BTC'`, c.account))
			return []found{{postgres.CheckBalanceVersion, orders.BalanceName(c.account, "BTC")}}
		}},
		{"value moved between balances outside the ledger, one below zero", func(t *testing.T, c *corruptible) []found {
			dropCheck(t, c.db, "balances", "available >=")
			c.exec(t, fmt.Sprintf(`UPDATE balances SET available = available + CASE account_id WHEN '%s' THEN -21 ELSE 21 END
				WHERE asset = 'ETH' AND account_id IN ('%s', '%s')`, c.account, c.account, venue))
			return []found{
				{postgres.CheckBalanceLedger, orders.BalanceName(venue, "ETH")},
				{postgres.CheckBalanceLedger, orders.BalanceName(c.account, "ETH")},
				{postgres.CheckNegative, orders.BalanceName(c.account, "ETH")},
			}
		}},
		{"settled order deleted", func(t *testing.T, c *corruptible) []found {
			c.exec(t, fmt.Sprintf(`DELETE FROM orders WHERE id = '%s'`, c.settled))
			return []found{{postgres.CheckOrphanSettlement, fmt.Sprintf("txn/%d", c.settlement)}}
		}},
		{"settled order turned rejected", func(t *testing.T, c *corruptible) []found {
			c.exec(t, fmt.Sprintf(`UPDATE orders SET status = 'rejected', reject_reason = 'insufficient_funds', fill_price = NULL,
				fill_quantity = NULL, fill_notional = NULL, ledger_transaction_id = NULL WHERE id = '%s'`, c.settled))
			return []found{
				{postgres.CheckUnsettledOrder, c.settled},
				{postgres.CheckOrphanSettlement, fmt.Sprintf("txn/%d", c.settlement)},
			}
		}},
		{"order settled by a deposit", func(t *testing.T, c *corruptible) []found {
			order := newOrder(c.account, "ETH-USD", orders.Sell, "1", "3000")
			c.exec(t, fmt.Sprintf(`INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status,
					fill_price, fill_quantity, fill_notional, ledger_transaction_id, created_at)
				VALUES ('%s', '%s', 'forged', 'ETH-USD', 'sell', 'limit', 1, 3000, 'filled', 3000, 1, 3000, %d, now())`,
				order.ID, c.account, c.deposit))
			return []found{{postgres.CheckSettledOrder, order.ID}}
		}},
		{"order settled without any transaction", func(t *testing.T, c *corruptible) []found {
			dropCheck(t, c.db, "orders", "ledger_transaction_id IS NOT NULL")
			order := newOrder(c.account, "ETH-USD", orders.Sell, "1", "3000")
			c.exec(t, fmt.Sprintf(`INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price, status,
					fill_price, fill_quantity, fill_notional, created_at)
				VALUES ('%s', '%s', 'forged', 'ETH-USD', 'sell', 'limit', 1, 3000, 'filled', 3000, 1, 3000, now())`,
				order.ID, c.account))
			return []found{{postgres.CheckSettledOrder, order.ID}}
		}},
		{"rejected order with a settlement", func(t *testing.T, c *corruptible) []found {
			c.exec(t, unguarded, fmt.Sprintf(`WITH txn AS (
					INSERT INTO ledger_transactions (kind, order_id) VALUES ('settlement', '%s') RETURNING id)
				INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
				SELECT id, a, 'USD', x FROM txn, (VALUES ('%s', -1), ('%s', 1)) AS m(a, x)`, c.rejected, c.account, venue),
				fmt.Sprintf(`UPDATE balances SET available = available + CASE account_id WHEN '%s' THEN -1 ELSE 1 END,
					version = version + 1 WHERE asset = 'USD' AND account_id IN ('%s', '%s')`, c.account, c.account, venue))
			var txn int64
			if err := c.db.QueryRow(context.Background(), `SELECT id FROM ledger_transactions WHERE order_id = $1`, c.rejected).Scan(&txn); err != nil {
				t.Fatal(err)
			}
			return []found{
				{postgres.CheckUnsettledOrder, c.rejected},
				{postgres.CheckOrphanSettlement, fmt.Sprintf("txn/%d", txn)},
			}
		}},
		{"unbalanced transaction of one entry", func(t *testing.T, c *corruptible) []found {
			c.exec(t, unguarded, fmt.Sprintf(`WITH txn AS (INSERT INTO ledger_transactions (kind) VALUES ('deposit') RETURNING id)
				INSERT INTO ledger_entries (transaction_id, account_id, asset, amount) SELECT id, '%s', 'USD', 5 FROM txn`, c.account),
				fmt.Sprintf(`UPDATE balances SET available = available + 5, version = version + 1
					WHERE account_id = '%s' AND asset = 'USD'`, c.account))
			txn := c.deposit
			if err := c.db.QueryRow(context.Background(), `SELECT max(id) FROM ledger_transactions`).Scan(&txn); err != nil {
				t.Fatal(err)
			}
			return []found{
				{postgres.CheckConservation, "USD"},
				{postgres.CheckTransactionBalanced, fmt.Sprintf("txn/%d", txn)},
				{postgres.CheckTransactionEntries, fmt.Sprintf("txn/%d", txn)},
			}
		}},
		{"transaction without entries", func(t *testing.T, c *corruptible) []found {
			c.exec(t, `INSERT INTO ledger_transactions (kind) VALUES ('withdrawal')`)
			var txn int64
			if err := c.db.QueryRow(context.Background(), `SELECT max(id) FROM ledger_transactions`).Scan(&txn); err != nil {
				t.Fatal(err)
			}
			return []found{{postgres.CheckTransactionEntries, fmt.Sprintf("txn/%d", txn)}}
		}},
		{"settlement entries rewritten, balances to match", func(t *testing.T, c *corruptible) []found {
			c.exec(t, unguarded,
				fmt.Sprintf(`UPDATE ledger_entries SET amount = amount + CASE account_id WHEN '%s' THEN 1 ELSE -1 END
					WHERE transaction_id = %d AND asset = 'USD'`, c.account, c.settlement),
				fmt.Sprintf(`UPDATE balances SET available = available + CASE account_id WHEN '%s' THEN 1 ELSE -1 END
					WHERE asset = 'USD' AND account_id IN ('%s', '%s')`, c.account, c.account, venue))
			return []found{{postgres.CheckSettlementEntries, c.settled}}
		}},
		{"fill notional rewritten", func(t *testing.T, c *corruptible) []found {
			c.exec(t, fmt.Sprintf(`UPDATE orders SET fill_notional = fill_notional + 0.01 WHERE id = '%s'`, c.settled))
			return []found{{postgres.CheckSettledOrder, c.settled}, {postgres.CheckSettlementEntries, c.settled}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCorruptible(t)
			want := tt.corrupt(t, c)
			violations, err := postgres.Audit(context.Background(), c.db)
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
			order := func(a, b found) int { return strings.Compare(a.check+" "+a.subject, b.check+" "+b.subject) }
			slices.SortFunc(got, order)
			slices.SortFunc(want, order)
			if !slices.Equal(got, want) {
				t.Errorf("violations\n got %v\nwant %v", got, want)
			}
		})
	}
}
