package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The audit's checks, as a Violation names them. docs/market.md says what
// the audit proves; each check is one file, sql/audit_<name>.sql.
const (
	// CheckBalanceLedger: a balance's total (available + held) differs from
	// the sum of its ledger entries. Holds and releases move between the
	// parts and are no entries: CheckHeldOrders proves the held part.
	CheckBalanceLedger = "balance_matches_ledger"
	// CheckBalanceVersion: a balance's version is below its number of
	// entries (it rises with each entry, and with each hold or release).
	CheckBalanceVersion = "version_counts_entries"
	// CheckConservation: an asset's balances, available and held, do not sum
	// to zero.
	CheckConservation = "asset_conserved"
	// CheckNegative: a balance has a part below zero (the external account's
	// available excepted).
	CheckNegative = "no_negative_balance"
	// CheckTransactionBalanced: a ledger transaction does not sum to zero in an asset.
	CheckTransactionBalanced = "transaction_balanced"
	// CheckTransactionEntries: a ledger transaction has fewer than two entries.
	CheckTransactionEntries = "transaction_has_entries"
	// CheckHeldOrders: a balance's held part is not the sum of the holds of
	// its account's resting orders in that asset.
	CheckHeldOrders = "held_matches_orders"
	// CheckBookCrossed: an instrument's best resting bid is at or above its
	// best resting ask.
	CheckBookCrossed = "book_not_crossed"
	// CheckTradePrice: a trade is not at its maker's price.
	CheckTradePrice = "trade_at_maker_price"
	// CheckTradeLimits: a trade is outside the buy's or the sell's limit, or
	// not between the orders, sides and instrument it names.
	CheckTradeLimits = "trade_within_limits"
	// CheckMarketProtection: a trade of a market order is beyond its
	// protection price (above a buy's, below a sell's).
	CheckMarketProtection = "market_within_protection"
	// CheckTradeAccounts: a trade is between two orders of one account, or
	// names accounts its orders do not belong to.
	CheckTradeAccounts = "trade_between_accounts"
	// CheckTradeEntries: a trade's ledger transaction does not move what the
	// trade implies.
	CheckTradeEntries = "trade_matches_entries"
	// CheckTradeFees: a trade's fee is not exactly the instrument's current
	// rate times its notional (a rate changed since the trade shows up too).
	CheckTradeFees = "fee_at_rate"
	// CheckOrderFill: an order's filled quantity, notional or fees are not
	// the sums over its trades (or its settlement), exceed its quantity, or
	// contradict its status.
	CheckOrderFill = "order_fill_matches_trades"
	// CheckOrderTransaction: a hold or release of an order without a row, or
	// a trade transaction that is not one trade's.
	CheckOrderTransaction = "order_transaction_has_order"
	// CheckSettledOrder: an order settled before the market lacks its one
	// settlement transaction, is not filled, or its fill does not add up.
	CheckSettledOrder = "settled_order_has_transaction"
	// CheckUnsettledOrder: an order not settled before the market has a
	// settlement transaction.
	CheckUnsettledOrder = "unsettled_order_has_none"
	// CheckOrphanSettlement: a settlement transaction has no filled order
	// naming it.
	CheckOrphanSettlement = "settlement_has_order"
	// CheckSettlementEntries: a settlement's entries are not the ones its
	// order's fill implies.
	CheckSettlementEntries = "settlement_matches_fill"
	// CheckClientOrderOnce: an order moved money although another order of
	// its account holds its client order id (a retry settled twice).
	CheckClientOrderOnce = "client_order_id_settled_once"
)

