package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

// balanceQuerier is a pool or a transaction.
type balanceQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

//go:embed sql/balance_read.sql
var balanceReadSQL string

// readBalanceRows reads the account's balances, or its balance of asset when
// asset is not empty. A row that never moved (version 0: settlement inserts
// the rows an order would move before it locks them, and a rejected order
// leaves them so) is no balance the account holds, and is left out.
func readBalanceRows(ctx context.Context, db balanceQuerier, account, asset string) ([]orders.Balance, error) {
	rows, err := db.Query(ctx, balanceReadSQL, account, asset)
	if err != nil {
		return nil, fmt.Errorf("orders: read balances of %s: %w", account, err)
	}
	balances, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (orders.Balance, error) {
		var balance orders.Balance
		err := row.Scan(&balance.Asset, &balance.Available, &balance.Held, &balance.Version)
		return balance, err
	})
	if err != nil {
		return nil, fmt.Errorf("orders: read balances of %s: %w", account, err)
	}
	return balances, nil
}

// Balances reads balances from PostgreSQL, the truth the caches copy.
type Balances struct {
	db *pgxpool.Pool
}

// NewBalances reads from db.
func NewBalances(db *pgxpool.Pool) *Balances { return &Balances{db: db} }

// Of returns the account's balances sorted by asset; none for an account
// without any (or no such account).
func (b *Balances) Of(ctx context.Context, account string) ([]orders.Balance, error) {
	return readBalanceRows(ctx, b.db, account, "")
}
