package placement

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/internal/collectors"
	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/orders"
)

const (
	// CacheHealInterval is how often a healer asks which server holds the
	// balance cache: a loss is noticed within it.
	CacheHealInterval = time.Second
	// cacheHealLease is how long a healer holds the heal to itself without
	// renewing; it renews with every page. A healer that dies mid-heal
	// leaves the heal to the next one after it.
	cacheHealLease = 30 * time.Second
)

// AccountBalances reads accounts' balances from their truth, PostgreSQL
// (postgres.Balances).
type AccountBalances interface {
	// OfAccounts returns the balances of each account, by account.
	OfAccounts(ctx context.Context, accounts []string) (map[string][]orders.Balance, error)
}

// BalanceCacheHealer refills the balance cache from PostgreSQL when Redis
// has lost writes. Fills are conditional, so a cache never goes back in time
// by a fill; but the server holding it may: a replica promoted before it got
// the newest fills, a restart from a snapshot or an AOF that lost its tail.
// No coherence job is coming for what was lost (its job may be lost too),
// and a balance whose cached version went down would stay there until its
// next change.
//
// Every CacheHealInterval the healer asks which server holds the cache and
// on which it was last healed (coherence.Client.CacheServer: the server's
// run id and replication id, new with every process and every promotion).
// When they differ it heals: it takes the heal's lease and marks the heal
// begun, refills every cached account's hash from PostgreSQL, and marks the
// cache healed on that server. While the mark says a heal runs, readers do
// not trust whole hashes (they read PostgreSQL), and a reader's fill of
// what it read before is fenced off, so nothing stale is put back behind the
// heal. Every worker runs a healer; one at a time heals, by the lease.
type BalanceCacheHealer struct {
	db       AccountBalances
	cache    *coherence.Client
	logger   *slog.Logger
	interval time.Duration
	metrics  healMetrics
	// holder holds the heal's lease: this healer's own, so a heal it began
	// and could not finish it takes up again at once.
	holder string

	mu sync.Mutex
	// reported is the server identity whose need of a heal was logged last:
	// a heal that fails again and again is logged once.
	reported string
}

// HealerOption configures NewBalanceCacheHealer.
type HealerOption func(*BalanceCacheHealer)

// WithHealInterval sets how often the healer checks the server
// (CacheHealInterval by default).
func WithHealInterval(interval time.Duration) HealerOption {
	return func(h *BalanceCacheHealer) { h.interval = interval }
}

// WithHealMetrics registers the healer's series on registerer.
func WithHealMetrics(registerer prometheus.Registerer) HealerOption {
	return func(h *BalanceCacheHealer) { h.metrics = newHealMetrics(registerer) }
}

// NewBalanceCacheHealer heals the balance cache in cache's Redis from db.
func NewBalanceCacheHealer(db AccountBalances, cache *coherence.Client, logger *slog.Logger, opts ...HealerOption) *BalanceCacheHealer {
	if logger == nil {
		logger = slog.Default()
	}
	h := &BalanceCacheHealer{db: db, cache: cache, logger: logger, interval: CacheHealInterval, holder: ulid.Make().String()}
	for _, opt := range opts {
		opt(h)
	}
	if h.metrics.heals == nil {
		h.metrics = newHealMetrics(nil)
	}
	return h
}

