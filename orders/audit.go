package orders

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The audit's checks, as a Violation names them.
const (
	// CheckBalanceLedger: a balance differs from the sum of its ledger entries.
	CheckBalanceLedger = "balance_matches_ledger"
	// CheckBalanceVersion: a balance's version is not its number of entries.
	CheckBalanceVersion = "version_counts_entries"
	// CheckConservation: an asset's balances do not sum to zero.
	CheckConservation = "asset_conserved"
	// CheckNegative: a balance other than the external account's is below zero.
	CheckNegative = "no_negative_balance"
	// CheckTransactionBalanced: a ledger transaction does not sum to zero in an asset.
	CheckTransactionBalanced = "transaction_balanced"
	// CheckTransactionEntries: a ledger transaction has fewer than two entries.
	CheckTransactionEntries = "transaction_has_entries"
	// CheckSettledOrder: a settled order lacks its one settlement transaction,
	// or its fill does not add up.
	CheckSettledOrder = "settled_order_has_transaction"
	// CheckUnsettledOrder: an order that is not settled has a ledger transaction.
	CheckUnsettledOrder = "unsettled_order_has_none"
	// CheckOrphanSettlement: a settlement transaction has no settled order.
	CheckOrphanSettlement = "settlement_has_order"
	// CheckSettlementEntries: a settlement's entries are not the ones its
	// order's fill implies.
	CheckSettlementEntries = "settlement_matches_fill"
)

// Violation is one broken invariant of the ledger.
type Violation struct {
	Check string
	// Subject is what is wrong: a balance (its journal name), an asset, a
	// ledger transaction (txn/<id>) or an order (its ORD id).
	Subject string
	Detail  string
}

func (v Violation) String() string { return v.Check + " " + v.Subject + ": " + v.Detail }

// AuditReport is what an audit found, and how much it looked at.
type AuditReport struct {
	Violations   []Violation
	Balances     int64
	Transactions int64
	Orders       int64
}

// Audit recomputes the ledger's invariants and returns every violation; an
// empty list means the books are sound. The error is for a failure to read.
func Audit(ctx context.Context, db *pgxpool.Pool) ([]Violation, error) {
	report, err := RunAudit(ctx, db)
	return report.Violations, err
}

// auditCheck is one query whose every row is a violation: a subject and a
// detail.
type auditCheck struct {
	name  string
	query string
}

