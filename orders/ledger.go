package orders

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrFunds: the balance to debit holds less than the amount.
var ErrFunds = errors.New("orders: insufficient funds")

// ErrAsset: no asset has the code, or the amount has more decimals than it allows.
var ErrAsset = errors.New("orders: unknown asset or amount off its scale")

// Ledger moves money in and out of the exchange. Every move is one balanced
// ledger transaction against the external account.
type Ledger struct {
	db *pgxpool.Pool
}

// NewLedger uses db.
func NewLedger(db *pgxpool.Pool) *Ledger { return &Ledger{db: db} }

// Deposit credits the account and debits the external account.
func (l *Ledger) Deposit(ctx context.Context, account, asset, amount string) error {
	return l.transfer(ctx, "deposit", ExternalAccount, account, asset, amount)
}

// Withdraw debits the account and credits the external account.
func (l *Ledger) Withdraw(ctx context.Context, account, asset, amount string) error {
	return l.transfer(ctx, "withdrawal", account, ExternalAccount, asset, amount)
}

func (l *Ledger) transfer(ctx context.Context, kind, from, to, asset, amountText string) error {
	amount, err := ParseAmount(amountText)
	if err != nil {
		return fmt.Errorf("orders: %s amount %q: %w", kind, amountText, err)
	}
	if !amount.IsPos() {
		return fmt.Errorf("orders: %s amount must be greater than zero", kind)
	}
	// Money moves between the external world and an account inside: a
	// transfer of the external account to itself would post two entries on
	// one balance while the update below applies only one of them.
	if from == to {
		return fmt.Errorf("%w: the external account cannot %s to itself", ErrNoAccount, kind)
	}
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var scale int
		if err := tx.QueryRow(ctx, `SELECT scale FROM assets WHERE code = $1`, asset).Scan(&scale); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", ErrAsset, asset)
			}
			return fmt.Errorf("orders: %s: %w", kind, err)
		}
		if amount.Scale() > scale {
			return fmt.Errorf("%w: %s allows %d decimals", ErrAsset, asset, scale)
		}
		for _, account := range []string{from, to} {
			tag, err := tx.Exec(ctx, `INSERT INTO balances (account_id, asset)
				SELECT id, $2 FROM accounts WHERE id = $1 ON CONFLICT DO NOTHING`, account, asset)
			if err != nil {
				return fmt.Errorf("orders: %s: open balance: %w", kind, err)
			}
			var exists bool
			if tag.RowsAffected() == 0 {
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)`, account).Scan(&exists); err != nil {
					return fmt.Errorf("orders: %s: %w", kind, err)
				}
				if !exists {
					return fmt.Errorf("%w: %s", ErrNoAccount, account)
				}
			}
		}
		// Lock both balances in one fixed order so concurrent transfers cannot deadlock.
		var fromAvailable string
		rows, err := tx.Query(ctx, `SELECT account_id, available::text FROM balances
			WHERE asset = $1 AND account_id IN ($2, $3) ORDER BY account_id FOR UPDATE`, asset, from, to)
		if err != nil {
			return fmt.Errorf("orders: %s: lock balances: %w", kind, err)
		}
		for rows.Next() {
			var id, available string
			if err := rows.Scan(&id, &available); err != nil {
				return fmt.Errorf("orders: %s: lock balances: %w", kind, err)
			}
			if id == from {
				fromAvailable = available
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("orders: %s: lock balances: %w", kind, err)
		}
		if from != ExternalAccount {
			var enough bool
			if err := tx.QueryRow(ctx, `SELECT $1::numeric >= $2::numeric`, fromAvailable, amount.String()).Scan(&enough); err != nil {
				return fmt.Errorf("orders: %s: %w", kind, err)
			}
			if !enough {
				return fmt.Errorf("%w: %s has %s %s", ErrFunds, from, fromAvailable, asset)
			}
		}
		var transaction int64
		if err := tx.QueryRow(ctx, `INSERT INTO ledger_transactions (kind) VALUES ($1) RETURNING id`, kind).Scan(&transaction); err != nil {
			return fmt.Errorf("orders: %s: %w", kind, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (transaction_id, account_id, asset, amount)
			VALUES ($1, $2, $4, -$5::numeric), ($1, $3, $4, $5::numeric)`, transaction, from, to, asset, amount.String()); err != nil {
			return fmt.Errorf("orders: %s: %w", kind, err)
		}
		// Each changed balance gets a journal row in the same transaction; the
		// relay's sweep carries it to the coherence lane, so cached balances
		// learn of deposits and withdrawals too.
		if _, err := tx.Exec(ctx, `WITH changed AS (
				UPDATE balances
				SET available = available + CASE WHEN account_id = $2 THEN -$4::numeric ELSE $4::numeric END,
				    version = version + 1
				WHERE asset = $1 AND account_id IN ($2, $3)
				RETURNING account_id, asset, version)
			INSERT INTO journal_outbox (name, version, payload)
			SELECT 'balances:' || account_id || ':' || asset, version,
			       'balances:' || account_id || ':' || asset || '@' || version
			FROM changed`, asset, from, to, amount.String()); err != nil {
			return fmt.Errorf("orders: %s: %w", kind, err)
		}
		return nil
	})
}
