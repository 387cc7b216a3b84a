package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/ledger_asset_scale.sql
	ledgerAssetScaleSQL string
	//go:embed sql/ledger_open_balance.sql
	ledgerOpenBalanceSQL string
	//go:embed sql/ledger_account_exists.sql
	ledgerAccountExistsSQL string
	//go:embed sql/ledger_lock_balances.sql
	ledgerLockBalancesSQL string
	//go:embed sql/ledger_has_funds.sql
	ledgerHasFundsSQL string
	//go:embed sql/ledger_insert_transaction.sql
	ledgerInsertTransactionSQL string
	//go:embed sql/ledger_insert_entries.sql
	ledgerInsertEntriesSQL string
	//go:embed sql/ledger_move_balances.sql
	ledgerMoveBalancesSQL string
)

// Ledger moves money in and out of the exchange. Every move is one balanced
// ledger transaction against the external account.
type Ledger struct {
	db *pgxpool.Pool
}

// NewLedger uses db.
func NewLedger(db *pgxpool.Pool) *Ledger { return &Ledger{db: db} }

// Deposit credits the account and debits the external account.
func (l *Ledger) Deposit(ctx context.Context, account, asset, amount string) error {
	return l.transfer(ctx, "deposit", orders.ExternalAccount, account, asset, amount)
}

// Withdraw debits the account and credits the external account.
func (l *Ledger) Withdraw(ctx context.Context, account, asset, amount string) error {
	return l.transfer(ctx, "withdrawal", account, orders.ExternalAccount, asset, amount)
}

func (l *Ledger) transfer(ctx context.Context, kind, from, to, asset, amountText string) error {
	amount, err := orders.ParseAmount(amountText)
	if err != nil {
		return fmt.Errorf("postgres: %s amount %q: %w", kind, amountText, err)
	}
	if !amount.IsPos() {
		return fmt.Errorf("postgres: %s amount must be greater than zero", kind)
	}
	// Money moves between the external world and an account inside: a
	// transfer of the external account to itself would post two entries on
	// one balance while the update below applies only one of them.
	if from == to {
		return fmt.Errorf("%w: the external account cannot %s to itself", orders.ErrNoAccount, kind)
	}
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var scale int
		if err := tx.QueryRow(ctx, ledgerAssetScaleSQL, asset).Scan(&scale); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", orders.ErrAsset, asset)
			}
			return fmt.Errorf("postgres: %s: %w", kind, err)
		}
		if amount.Scale() > scale {
			return fmt.Errorf("%w: %s allows %d decimals", orders.ErrAsset, asset, scale)
		}
		// Rows are opened in the order settlement locks them (by account),
		// so two transfers creating the same two rows in opposite
		// directions queue behind each other instead of deadlocking.
		for _, account := range []string{min(from, to), max(from, to)} {
			tag, err := tx.Exec(ctx, ledgerOpenBalanceSQL, account, asset)
			if err != nil {
				return fmt.Errorf("postgres: %s: open balance: %w", kind, err)
			}
			var exists bool
			if tag.RowsAffected() == 0 {
				if err := tx.QueryRow(ctx, ledgerAccountExistsSQL, account).Scan(&exists); err != nil {
					return fmt.Errorf("postgres: %s: %w", kind, err)
				}
				if !exists {
					return fmt.Errorf("%w: %s", orders.ErrNoAccount, account)
				}
			}
		}
		var fromAvailable string
		rows, err := tx.Query(ctx, ledgerLockBalancesSQL, asset, from, to)
		if err != nil {
			return fmt.Errorf("postgres: %s: lock balances: %w", kind, err)
		}
		for rows.Next() {
			var id, available string
			if err := rows.Scan(&id, &available); err != nil {
				return fmt.Errorf("postgres: %s: lock balances: %w", kind, err)
			}
			if id == from {
				fromAvailable = available
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("postgres: %s: lock balances: %w", kind, err)
		}
		if from != orders.ExternalAccount {
			var enough bool
			if err := tx.QueryRow(ctx, ledgerHasFundsSQL, fromAvailable, amount.String()).Scan(&enough); err != nil {
				return fmt.Errorf("postgres: %s: %w", kind, err)
			}
			if !enough {
				return fmt.Errorf("%w: %s has %s %s", orders.ErrFunds, from, fromAvailable, asset)
			}
		}
		var transaction int64
		if err := tx.QueryRow(ctx, ledgerInsertTransactionSQL, kind).Scan(&transaction); err != nil {
			return fmt.Errorf("postgres: %s: %w", kind, err)
		}
		if _, err := tx.Exec(ctx, ledgerInsertEntriesSQL, transaction, from, to, asset, amount.String()); err != nil {
			return fmt.Errorf("postgres: %s: %w", kind, err)
		}
		if _, err := tx.Exec(ctx, ledgerMoveBalancesSQL, asset, from, to, amount.String(),
			orders.BalanceName(from, asset), orders.BalanceName(to, asset)); err != nil {
			return fmt.Errorf("postgres: %s: %w", kind, err)
		}
		return nil
	})
}
