package placement

import (
	"context"
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

// CoherenceBatch is the most deliveries (a job's entries each) one apply of
// the balance coherence consumer takes, and the most names the relay puts
// in one job. A batch gathers the deliveries whose handlers wait at the
// same time, so the consumer's worker runs with this concurrency (and
// claims as many at once) for batches to fill under load.
const CoherenceBatch = 64

// BalanceCoherence consumes the balances coherence queues: each job lists
// balances that reached a version, and the cache takes each one by the
// conditional fill, which writes only a version newer than the one it holds:
// the amounts the line carries (a settlement write's, migration 0026), but
// only over an older version cached (a late line must not refill a balance
// Redis lost), or else the balance's current row read from PostgreSQL (a
// line without amounts: a deposit's, a write of a release before). The cache is the only record of what it applied: a
// record elsewhere (PostgreSQL's outbox_applied, before) outlives a cache
// that Redis loses, and then refuses the very refill that would heal it.
//
// Concurrent deliveries share that step; each entry of a job is a delivery
// of its own. Each joins the deliveries waiting for the applier, a goroutine
// that takes up to CoherenceBatch of them at a time and applies them
// together (one read of the balances among them whose lines carry no
// amounts, one cache round trip, one write), then answers each.
// A lone delivery is applied at once: deliveries gather only while a batch
// is in flight, so batches grow with the load and none is held back on a
// timer. A failure answers every delivery of the batch with the error, and
// the jobs they belong to come again, whole, through the queue's retry;
// that is safe because applying is idempotent.
type BalanceCoherence struct {
	db     BalanceRows
	cache  *coherence.Client
	logger *slog.Logger
	// events, when set, takes each refilled balance's balance event, for
	// the account's log.
	events EventLog

	mu sync.Mutex
	// waiting are the deliveries no batch has taken yet, oldest first.
	waiting []*coherenceDelivery
	// applying is set while the applier runs; it ends when nothing waits,
	// and the next delivery starts another.
	applying bool
}

// coherenceDelivery is one entry of a job (or of an Apply) waiting for its
// batch.
type coherenceDelivery struct {
	// ctx is the caller's: a caller that gave up is left out of its batch.
	ctx            context.Context
	name           string
	account, asset string
	version        int64
	// carried is the balance at version as the line carried it; nil for a
	// line without amounts, whose balance is read.
	carried *orders.Balance
	// advanced and err are the answer, set before done is closed.
	advanced bool
	err      error
	done     chan struct{}
}

// BalanceRows reads balances' current rows from their truth, PostgreSQL
// (postgres.Balances).
type BalanceRows interface {
	// Current returns, by name, each named balance's current row (nil: no
	// such balance).
	Current(ctx context.Context, named []orders.BalanceVersion) (map[string]*orders.Balance, error)
}

// CoherenceOption configures NewBalanceCoherence.
type CoherenceOption func(*BalanceCoherence)

// WithBalanceEvents makes the consumer append a balance event to the
// account's log for each balance it refills, after the cache holds it.
func WithBalanceEvents(events EventLog) CoherenceOption {
	return func(c *BalanceCoherence) { c.events = events }
}

// NewBalanceCoherence refreshes the balance cache in cache's Redis from the
// rows db reads.
func NewBalanceCoherence(db BalanceRows, cache *coherence.Client, logger *slog.Logger, opts ...CoherenceOption) *BalanceCoherence {
	if logger == nil {
		logger = slog.Default()
	}
	c := &BalanceCoherence{db: db, cache: cache, logger: logger}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Handle is the emq.Handler of the balances coherence queues. A job lists
// entries, "<name>@<version>" a line (CoherenceJobs); a job of one entry is
// the form every job had before, and jobs of that form still queued when
// the workers are upgraded are read the same way.
//
// The job completes only once every entry is applied: the cache holds the
// balance at the entry's version or a newer one, or the balance does not
// exist. Any failure fails the whole job, and its retry applies every entry
// again, which is safe because applying is idempotent. An entry that is
// not a balance's name@version is logged and skipped, so it does not bury
// the good entries beside it (no retry could make it readable); a job with
// no entry it can read fails permanently.
func (c *BalanceCoherence) Handle(ctx context.Context, claim emq.Claim) error {
	entries, err := c.entriesOf(string(claim.Payload), claim.ID)
	if err != nil {
		return emq.Permanent(err)
	}
	_, err = c.applyEntries(ctx, entries)
	return err
}

// Apply acts on a payload of either form, one "<name>@<version>" or a job's
// list of them: for each entry it takes the amounts the entry carries, or
// else reads the balance's current row, and fills the cache with that if
// the cache holds an older version, and it reports
// whether a fill wrote. A duplicate, or a version that arrives after a
// newer one was cached, writes nothing. Of deliveries of one name applied
// in the same batch only the highest version is read and filled (and
// reports so): the lower ones have nothing left to do.
//
// Two appliers of one name may both fill; the conditional fill keeps the
// newer balance. A redelivery after Redis lost the cache fills again, as it
// should: nothing outside the cache says it was applied.
func (c *BalanceCoherence) Apply(ctx context.Context, payload string) (bool, error) {
	entries, err := c.entriesOf(payload, "")
	if err != nil {
		return false, err
	}
	return c.applyEntries(ctx, entries)
}

// entriesOf reads a payload's entries, one a line, as deliveries without a
// context yet. Malformed entries are logged and left out; it fails with
// ErrOutboxPayload only when none is left.
func (c *BalanceCoherence) entriesOf(payload, job string) ([]*coherenceDelivery, error) {
	var (
		entries   []*coherenceDelivery
		malformed []error
	)
	for line := range strings.Lines(payload) {
		line = strings.TrimSuffix(line, "\n")
		balance, err := parseOutboxPayload(line)
		if err != nil {
			malformed = append(malformed, err)
			continue
		}
		account, asset, ok := parseBalanceName(balance.Name)
		if !ok {
			malformed = append(malformed, fmt.Errorf("%w: %q names no balance", ErrOutboxPayload, line))
			continue
		}
		delivery := &coherenceDelivery{name: balance.Name, account: account, asset: asset, version: balance.Version}
		if balance.Carried {
			delivery.carried = &orders.Balance{Asset: asset, Available: balance.Available, Held: balance.Held, Version: balance.Version}
		}
		entries = append(entries, delivery)
	}
	switch {
	case len(entries) == 0 && len(malformed) == 0:
		return nil, fmt.Errorf("%w: empty payload", ErrOutboxPayload)
	case len(entries) == 0:
		return nil, errors.Join(malformed...)
	}
	for _, err := range malformed {
		c.logger.Error("coherence job entry skipped: it names no balance's version", "job", job, "err", err)
	}
	return entries, nil
}

// applyEntries hands entries to the applier together, so they share
// batches, and waits until each is answered. It reports whether any fill
// wrote; it fails with the first failure, and then the whole job is to be
// retried.
func (c *BalanceCoherence) applyEntries(ctx context.Context, entries []*coherenceDelivery) (bool, error) {
	for _, delivery := range entries {
		delivery.ctx, delivery.done = ctx, make(chan struct{})
	}
	c.mu.Lock()
	c.waiting = append(c.waiting, entries...)
	start := !c.applying
	c.applying = true
	c.mu.Unlock()
	if start {
		go c.applyWaiting()
	}
	advanced := false
	for _, delivery := range entries {
		select {
		case <-delivery.done:
		case <-ctx.Done():
			// The batch may still apply it; the retry then finds it applied.
			return false, fmt.Errorf("orders: apply %s@%d: %w", delivery.name, delivery.version, context.Cause(ctx))
		}
		if delivery.err != nil {
			return false, fmt.Errorf("orders: apply %s@%d: %w", delivery.name, delivery.version, delivery.err)
		}
		advanced = advanced || delivery.advanced
	}
	return advanced, nil
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
		// At one version a line with amounts spares the read.
		if held, ok := latest[delivery.name]; !ok || delivery.version > held.version ||
			delivery.version == held.version && held.carried == nil && delivery.carried != nil {
			latest[delivery.name] = delivery
		}
	}
	deliveries := make([]*coherenceDelivery, 0, len(latest))
	for _, delivery := range latest {
		deliveries = append(deliveries, delivery)
	}
	// Name order keeps the reads' and fills' order the same from run to
	// run, which the tests of batching rely on.
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
// returns the names whose cached balance it advanced.
func (c *BalanceCoherence) apply(ctx context.Context, deliveries []*coherenceDelivery) (map[string]bool, error) {
	if len(deliveries) == 0 {
		return nil, nil
	}
	current := make(map[string]*orders.Balance, len(deliveries))
	advanced := map[string]bool{}
	var carried, unread []*coherenceDelivery
	for _, delivery := range deliveries {
		if delivery.carried != nil {
			carried = append(carried, delivery)
			current[delivery.name] = delivery.carried
			continue
		}
		unread = append(unread, delivery)
	}
	absent, err := c.refresh(ctx, carried, advanced)
	if err != nil {
		return nil, err
	}
	if len(absent) > 0 {
		unread = append(unread, absent...)
		slices.SortFunc(unread, func(a, b *coherenceDelivery) int { return strings.Compare(a.name, b.name) })
	}
	if len(unread) > 0 {
		read, err := c.db.Current(ctx, versionsOf(unread))
		if err != nil {
			return nil, err
		}
		for _, delivery := range unread {
			current[delivery.name] = read[delivery.name]
		}
		if err := c.fill(ctx, unread, current, advanced); err != nil {
			return nil, err
		}
	}
	// After the fill: an event never runs ahead of what GET /v1/balances
	// serves.
	if err := c.announce(ctx, deliveries, current); err != nil {
		return nil, err
	}
	return advanced, nil
}

// refresh writes the amounts the deliveries' lines carry into the cache,
// each only over an older version the cache holds, and returns the
// deliveries whose balance the cache holds nothing of: a line's amounts are
// its write's, and a job can come late (a lease that ran out after its
// fill, a sweep's carry past the dedup window), so after Redis lost the
// balance they could cache it behind PostgreSQL until its next change. The
// caller reads those, which costs a read only after a loss or for a
// balance never cached. Before the lines carried amounts every batch was a
// read, a transaction of PostgreSQL's a write.
func (c *BalanceCoherence) refresh(ctx context.Context, deliveries []*coherenceDelivery, advanced map[string]bool) ([]*coherenceDelivery, error) {
	if c.cache == nil || len(deliveries) == 0 {
		return nil, nil
	}
	fills, of := cacheFills(deliveries, func(d *coherenceDelivery) *orders.Balance { return d.carried })
	refreshed, err := c.cache.RefreshHashesIfNewer(ctx, fills)
	if err != nil {
		return nil, fmt.Errorf("refresh cached balances: %w", err)
	}
	var absent []*coherenceDelivery
	for key, results := range refreshed {
		for i, result := range results {
			switch {
			case result.Absent:
				absent = append(absent, of[key][i])
			case result.Wrote:
				advanced[of[key][i].name] = true
			}
		}
	}
	return absent, nil
}

func versionsOf(deliveries []*coherenceDelivery) []orders.BalanceVersion {
	versions := make([]orders.BalanceVersion, len(deliveries))
	for i, delivery := range deliveries {
		versions[i] = orders.BalanceVersion{Account: delivery.account, Asset: delivery.asset, Version: delivery.version}
	}
	return versions
}

// fill writes the current balances into the cache, each account's hash by
// one conditional fill, every hash in one round trip, and marks in advanced
// the names whose field it wrote.
func (c *BalanceCoherence) fill(ctx context.Context, deliveries []*coherenceDelivery, current map[string]*orders.Balance, advanced map[string]bool) error {
	fills, of := cacheFills(deliveries, func(d *coherenceDelivery) *orders.Balance {
		balance := current[d.name]
		if balance == nil {
			c.logger.Warn("coherence job for a balance that does not exist; nothing to cache",
				"name", d.name, "version", d.version)
		}
		return balance
	})
	if c.cache == nil || len(fills) == 0 {
		return nil
	}
	filled, err := c.cache.FillHashesIfNewer(ctx, fills)
	if err != nil {
		return fmt.Errorf("refresh cached balances: %w", err)
	}
	for key, results := range filled {
		for i, result := range results {
			if result.Wrote {
				advanced[of[key][i].name] = true
			}
		}
	}
	return nil
}

// cacheFills groups the balances of deliveries (balanceOf's; nil: none,
// left out) by their account's cache hash, with the deliveries they are of
// in the same order.
func cacheFills(deliveries []*coherenceDelivery, balanceOf func(*coherenceDelivery) *orders.Balance) (map[string][]coherence.CacheEntry, map[string][]*coherenceDelivery) {
	fills := map[string][]coherence.CacheEntry{}
	of := map[string][]*coherenceDelivery{}
	for _, delivery := range deliveries {
		balance := balanceOf(delivery)
		if balance == nil {
			continue
		}
		key := BalanceCacheKey(delivery.account)
		fills[key] = append(fills[key], cacheEntry(*balance))
		of[key] = append(of[key], delivery)
	}
	return fills, of
}
