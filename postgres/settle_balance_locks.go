package postgres

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ordergate/ordergate/orders"
)

// The balance rows a batch locks, what it did to them, and the funds guard:
// the bounds a row's locked value must fall in for the batch's funds checks
// to come out as they did on the unlocked read (settle_guard.sql).

var (
	//go:embed sql/settle_open.sql
	settleOpenSQL string
	//go:embed sql/settle_lock.sql
	settleLockSQL string
	//go:embed sql/settle_guard.sql
	settleGuardSQL string
)

// balanceKey names a balance row.
type balanceKey struct{ account, asset string }

// lockedBalance is a balance row the transaction holds locked, and what the
// transaction did to it so far: the NUMERIC values exactly, never floats,
// so the funds checks compare what PostgreSQL would.
//
// A row the decision only writes (a maker's, the venue's) is not read
// before it is locked: known is false, and available and held are then what
// the batch moved.
//
// A row the decision ran funds checks on keeps the bounds its locked
// available must fall in for every check to come out the same: at least
// atLeast (every hold that passed still passes) and below below (every hold
// refused is still refused); nil is no bound. start is the available the
// decision began from.
//
// movedAvailable and movedHeld are what the batch moved each part by, the
// deltas it writes; entries counts the ledger entries on the row and
// changes the steps of its version: one per entry and one per hold or
// release.
type lockedBalance struct {
	available, held           *ledgerAmount
	movedAvailable, movedHeld ledgerAmount
	known                     bool
	entries, changes          int64
	name, asset, acc          string

	start, atLeast, below *ledgerAmount
}

// funds runs a funds check of the decision: whether the row's available
// covers need, as the batch left it. It records what the check needs of
// the row's value when locked: the batch moved the row by available -
// start, so the check comes out the same while the locked available is at
// least need - that (passed) or below it (refused).
func (b *lockedBalance) funds(need *ledgerAmount) bool {
	threshold := new(ledgerAmount).minus(b.available, b.start)
	threshold.minus(need, threshold)
	if b.available.cmp(need) < 0 {
		if b.below == nil || threshold.cmp(b.below) < 0 {
			b.below = threshold
		}
		return false
	}
	if b.atLeast == nil || threshold.cmp(b.atLeast) > 0 {
		b.atLeast = threshold
	}
	return true
}

// written is the balance rows the decision moves.
func (w *batchWork) written() map[balanceKey]bool {
	keys := make(map[balanceKey]bool)
	for key, b := range w.balances {
		if b.changes > 0 {
			keys[key] = true
		}
	}
	return keys
}

// lockRows opens and locks the balance rows keys in (account, asset)
// order, into locked, in one round trip, with sql's statements.
func lockRows(ctx context.Context, tx sender, sql *settleStatements, keys []balanceKey, locked map[balanceKey]*lockedBalance) error {
	if len(keys) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	queueLock(b, sql, keys, nil, locked)
	return tx.SendBatch(ctx, b).Close()
}

// queueLock queues the opening of the rows keys that known does not hold
// (rows are never deleted, so one read once exists) and the lock of all of
// them, in (account, asset) order; the locked rows are read into locked
// (nil: not read).
func queueLock(b *pgx.Batch, sql *settleStatements, keys []balanceKey, known map[balanceKey]*lockedBalance, locked map[balanceKey]*lockedBalance) {
	queueOpen(b, sql, keys, known)
	accounts, assets := sortedKeys(keys)
	lock := b.Queue(sql.lock, accounts, assets)
	if locked != nil {
		lock.Query(func(rows pgx.Rows) error { return scanBalances(rows, locked) })
	}
}

// queueOpen opens the rows of keys not known to exist (a new account's
// first order), so that what the batch inserts can reference them before
// it locks them.
func queueOpen(b *pgx.Batch, sql *settleStatements, keys []balanceKey, known map[balanceKey]*lockedBalance) {
	accounts, assets := sortedKeys(keys)
	var openAccounts, openAssets []string
	for i := range accounts {
		if known[balanceKey{accounts[i], assets[i]}] == nil {
			openAccounts, openAssets = append(openAccounts, accounts[i]), append(openAssets, assets[i])
		}
	}
	if len(openAccounts) > 0 {
		b.Queue(sql.open, openAccounts, openAssets)
	}
}

// sortedKeys lists keys in (account, asset) order, the order every balance
// lock is taken in, as parallel arrays.
func sortedKeys(keys []balanceKey) (accounts, assets []string) {
	slices.SortFunc(keys, func(a, b balanceKey) int {
		return cmp.Or(strings.Compare(a.account, b.account), strings.Compare(a.asset, b.asset))
	})
	keys = slices.Compact(keys)
	accounts, assets = make([]string, len(keys)), make([]string, len(keys))
	for i, key := range keys {
		accounts[i], assets[i] = key.account, key.asset
	}
	return accounts, assets
}

// scanBalances reads balance rows (account, asset, version, available,
// held) into into. The version is not kept: a batch's outbox rows read the
// version a move reaches from the row itself (settle_balances.sql).
func scanBalances(rows pgx.Rows, into map[balanceKey]*lockedBalance) error {
	var version int64
	for rows.Next() {
		var key balanceKey
		var available, held string
		b := &lockedBalance{known: true}
		if err := rows.Scan(&key.account, &key.asset, &version, &available, &held); err != nil {
			return err
		}
		var okA, okH bool
		b.available, okA = parseAmount(available)
		b.held, okH = parseAmount(held)
		if !okA || !okH {
			return fmt.Errorf("balance %s of %s reads %q, %q", key.asset, key.account, available, held)
		}
		b.acc, b.asset, b.name = key.account, key.asset, orders.BalanceName(key.account, key.asset)
		into[key] = b
	}
	return rows.Err()
}
