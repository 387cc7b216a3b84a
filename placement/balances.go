package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/orders"
)

// BalancesTable names balances in coherence: their outbox names,
// their job queue (coherence.Queue) and their cache keys all carry it.
const BalancesTable = orders.BalancesTable

// CoherenceModes declares how each table's changes reach the caches.
// Balances use the job mode: a stale balance costs money, so the message
// must survive a crash and a lost one is not acceptable (a gateway's local
// copy of the balance cache, WithLocalCopy, is then kept by tracking).
// API keys and instruments use the tracking mode: a revocation or a halt
// raises a stamp, every gateway's local copy of it is invalidated, and the
// next request rereads (KeyCache.TrackRevocations, Instruments.Fresh). A
// broadcast follows for gateways that keep no local copy (on a Redis
// Cluster), whose copies expire within their ttl or refresh interval.
var CoherenceModes = coherence.Modes{BalancesTable: coherence.ModeJob, InstrumentsTable: coherence.ModeTracking,
	APIKeysTable: coherence.ModeTracking}

// The cache holds one hash per account, ecc:{balances}:<account>, field =
// asset, value "<version> <available> <held>" (cacheValue), every write a
// conditional fill (coherence.Client.FillIfNewer) so no version is ever
// replaced by an older one. Nothing deletes or expires a field: a filler that
// read PostgreSQL before a newer version was cached can only be refused while
// that newer version is there to compare with.
//
// The coherence consumer refreshes single fields, and may create the hash
// doing so, so a hash need not hold every balance of the account.
// completeField marks one that does: a read fills every balance of the
// account at once, marker included, and from then on the consumer keeps each
// field current. Asset codes are upper case letters and digits, so the marker
// is never an asset.
const completeField = "~complete"

// BalanceCacheKey is the cache hash of an account's balances.
func BalanceCacheKey(account string) string { return coherence.CacheKey(BalancesTable, account) }

// Balances reads accounts' balances: from the cache when it holds the whole
// account, from PostgreSQL otherwise, filling the cache as it goes.
type Balances struct {
	db    BalanceReader
	cache *coherence.Client
	// local, when set, reads the cache through the process's local copy
	// (WithLocalCopy); served keeps, per account, the versions answered,
	// so the copy never answers an older one.
	local  *coherence.Client
	served *lru.Cache[string, map[string]int64]
	// serving orders the merges into served.
	serving sync.Mutex
	logger  *slog.Logger
	// cacheWarnings keeps a Redis outage from logging once per request.
	cacheWarnings outage.Sparse
}

func (b *Balances) warnCache(message, account string, err error) {
	if b.cacheWarnings.Allow() {
		b.logger.Warn(message, "account", account, "err", err)
	}
}

// BalanceReader reads balances from their truth, PostgreSQL
// (postgres.Balances).
type BalanceReader interface {
	Of(ctx context.Context, account string) ([]orders.Balance, error)
}

// NewBalances reads from db and caches in cache's Redis; with a nil cache
// every read goes to PostgreSQL.
func NewBalances(db BalanceReader, cache *coherence.Client, logger *slog.Logger) *Balances {
	if logger == nil {
		logger = slog.Default()
	}
	return &Balances{db: db, cache: cache, logger: logger}
}

// maxServedAccounts bounds the accounts whose answered versions the local
// copy is held to; the copy does not answer for an account past it (nor
// before the first answer for it), which is read from Redis instead.
const maxServedAccounts = 100_000

// WithLocalCopy reads the balance cache through local, a client made on a
// coherence.Tracking: a complete hash is answered from the process's own
// memory until Redis invalidates it. An answer from the copy older than
// what this process answered before for the account (an invalidation
// still on its way) is not given: the hash is read from Redis instead,
// which never goes back.
func (b *Balances) WithLocalCopy(local *coherence.Client) *Balances {
	served, err := lru.New[string, map[string]int64](maxServedAccounts)
	if err != nil {
		panic(err)
	}
	b.local, b.served = local, served
	return b
}

// fromLocalCopy answers from the local copy when it holds the account's
// complete hash, outside a heal, no older than what was answered before.
func (b *Balances) fromLocalCopy(ctx context.Context, account string) ([]orders.Balance, bool) {
	cached, mark, err := b.local.ReadCacheTracked(ctx, BalancesTable, BalanceCacheKey(account))
	if err != nil {
		return nil, false
	}
	if _, complete := cached[completeField]; !complete || mark.Healing() {
		return nil, false
	}
	if !b.raiseFloor(account, cached, true) {
		return nil, false
	}
	return balancesOf(cached), true
}

// answer is balancesOf, raising the versions answered for the account
// that the local copy is held to.
func (b *Balances) answer(account string, entries map[string]coherence.CacheEntry) []orders.Balance {
	if b.served != nil {
		b.raiseFloor(account, entries, false)
	}
	return balancesOf(entries)
}

// raiseFloor raises the versions answered for the account to those of
// entries, in one step. Entries fromCopy, the local copy's, are refused
// (false, nothing raised) for an account not remembered, or when one is
// older than what was answered for it.
func (b *Balances) raiseFloor(account string, entries map[string]coherence.CacheEntry, fromCopy bool) bool {
	b.serving.Lock()
	defer b.serving.Unlock()
	served, known := b.served.Get(account)
	if fromCopy {
		if !known {
			return false
		}
		for asset, version := range served {
			if entry, held := entries[asset]; !held || entry.Version < version {
				return false
			}
		}
	}
	newer := !known
	for asset, entry := range entries {
		if version, ok := served[asset]; asset != completeField && (!ok || entry.Version > version) {
			newer = true
			break
		}
	}
	if !newer {
		return true // the common answer allocates nothing here
	}
	raised := make(map[string]int64, max(len(served), len(entries)))
	maps.Copy(raised, served)
	for asset, entry := range entries {
		if asset != completeField {
			raised[asset] = max(raised[asset], entry.Version)
		}
	}
	b.served.Add(account, raised)
	return true
}