var (
	//go:embed sql/audit_count.sql
	auditCountSQL string
	//go:embed sql/audit_balance_matches_ledger.sql
	auditBalanceMatchesLedgerSQL string
	//go:embed sql/audit_version_counts_entries.sql
	auditVersionCountsEntriesSQL string
	//go:embed sql/audit_asset_conserved.sql
	auditAssetConservedSQL string
	//go:embed sql/audit_no_negative_balance.sql
	auditNoNegativeBalanceSQL string
	//go:embed sql/audit_transaction_balanced.sql
	auditTransactionBalancedSQL string
	//go:embed sql/audit_transaction_has_entries.sql
	auditTransactionHasEntriesSQL string
	//go:embed sql/audit_held_matches_orders.sql
	auditHeldMatchesOrdersSQL string
	//go:embed sql/audit_book_not_crossed.sql
	auditBookNotCrossedSQL string
	//go:embed sql/audit_trade_at_maker_price.sql
	auditTradeAtMakerPriceSQL string
	//go:embed sql/audit_trade_within_limits.sql
	auditTradeWithinLimitsSQL string
	//go:embed sql/audit_market_within_protection.sql
	auditMarketWithinProtectionSQL string
	//go:embed sql/audit_trade_between_accounts.sql
	auditTradeBetweenAccountsSQL string
	//go:embed sql/audit_trade_matches_entries.sql
	auditTradeMatchesEntriesSQL string
	//go:embed sql/audit_fee_at_rate.sql
	auditFeeAtRateSQL string
	//go:embed sql/audit_order_fill_matches_trades.sql
	auditOrderFillMatchesTradesSQL string
	//go:embed sql/audit_order_transaction_has_order.sql
	auditOrderTransactionHasOrderSQL string
	//go:embed sql/audit_settled_order_has_transaction.sql
	auditSettledOrderHasTransactionSQL string
	//go:embed sql/audit_unsettled_order_has_none.sql
	auditUnsettledOrderHasNoneSQL string
	//go:embed sql/audit_settlement_has_order.sql
	auditSettlementHasOrderSQL string
	//go:embed sql/audit_client_order_id_settled_once.sql
	auditClientOrderIDSettledOnceSQL string
	//go:embed sql/audit_settlement_matches_fill.sql
	auditSettlementMatchesFillSQL string
)

// Violation is one broken invariant of the ledger.
type Violation struct {
	Check string
	// Subject is what is wrong: a balance (its outbox name), an asset, an
	// instrument (its symbol), a ledger transaction (txn/<id>), a trade
	// (trade/<id>) or an order (its ORD id).
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
	{CheckBalanceLedger, auditBalanceMatchesLedgerSQL},
	{CheckBalanceVersion, auditVersionCountsEntriesSQL},
	{CheckConservation, auditAssetConservedSQL},
	{CheckNegative, auditNoNegativeBalanceSQL},
	{CheckTransactionBalanced, auditTransactionBalancedSQL},
	{CheckTransactionEntries, auditTransactionHasEntriesSQL},
	{CheckHeldOrders, auditHeldMatchesOrdersSQL},
	{CheckBookCrossed, auditBookNotCrossedSQL},
	{CheckTradePrice, auditTradeAtMakerPriceSQL},
	{CheckTradeLimits, auditTradeWithinLimitsSQL},
	{CheckMarketProtection, auditMarketWithinProtectionSQL},
	{CheckTradeAccounts, auditTradeBetweenAccountsSQL},
	{CheckTradeEntries, auditTradeMatchesEntriesSQL},
	{CheckTradeFees, auditFeeAtRateSQL},
	{CheckOrderFill, auditOrderFillMatchesTradesSQL},
	{CheckOrderTransaction, auditOrderTransactionHasOrderSQL},
	{CheckSettledOrder, auditSettledOrderHasTransactionSQL},
	{CheckUnsettledOrder, auditUnsettledOrderHasNoneSQL},
	{CheckOrphanSettlement, auditSettlementHasOrderSQL},
	{CheckSettlementEntries, auditSettlementMatchesFillSQL},
	{CheckClientOrderOnce, auditClientOrderIDSettledOnceSQL},
}

// RunAudit is Audit with the counts of what it looked at. Every check reads
// one snapshot, so settlements committing meanwhile cannot show up as a
// balance ahead of its entries.
func RunAudit(ctx context.Context, db *pgxpool.Pool) (AuditReport, error) {
	var report AuditReport
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, auditCountSQL).Scan(&report.Balances, &report.Transactions, &report.Orders); err != nil {
			return fmt.Errorf("postgres: audit: count: %w", err)
		}
		for _, check := range auditChecks {
			rows, err := tx.Query(ctx, check.query)
			if err != nil {
				return fmt.Errorf("postgres: audit %s: %w", check.name, err)
			}
			found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Violation, error) {
				v := Violation{Check: check.name}
				return v, row.Scan(&v.Subject, &v.Detail)
			})
			if err != nil {
				return fmt.Errorf("postgres: audit %s: %w", check.name, err)
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
