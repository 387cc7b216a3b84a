package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/coherence_read_due.sql
	coherenceReadDueSQL string
	//go:embed sql/coherence_advance.sql
	coherenceAdvanceSQL string
)

// AppliedVersions records, per balance name, the newest version whose change
// the balance cache has applied, so a duplicate or late announcement of an
// older version changes nothing.
type AppliedVersions struct {
	db *pgxpool.Pool
}

// NewAppliedVersions keeps the applied versions in db.
func NewAppliedVersions(db *pgxpool.Pool) *AppliedVersions { return &AppliedVersions{db: db} }

// ReadDue returns, by name, the announced versions newer than their name's
// applied one, each with its balance's current row (nil when there is no such
// balance), in one query. The balance may have moved past the announced
// version already; its current row is what to cache.
func (a *AppliedVersions) ReadDue(ctx context.Context, announced []orders.BalanceVersion) (map[string]*orders.Balance, error) {
	names := make([]string, len(announced))
	versions := make([]int64, len(announced))
	accounts := make([]string, len(announced))
	assets := make([]string, len(announced))
	assetOf := make(map[string]string, len(announced))
	for i, v := range announced {
		names[i], versions[i], accounts[i], assets[i] = v.Name(), v.Version, v.Account, v.Asset
		assetOf[names[i]] = v.Asset
	}
	rows, err := a.db.Query(ctx, coherenceReadDueSQL, names, versions, accounts, assets)
	if err != nil {
		return nil, fmt.Errorf("read balances to refresh: %w", err)
	}
	defer rows.Close()
	due := make(map[string]*orders.Balance)
	for rows.Next() {
		var (
			name            string
			version         *int64
			available, held *string
		)
		if err := rows.Scan(&name, &version, &available, &held); err != nil {
			return nil, fmt.Errorf("read balances to refresh: %w", err)
		}
		due[name] = nil
		if version != nil && available != nil && held != nil {
			due[name] = &orders.Balance{Asset: assetOf[name], Available: *available, Held: *held, Version: *version}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read balances to refresh: %w", err)
	}
	return due, nil
}

// Advance records the versions as applied in one statement, each only if it
// is still newer than what the row holds (another applier may have recorded
// a newer one since the read), and returns the names it advanced.
func (a *AppliedVersions) Advance(ctx context.Context, applied []orders.BalanceVersion) (map[string]bool, error) {
	names := make([]string, len(applied))
	versions := make([]int64, len(applied))
	for i, v := range applied {
		names[i], versions[i] = v.Name(), v.Version
	}
	rows, err := a.db.Query(ctx, coherenceAdvanceSQL, names, versions)
	if err != nil {
		return nil, fmt.Errorf("advance applied versions: %w", err)
	}
	defer rows.Close()
	advanced := make(map[string]bool, len(applied))
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("advance applied versions: %w", err)
		}
		advanced[name] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advance applied versions: %w", err)
	}
	return advanced, nil
}
