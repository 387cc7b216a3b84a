package postgres

import (
	"context"
	_ "embed"
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
	//go:embed sql/audit_settled_order_has_transaction.sql
	auditSettledOrderHasTransactionSQL string
	//go:embed sql/audit_unsettled_order_has_none.sql
	auditUnsettledOrderHasNoneSQL string
	//go:embed sql/audit_settlement_has_order.sql
	auditSettlementHasOrderSQL string
	//go:embed sql/audit_settlement_matches_fill.sql
	auditSettlementMatchesFillSQL string
)

// Violation is one broken invariant of the ledger.
type Violation struct {
	Check string
	// Subject is what is wrong: a balance (its outbox name), an asset, a
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
	{CheckBalanceLedger, auditBalanceMatchesLedgerSQL},
	{CheckBalanceVersion, auditVersionCountsEntriesSQL},
	{CheckConservation, auditAssetConservedSQL},
	{CheckNegative, auditNoNegativeBalanceSQL},
	{CheckTransactionBalanced, auditTransactionBalancedSQL},
	{CheckTransactionEntries, auditTransactionHasEntriesSQL},
	{CheckSettledOrder, auditSettledOrderHasTransactionSQL},
	{CheckUnsettledOrder, auditUnsettledOrderHasNoneSQL},
	{CheckOrphanSettlement, auditSettlementHasOrderSQL},
	{CheckSettlementEntries, auditSettlementMatchesFillSQL},
}

// RunAudit is Audit with the counts of what it looked at. Every check reads
// one snapshot, so settlements committing meanwhile cannot show up as a
// balance ahead of its entries.
func RunAudit(ctx context.Context, db *pgxpool.Pool) (AuditReport, error) {
	var report AuditReport
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, auditCountSQL).Scan(&report.Balances, &report.Transactions, &report.Orders); err != nil {
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
