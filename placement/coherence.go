package placement

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// CoherenceBatch is the most deliveries one apply of the balance coherence
// consumer takes. A batch gathers the deliveries whose handlers wait at the
// same time, so the consumer's worker runs with this concurrency (and claims as many
// at once) for batches to fill under load.
const CoherenceBatch = 64

// BalanceCoherence consumes the balances coherence queue: each job says a
// balance reached a version, and the one conditional step decides whether
// anything is done.
//
// Concurrent deliveries share that step. Each joins the deliveries waiting
// for the applier, a goroutine that takes up to CoherenceBatch of them at a
// time and applies them together (one read, one cache round trip, one write),
// then answers each. A lone delivery is applied at once: deliveries gather
// only while a batch is in flight, so batches grow with the load and none is
// held back on a timer. A failure answers every delivery of the batch with
// the error, and each comes again through the queue's retry; that is safe
// because applying is idempotent.
type BalanceCoherence struct {
	db    AppliedVersions
	cache *coherence.Client
	log   *slog.Logger

	mu sync.Mutex
	// waiting are the deliveries no batch has taken yet, oldest first.
	waiting []*coherenceDelivery
	// applying is set while the applier runs; it ends when nothing waits,
	// and the next delivery starts another.
	applying bool
}

// coherenceDelivery is one Apply waiting for its batch.
type coherenceDelivery struct {
	// ctx is the caller's: a caller that gave up is left out of its batch.
	ctx            context.Context
	name           string
	account, asset string
	version        int64
	// advanced and err are the answer, set before done is closed.
	advanced bool
	err      error
	done     chan struct{}
}

// AppliedVersions records which announced balance versions the cache has
// applied (postgres.AppliedVersions).
type AppliedVersions interface {
	// ReadDue returns, by name, the announced versions newer than the
	// applied one, each with the balance's current row (nil: no balance).
	ReadDue(ctx context.Context, announced []orders.BalanceVersion) (map[string]*orders.Balance, error)
	// Advance records versions as applied where they are newer, and
	// returns the names it advanced.
	Advance(ctx context.Context, applied []orders.BalanceVersion) (map[string]bool, error)
}

// NewBalanceCoherence records applied versions in db and refreshes the
// balance cache in cache's Redis (nil: only the applied versions).
func NewBalanceCoherence(db AppliedVersions, cache *coherence.Client, log *slog.Logger) *BalanceCoherence {
	if log == nil {
		log = slog.Default()
	}
	return &BalanceCoherence{db: db, cache: cache, log: log}
}

// Handle is the emq.Handler of the balances coherence queue. A malformed
// payload fails permanently; a failure to reach PostgreSQL or Redis is
// returned for a retry.
func (c *BalanceCoherence) Handle(ctx context.Context, claim emq.Claim) error {
	_, err := c.Apply(ctx, string(claim.Payload))
	if errors.Is(err, ErrOutboxPayload) {
		return emq.Permanent(err)
	}
	return err
}

// Apply acts on one "<name>@<version>" announcement only if the version is
// newer than the last one applied for the name, and reports whether it was.
// Acting means refreshing the cached balance from PostgreSQL with a
// conditional fill and recording the version in outbox_applied. A
// duplicate, or a version that arrives after a newer one, changes nothing.
// Of deliveries of one name applied in the same batch only the highest
// version acts (and reports so): the lower ones have nothing left to do.
//
// The cache is filled before the applied version is written: were the
// version recorded first and the fill then lost, a retry would find the
// version applied and the cache would keep the old balance until the next
// change. The other way round, a fill whose write fails is harmless: it
// wrote a committed balance, and the retry fills the same or a newer one.
// Two appliers of one name may both fill for the same reason; the
// conditional fill keeps the newer balance, and the write's version check
// records the version once.
func (c *BalanceCoherence) Apply(ctx context.Context, payload string) (bool, error) {
	name, version, err := parseOutboxPayload(payload)
	if err != nil {
		return false, err
	}
	account, asset, ok := parseBalanceName(name)
	if !ok {
		return false, fmt.Errorf("%w: %q names no balance", ErrOutboxPayload, payload)
	}
	delivery := &coherenceDelivery{
		ctx: ctx, name: name, account: account, asset: asset, version: version, done: make(chan struct{}),
	}
	c.mu.Lock()
	c.waiting = append(c.waiting, delivery)
	start := !c.applying
	c.applying = true
	c.mu.Unlock()
	if start {
		go c.applyWaiting()
	}
	select {
	case <-delivery.done:
	case <-ctx.Done():
		// The batch may still apply it; the retry then finds it applied.
		return false, fmt.Errorf("orders: apply %s: %w", payload, context.Cause(ctx))
	}
	if delivery.err != nil {
		return false, fmt.Errorf("orders: apply %s: %w", payload, delivery.err)
	}
	return delivery.advanced, nil
}