// Run checks, and heals when needed, every interval until ctx ends. A
// failure (Redis or PostgreSQL down) is logged at most every
// outage.LogEvery and tried again at the next tick.
func (h *BalanceCacheHealer) Run(ctx context.Context) {
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	var warnings outage.Sparse
	for {
		if _, err := h.Heal(ctx); err != nil && ctx.Err() == nil && warnings.Allow() {
			h.logger.Warn("balance cache heal failed; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Heal heals the cache if the server holding it is not the one it was last
// healed on, and reports whether it did. It does nothing while another
// healer holds the heal, and a heal that finds the server changed by its end
// leaves the cache unhealed, for the next one.
func (h *BalanceCacheHealer) Heal(ctx context.Context) (bool, error) {
	server, err := h.cache.CacheServer(ctx, BalancesTable)
	if err != nil {
		return false, err
	}
	if server.Healed() {
		h.metrics.healed.Set(1)
		return false, nil
	}
	h.metrics.healed.Set(0)
	begun, err := h.cache.BeginHeal(ctx, BalancesTable, server.Identity, h.holder, cacheHealLease)
	if err != nil || !begun {
		return false, err
	}
	h.reportOnce(server)
	h.metrics.heals.Inc()
	start := time.Now()
	refilled, err := h.refill(ctx, server.Identity)
	if errors.Is(err, errHealTaken) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	healed, err := h.cache.EndHeal(ctx, BalancesTable, server.Identity, h.holder)
	if err != nil {
		return false, err
	}
	took := time.Since(start)
	h.metrics.seconds.Set(took.Seconds())
	h.logger.Info("balance cache healed", "server", server.Identity, "marked", healed, "refilled", refilled, "took", took)
	return healed, nil
}

// reportOnce logs that the cache needs a heal, once per server identity.
func (h *BalanceCacheHealer) reportOnce(server coherence.CacheServer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reported == server.Identity {
		return
	}
	h.reported = server.Identity
	h.logger.Info("balance cache on a server it was not healed on; refilling it from PostgreSQL",
		"server", server.Identity, "mark", server.Mark)
}

// errHealTaken: the heal's lease went to another healer, or the server
// changed, in the middle of a refill.
var errHealTaken = errors.New("the balance cache heal was taken over or its server changed")

// refill fills every cached account's hash with the account's balances as
// PostgreSQL holds them, a scan page at a time, renewing the heal's lease
// with each, and returns how many fields it wrote: the ones that were stale
// or missing.
func (h *BalanceCacheHealer) refill(ctx context.Context, identity string) (int, error) {
	wrote := 0
	err := h.cache.ScanCache(ctx, BalancesTable, identity, func(accounts []string) error {
		if held, err := h.cache.BeginHeal(ctx, BalancesTable, identity, h.holder, cacheHealLease); err != nil || !held {
			return cmp.Or(err, errHealTaken)
		}
		balances, err := h.db.OfAccounts(ctx, accounts)
		if err != nil {
			return err
		}
		fills := make(map[string][]coherence.CacheEntry, len(balances))
		for account, list := range balances {
			entries := make([]coherence.CacheEntry, len(list))
			for i, balance := range list {
				entries[i] = cacheEntry(balance)
			}
			fills[BalanceCacheKey(account)] = entries
		}
		filled, err := h.cache.FillHashesIfNewer(ctx, fills)
		for _, results := range filled {
			for _, result := range results {
				if result.Wrote {
					wrote++
				}
			}
		}
		if err != nil {
			return fmt.Errorf("refill cached balances: %w", err)
		}
		return nil
	})
	h.metrics.refilled.Add(float64(wrote))
	return wrote, err
}

// healMetrics are the healer's series.
type healMetrics struct {
	heals    prometheus.Counter
	refilled prometheus.Counter
	seconds  prometheus.Gauge
	healed   prometheus.Gauge
}

func newHealMetrics(registerer prometheus.Registerer) healMetrics {
	return healMetrics{
		heals: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "balance_cache_heals_total",
			Help: "Heals of the balance cache this process began because the Redis server holding it was not the one it was last healed on.",
		})),
		refilled: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "balance_cache_heal_refilled_total",
			Help: "Cached balances a heal found stale or missing and refilled from PostgreSQL.",
		})),
		seconds: collectors.Register(registerer, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "balance_cache_heal_seconds",
			Help: "How long this process's last heal of the balance cache took; readers of whole hashes read PostgreSQL meanwhile.",
		})),
		healed: collectors.Register(registerer, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "balance_cache_healed",
			Help: "1 when the last check found the balance cache healed on the server holding it, 0 when it needed a heal.",
		})),
	}
}
