package placement

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/internal/collectors"
	"github.com/ordergate/ordergate/orders"
)

const (
	// CacheHealInterval is how often a healer asks which server holds the
	// balance cache: a loss is noticed within it.
	CacheHealInterval = time.Second
	// cacheHealStraggle is how long after the first pass of a heal the
	// second one starts. A fill that read PostgreSQL before Redis lost its
	// writes may reach the new server after the first pass went by its key
	// (a coherence batch gives up after coherenceTimeout); the second pass
	// refills what such a straggler put back.
	cacheHealStraggle = coherenceTimeout
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
// on which it was last healed (coherence.Client.CacheServer: Redis run ids,
// new with every server process). When they differ it heals: it refills
// every cached account's hash from PostgreSQL, waits for stragglers, refills
// again, and marks the cache healed on that server. Every worker runs one;
// heals are refills by the conditional fill, so two at once cost reads,
// never correctness.
type BalanceCacheHealer struct {
	db       AccountBalances
	cache    *coherence.Client
	log      *slog.Logger
	interval time.Duration
	straggle time.Duration
	metrics  healMetrics
}

// HealerOption configures NewBalanceCacheHealer.
type HealerOption func(*BalanceCacheHealer)

// WithHealTiming sets how often the healer checks the server and how long a
// heal waits between its passes (CacheHealInterval and the coherence
// batch timeout by default); tests shorten them.
func WithHealTiming(interval, straggle time.Duration) HealerOption {
	return func(h *BalanceCacheHealer) { h.interval, h.straggle = interval, straggle }
}

// WithHealMetrics registers the healer's series on registerer.
func WithHealMetrics(registerer prometheus.Registerer) HealerOption {
	return func(h *BalanceCacheHealer) { h.metrics = newHealMetrics(registerer) }
}

// NewBalanceCacheHealer heals the balance cache in cache's Redis from db.
func NewBalanceCacheHealer(db AccountBalances, cache *coherence.Client, log *slog.Logger, opts ...HealerOption) *BalanceCacheHealer {
	if log == nil {
		log = slog.Default()
	}
	h := &BalanceCacheHealer{db: db, cache: cache, log: log, interval: CacheHealInterval, straggle: cacheHealStraggle}
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
// cacheWarningEvery and tried again at the next tick.
func (h *BalanceCacheHealer) Run(ctx context.Context) {
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	var lastWarning time.Time
	for {
		if _, err := h.Heal(ctx); err != nil && ctx.Err() == nil && time.Since(lastWarning) >= cacheWarningEvery {
			lastWarning = time.Now()
			h.log.Warn("balance cache heal failed; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Heal heals the cache if the server holding it is not the one it was last
// healed on, and reports whether it did. A heal that finds the server
// changed again by its end leaves the cache unmarked, for the next one.
func (h *BalanceCacheHealer) Heal(ctx context.Context) (bool, error) {
	server, err := h.cache.CacheServer(ctx, BalancesTable)
	if err != nil {
		return false, err
	}
	if server.Healed() {
		return false, nil
	}
	start := time.Now()
	h.log.Info("balance cache on a server it was not healed on; refilling it from PostgreSQL",
		"server", server.RunID, "healed_on", server.HealedOn)
	h.metrics.heals.Inc()
	refilled, err := h.refill(ctx)
	if err != nil {
		return false, err
	}
	firstPass := time.Since(start)
	h.metrics.firstPass.Set(firstPass.Seconds())
	select {
	case <-ctx.Done():
		return false, context.Cause(ctx)
	case <-time.After(h.straggle):
	}
	again, err := h.refill(ctx)
	if err != nil {
		return false, err
	}
	marked, err := h.cache.MarkCacheHealed(ctx, BalancesTable, server.RunID)
	if err != nil {
		return false, err
	}
	h.log.Info("balance cache healed", "server", server.RunID, "marked", marked,
		"refilled", refilled, "refilled_after_stragglers", again, "first_pass", firstPass)
	return marked, nil
}

// refill fills every cached account's hash with the account's balances as
// PostgreSQL holds them, a scan page at a time, and returns how many fields
// it wrote: the ones that were stale or missing.
func (h *BalanceCacheHealer) refill(ctx context.Context) (int, error) {
	wrote := 0
	err := h.cache.ScanCache(ctx, BalancesTable, func(accounts []string) error {
		balances, err := h.db.OfAccounts(ctx, accounts)
		if err != nil {
			return err
		}
		fills := make(map[string][]coherence.CacheEntry, len(balances))
		for account, list := range balances {
			entries := make([]coherence.CacheEntry, len(list))
			for i, balance := range list {
				entries[i] = coherence.CacheEntry{Field: balance.Asset, Version: balance.Version, Value: cacheValue(balance)}
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
	heals     prometheus.Counter
	refilled  prometheus.Counter
	firstPass prometheus.Gauge
}

func newHealMetrics(registerer prometheus.Registerer) healMetrics {
	return healMetrics{
		heals: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "balance_cache_heals_total",
			Help: "Heals of the balance cache begun because the Redis server holding it was not the one it was last healed on.",
		})),
		refilled: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "balance_cache_heal_refilled_total",
			Help: "Cached balances a heal found stale or missing and refilled from PostgreSQL.",
		})),
		firstPass: collectors.Register(registerer, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "balance_cache_heal_first_pass_seconds",
			Help: "How long the last heal's first refill of the balance cache took: how long a loss stays visible once noticed.",
		})),
	}
}