var auditChecks = []auditCheck{
	{CheckBalanceLedger, `
		SELECT 'balances:' || b.account_id || ':' || b.asset,
		       format('available %s, ledger entries sum to %s', trim_scale(b.available), trim_scale(coalesce(e.total, 0)))
		FROM balances b LEFT JOIN (
			SELECT account_id, asset, sum(amount) AS total FROM ledger_entries GROUP BY account_id, asset
		) e USING (account_id, asset)
		WHERE b.available <> coalesce(e.total, 0)
		ORDER BY b.account_id, b.asset`},
	{CheckBalanceVersion, `
		SELECT 'balances:' || b.account_id || ':' || b.asset,
		       format('version %s, %s ledger entries', b.version, coalesce(e.entries, 0))
		FROM balances b LEFT JOIN (
			SELECT account_id, asset, count(*) AS entries FROM ledger_entries GROUP BY account_id, asset
		) e USING (account_id, asset)
		WHERE b.version <> coalesce(e.entries, 0)
		ORDER BY b.account_id, b.asset`},
	{CheckConservation, `
		SELECT asset, format('balances sum to %s, not 0', trim_scale(sum(available)))
		FROM balances GROUP BY asset HAVING sum(available) <> 0
		ORDER BY asset`},
	{CheckNegative, `
		SELECT 'balances:' || account_id || ':' || asset, format('available %s', trim_scale(available))
		FROM balances WHERE available < 0 AND account_id <> '` + ExternalAccount + `'
		ORDER BY account_id, asset`},
	{CheckTransactionBalanced, `
		SELECT 'txn/' || transaction_id, format('%s entries sum to %s', asset, trim_scale(sum(amount)))
		FROM ledger_entries GROUP BY transaction_id, asset HAVING sum(amount) <> 0
		ORDER BY transaction_id, asset`},
	{CheckTransactionEntries, `
		SELECT 'txn/' || t.id, format('%s transaction with %s entries', t.kind, count(e.id))
		FROM ledger_transactions t LEFT JOIN ledger_entries e ON e.transaction_id = t.id
		GROUP BY t.id, t.kind HAVING count(e.id) < 2
		ORDER BY t.id`},
	// The schema lets a settled row point at any transaction; this holds it
	// to its own settlement, and its fill to price × quantity.
	{CheckSettledOrder, `
		SELECT o.id, CASE
			WHEN t.id IS NULL THEN 'settled without a ledger transaction'
			WHEN t.kind <> 'settlement' OR t.order_id IS DISTINCT FROM o.id
				THEN format('points at txn/%s, a %s%s', t.id, t.kind, ' of order ' || t.order_id)
			WHEN o.fill_quantity <> o.quantity THEN format('filled %s of %s', trim_scale(o.fill_quantity), trim_scale(o.quantity))
			WHEN o.type = 'limit' AND o.fill_price <> o.price THEN format('limit %s filled at %s', trim_scale(o.price), trim_scale(o.fill_price))
			ELSE format('notional %s is not %s × %s', trim_scale(o.fill_notional), trim_scale(o.fill_price), trim_scale(o.fill_quantity))
		END
		FROM orders o LEFT JOIN ledger_transactions t ON t.id = o.ledger_transaction_id
		WHERE o.status = 'settled' AND (t.id IS NULL OR t.kind <> 'settlement' OR t.order_id IS DISTINCT FROM o.id
			OR o.fill_quantity <> o.quantity OR (o.type = 'limit' AND o.fill_price <> o.price)
			OR o.fill_notional <> o.fill_price * o.fill_quantity)
		ORDER BY o.id`},
	{CheckUnsettledOrder, `
		SELECT o.id, format('%s, yet txn/%s is its %s', o.status, t.id, t.kind)
		FROM orders o JOIN ledger_transactions t ON t.order_id = o.id OR t.id = o.ledger_transaction_id
		WHERE o.status <> 'settled'
		ORDER BY o.id, t.id`},
	{CheckOrphanSettlement, `
		SELECT 'txn/' || t.id, CASE
			WHEN o.id IS NULL THEN format('settles order %s, which has no final row', t.order_id)
			WHEN o.status <> 'settled' THEN format('settles order %s, which is %s', t.order_id, o.status)
			ELSE format('settles order %s, which names txn/%s', t.order_id, o.ledger_transaction_id)
		END
		FROM ledger_transactions t LEFT JOIN orders o ON o.id = t.order_id
		WHERE t.kind = 'settlement'
		  AND (o.id IS NULL OR o.status <> 'settled' OR o.ledger_transaction_id IS DISTINCT FROM t.id)
		ORDER BY t.id`},
	// What a settled order's fill implies, against what its transaction
	// holds: the entries differing either way.
	{CheckSettlementEntries, `
		WITH expected AS (
			SELECT o.id AS order_id, x.account_id, x.asset, x.amount
			FROM orders o JOIN instruments i ON i.symbol = o.symbol
			-- an order without its own settlement is settled_order_has_transaction's
			JOIN ledger_transactions t ON t.id = o.ledger_transaction_id AND t.kind = 'settlement' AND t.order_id = o.id,
			LATERAL (VALUES
				(o.account_id, i.base, CASE o.side WHEN 'buy' THEN o.fill_quantity ELSE -o.fill_quantity END),
				(o.account_id, i.quote, CASE o.side WHEN 'buy' THEN -o.fill_notional ELSE o.fill_notional END),
				('` + VenueAccount + `', i.base, CASE o.side WHEN 'buy' THEN -o.fill_quantity ELSE o.fill_quantity END),
				('` + VenueAccount + `', i.quote, CASE o.side WHEN 'buy' THEN o.fill_notional ELSE -o.fill_notional END)
			) AS x(account_id, asset, amount)
			WHERE o.status = 'settled'
		), actual AS (
			SELECT t.order_id, e.account_id, e.asset, e.amount
			FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
			JOIN orders o ON o.id = t.order_id AND o.status = 'settled' AND o.ledger_transaction_id = t.id
			WHERE t.kind = 'settlement'
		), differing AS (
			(SELECT 'missing' AS what, * FROM expected EXCEPT ALL SELECT 'missing', * FROM actual)
			UNION ALL
			(SELECT 'unexpected', * FROM actual EXCEPT ALL SELECT 'unexpected', * FROM expected)
		)
		SELECT order_id, string_agg(format('%s entry %s %s %s', what, account_id, asset, trim_scale(amount)), '; '
			ORDER BY what, account_id, asset, amount)
		FROM differing GROUP BY order_id ORDER BY order_id`},
}

// RunAudit is Audit with the counts of what it looked at. Every check reads
// one snapshot, so settlements committing meanwhile cannot show up as a
// balance ahead of its entries.
func RunAudit(ctx context.Context, db *pgxpool.Pool) (AuditReport, error) {
	var report AuditReport
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM balances), (SELECT count(*) FROM ledger_transactions),
				(SELECT count(*) FROM orders)`).Scan(&report.Balances, &report.Transactions, &report.Orders); err != nil {
			return fmt.Errorf("orders: audit: count: %w", err)
		}
		for _, check := range auditChecks {
			rows, err := tx.Query(ctx, check.query)
			if err != nil {
				return fmt.Errorf("orders: audit %s: %w", check.name, err)
			}
			found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Violation, error) {
				v := Violation{Check: check.name}
				return v, row.Scan(&v.Subject, &v.Detail)
			})
			if err != nil {
				return fmt.Errorf("orders: audit %s: %w", check.name, err)
			}
			report.Violations = append(report.Violations, found...)
		}
		return nil
	})
	if err != nil {
		return AuditReport{}, err
	}
	return report, nil
}
