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
		return nil, fmt.Errorf("postgres: read balances of %s: %w", account, err)
	}
	balances, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (orders.Balance, error) {
		var balance orders.Balance
		err := row.Scan(&balance.Asset, &balance.Available, &balance.Held, &balance.Version)
		return balance, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: read balances of %s: %w", account, err)
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

var (
	//go:embed sql/balance_read_named.sql
	balanceReadNamedSQL string
	//go:embed sql/balance_read_accounts.sql
	balanceReadAccountsSQL string
)

// Current returns, by name, the current row of each named balance (nil when
// there is no such balance), in one query. The balance may have moved past
// the version named; its current row is what a cache takes.
func (b *Balances) Current(ctx context.Context, named []orders.BalanceVersion) (map[string]*orders.Balance, error) {
	names := make([]string, len(named))
	accounts := make([]string, len(named))
	assets := make([]string, len(named))
	assetOf := make(map[string]string, len(named))
	for i, v := range named {
		names[i], accounts[i], assets[i] = v.Name(), v.Account, v.Asset
		assetOf[names[i]] = v.Asset
	}
	rows, err := b.db.Query(ctx, balanceReadNamedSQL, names, accounts, assets)
	if err != nil {
		return nil, fmt.Errorf("postgres: read balances to refresh: %w", err)
	}
	defer rows.Close()
	current := make(map[string]*orders.Balance, len(named))
	for rows.Next() {
		var (
			name            string
			version         *int64
			available, held *string
		)
		if err := rows.Scan(&name, &version, &available, &held); err != nil {
			return nil, fmt.Errorf("postgres: read balances to refresh: %w", err)
		}
		current[name] = nil
		if version != nil && available != nil && held != nil {
			current[name] = &orders.Balance{Asset: assetOf[name], Available: *available, Held: *held, Version: *version}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: read balances to refresh: %w", err)
	}
	return current, nil
}

// OfAccounts returns the balances of each account, by account, each list
// sorted by asset, in one query; an account without any is left out.
func (b *Balances) OfAccounts(ctx context.Context, accounts []string) (map[string][]orders.Balance, error) {
	rows, err := b.db.Query(ctx, balanceReadAccountsSQL, accounts)
	if err != nil {
		return nil, fmt.Errorf("postgres: read balances of %d accounts: %w", len(accounts), err)
	}
	defer rows.Close()
	balances := make(map[string][]orders.Balance, len(accounts))
	for rows.Next() {
		var (
			account string
			balance orders.Balance
		)
		if err := rows.Scan(&account, &balance.Asset, &balance.Available, &balance.Held, &balance.Version); err != nil {
			return nil, fmt.Errorf("postgres: read balances of %d accounts: %w", len(accounts), err)
		}
		balances[account] = append(balances[account], balance)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: read balances of %d accounts: %w", len(accounts), err)
	}
	return balances, nil
}