// applyWaiting is the applier: it applies what waits, a batch at a time,
// until nothing does.
func (c *BalanceCoherence) applyWaiting() {
	for {
		c.mu.Lock()
		n := min(len(c.waiting), CoherenceBatch)
		if n == 0 {
			c.applying = false
			c.waiting = nil
			c.mu.Unlock()
			return
		}
		// The full slice expression keeps later appends to waiting off
		// the batch's elements.
		batch := c.waiting[:n:n]
		c.waiting = c.waiting[n:]
		c.mu.Unlock()
		c.applyBatch(batch)
	}
}

// applyBatch applies a batch and answers each of its deliveries.
func (c *BalanceCoherence) applyBatch(batch []*coherenceDelivery) {
	// Of each name only the highest version delivered is applied: the rest
	// would change nothing after it, and one statement cannot touch a row
	// twice.
	latest := make(map[string]*coherenceDelivery, len(batch))
	for _, delivery := range batch {
		if delivery.ctx.Err() != nil {
			continue
		}
		if held, ok := latest[delivery.name]; !ok || delivery.version > held.version {
			latest[delivery.name] = delivery
		}
	}
	deliveries := make([]*coherenceDelivery, 0, len(latest))
	for _, delivery := range latest {
		deliveries = append(deliveries, delivery)
	}
	// Every applier locks outbox_applied rows in name order, so two
	// batches sharing names (the venue's balances are in nearly every
	// one) wait for each other instead of deadlocking.
	slices.SortFunc(deliveries, func(a, b *coherenceDelivery) int { return strings.Compare(a.name, b.name) })

	// Not the callers' contexts: the batch is theirs together, and one
	// caller leaving must not fail the others.
	ctx, cancel := context.WithTimeout(context.Background(), coherenceTimeout)
	advanced, err := c.apply(ctx, deliveries)
	cancel()
	for _, delivery := range batch {
		switch {
		case latest[delivery.name] != delivery && delivery.ctx.Err() != nil:
			delivery.err = context.Cause(delivery.ctx)
		default:
			delivery.err = err
			delivery.advanced = err == nil && advanced[delivery.name] && latest[delivery.name] == delivery
		}
		close(delivery.done)
	}
}

// apply acts on deliveries, at most one per name, sorted by name, and
// returns the names whose applied version it advanced.
func (c *BalanceCoherence) apply(ctx context.Context, deliveries []*coherenceDelivery) (map[string]bool, error) {
	if len(deliveries) == 0 {
		return nil, nil
	}
	due, err := c.readDue(ctx, deliveries)
	if err != nil {
		return nil, err
	}
	if len(due) == 0 {
		return nil, nil
	}
	if c.cache != nil {
		if err := c.fill(ctx, due); err != nil {
			return nil, err
		}
	}
	return c.advance(ctx, due)
}

// dueBalance is a delivery newer than its name's applied version, with the
// balance as PostgreSQL holds it now (none when there is no such balance).
type dueBalance struct {
	delivery *coherenceDelivery
	balance  *orders.Balance
}

// readDue returns the deliveries whose version is newer than their name's
// applied one, each with its balance's current row, in the deliveries' order.
func (c *BalanceCoherence) readDue(ctx context.Context, deliveries []*coherenceDelivery) ([]dueBalance, error) {
	due, err := c.db.ReadDue(ctx, versionsOf(deliveries))
	if err != nil {
		return nil, err
	}
	var list []dueBalance
	for _, delivery := range deliveries {
		if balance, ok := due[delivery.name]; ok {
			list = append(list, dueBalance{delivery: delivery, balance: balance})
		}
	}
	return list, nil
}

func versionsOf(deliveries []*coherenceDelivery) []orders.BalanceVersion {
	versions := make([]orders.BalanceVersion, len(deliveries))
	for i, delivery := range deliveries {
		versions[i] = orders.BalanceVersion{Account: delivery.account, Asset: delivery.asset, Version: delivery.version}
	}
	return versions
}

// fill writes the due balances into the cache, each account's hash by one
// conditional fill, every hash in one round trip.
func (c *BalanceCoherence) fill(ctx context.Context, due []dueBalance) error {
	fills := map[string][]coherence.CacheEntry{}
	for _, entry := range due {
		if entry.balance == nil {
			c.log.Warn("coherence job for a balance that does not exist; nothing to cache",
				"name", entry.delivery.name, "version", entry.delivery.version)
			continue
		}
		key := BalanceCacheKey(entry.delivery.account)
		fills[key] = append(fills[key], coherence.CacheEntry{Field: entry.balance.Asset, Version: entry.balance.Version, Value: cacheValue(*entry.balance)})
	}
	if err := c.cache.FillHashesIfNewer(ctx, fills); err != nil {
		return fmt.Errorf("refresh cached balances: %w", err)
	}
	return nil
}

// advance records the due versions as applied, in the deliveries' (name)
// order, and returns the names it advanced.
func (c *BalanceCoherence) advance(ctx context.Context, due []dueBalance) (map[string]bool, error) {
	deliveries := make([]*coherenceDelivery, len(due))
	for i, entry := range due {
		deliveries[i] = entry.delivery
	}
	return c.db.Advance(ctx, versionsOf(deliveries))
}