// Of returns the account's balances sorted by asset; none for an account
// without any (or no such account).
//
// A hash marked complete is served as it is, unless a heal of the cache
// runs (coherence.HealMark). Otherwise PostgreSQL is read and, outside a
// heal, the cache filled, fenced by the heal mark read with the hash; the
// answer is, per asset, the newer of what was read and what the cache
// holds: the cache may have been refreshed past the read meanwhile, and
// serving the read would then go back in time.
//
// Redis down (or the fill failing): orders.ErrUnavailable. Serving PostgreSQL
// instead would show a version the cache does not hold yet, and the next
// read from the cache would then go back in time. PostgreSQL down and the
// account not cached: orders.ErrUnavailable.
func (b *Balances) Of(ctx context.Context, account string) ([]orders.Balance, error) {
	if b.cache == nil {
		return b.fromDatabase(ctx, account)
	}
	if b.local != nil {
		if balances, ok := b.fromLocalCopy(ctx, account); ok {
			return balances, nil
		}
	}
	key := BalanceCacheKey(account)
	cached, mark, err := b.cache.ReadCacheMarked(ctx, BalancesTable, key)
	if err != nil {
		b.warnCache("balance cache unreadable; answering unavailable", account, err)
		return nil, fmt.Errorf("%w: balance cache: %w", orders.ErrUnavailable, err)
	}
	// While a heal runs the hash may be older than what readers saw before
	// Redis lost writes: PostgreSQL answers until the heal ends.
	if _, complete := cached[completeField]; complete && !mark.Healing() {
		return b.answer(account, cached), nil
	}
	read, err := b.fromDatabase(ctx, account)
	if err != nil {
		return nil, err
	}
	entries := make([]coherence.CacheEntry, 0, len(read)+1)
	for _, balance := range read {
		entries = append(entries, cacheEntry(balance))
	}
	if mark.Healing() {
		return b.answer(account, newerOf(cached, entries)), nil
	}
	entries = append(entries, coherence.CacheEntry{Field: completeField})
	// Fenced by the heal mark read with the hash: what was read here may
	// predate a loss of Redis writes, and must not fill a hash after a heal
	// began, when nothing would refill it.
	fills, err := b.cache.FillManyIfMarked(ctx, BalancesTable, key, mark, entries)
	if errors.Is(err, coherence.ErrFenced) {
		return b.answer(account, newerOf(cached, entries)), nil
	}
	if err != nil {
		b.warnCache("balance cache fill failed; answering unavailable", account, err)
		return nil, fmt.Errorf("%w: balance cache: %w", orders.ErrUnavailable, err)
	}
	for _, fill := range fills {
		cached[fill.Held.Field] = fill.Held
	}
	return b.answer(account, cached), nil
}

// newerOf adds to cached, field by field, the entries newer than what it
// holds: the answer a reader that does not fill the cache gives.
func newerOf(cached map[string]coherence.CacheEntry, entries []coherence.CacheEntry) map[string]coherence.CacheEntry {
	for _, entry := range entries {
		if held, ok := cached[entry.Field]; !ok || held.Version < entry.Version {
			cached[entry.Field] = entry
		}
	}
	return cached
}

func (b *Balances) fromDatabase(ctx context.Context, account string) ([]orders.Balance, error) {
	read, err := b.db.Of(ctx, account)
	if err != nil {
		return nil, fmt.Errorf("%w: balances of %s: %w", orders.ErrUnavailable, account, err)
	}
	for i := range read {
		if read[i].Held == "" { // a reader without the held part: nothing held
			read[i].Held = zeroLike(read[i].Available)
		}
	}
	return read, nil
}

// balancesOf turns cache entries into balances sorted by asset, leaving out
// the marker.
func balancesOf(entries map[string]coherence.CacheEntry) []orders.Balance {
	balances := make([]orders.Balance, 0, len(entries))
	for field, entry := range entries {
		if field == completeField {
			continue
		}
		available, held := parseCacheValue(entry.Value)
		balances = append(balances, orders.Balance{Asset: field, Available: available, Held: held, Version: entry.Version})
	}
	slices.SortFunc(balances, func(a, b orders.Balance) int { return strings.Compare(a.Asset, b.Asset) })
	return balances
}

// cacheEntry is a balance as its account's cache hash holds it.
func cacheEntry(balance orders.Balance) coherence.CacheEntry {
	return coherence.CacheEntry{Field: balance.Asset, Version: balance.Version, Value: cacheValue(balance)}
}

// cacheValue is a balance's cached value after its version: "<available>
// <held>". A balance read without its held part (a reader that predates
// it) caches held as zero.
func cacheValue(balance orders.Balance) string {
	held := balance.Held
	if held == "" {
		held = zeroLike(balance.Available)
	}
	return balance.Available + " " + held
}

// parseCacheValue splits a cached value. A value cached before balances
// had a held part is "<available>" alone: nothing was held before the
// market, and the first change after it caches both, so its held is zero.
func parseCacheValue(value string) (available, held string) {
	available, held, found := strings.Cut(value, " ")
	if !found || held == "" {
		held = zeroLike(available)
	}
	return available, held
}

// zeroLike is zero with as many decimals as amount, which has at least
// its asset's: "1.50000000" → "0.00000000".
func zeroLike(amount string) string {
	if _, fraction, found := strings.Cut(amount, "."); found {
		return "0." + strings.Repeat("0", len(fraction))
	}
	return "0"
}
