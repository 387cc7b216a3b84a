package coherence

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// The tracking mode (server-assisted client-side caching): a process keeps
// a bounded local copy of what it read from Redis, and Redis pushes an
// invalidation (RESP3 CLIENT TRACKING) when a key it read changes. The
// copy is go-redis's own client-side cache (Options.ClientSideCacheConfig)
// in its default tracking mode: each pooled connection tracks the keys read
// on it and carries their invalidations, so only the keys this process read
// are announced to it, and the server's tracking table, not every write of
// a prefix, is the cost. Around it, trackedCache keeps the seeds' rule for
// lost messages, a jittered expiry, and the counts (docs/operations.md,
// "Coherence").
//
// A table in the tracking mode announces a change by writing the item's
// stamp (Client.Touch): every process holding a copy of the stamp drops it,
// and its next read of the stamp sees the change.

// ModeTracking: processes keep a local copy of what they read, and Redis
// invalidates it when a key changes.
const ModeTracking Mode = "tracking"

// StampKey is the key a tracking table's item is stamped under: a counter
// its writers raise with every change (Touch), which readers hold a copy of.
func StampKey(table, id string) string { return CacheKey(table, "stamp:"+id) }

// Touch raises the stamp of table's item id: every process that holds a
// copy of it gets an invalidation and reads the change on its next use.
func (c *Client) Touch(ctx context.Context, table, id string) error {
	if err := c.rdb.Incr(ctx, StampKey(table, id)).Err(); err != nil {
		return fmt.Errorf("coherence: touch %s of %s: %w", id, table, err)
	}
	return nil
}

// Stamp reads the stamp of table's item id: 0 for one never touched. On
// a client made on a Tracking's (New(tracking.Client())) it is answered
// from the local copy until the stamp changes.
func (c *Client) Stamp(ctx context.Context, table, id string) (int64, error) {
	stamp, err := c.rdb.Get(ctx, StampKey(table, id)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("coherence: stamp %s of %s: %w", id, table, err)
	}
	return stamp, nil
}

// ReadCacheTracked reads the cache hash key and table's heal mark as two
// reads, each of which a client made on a Tracking's answers from the
// local copy (a pipeline would go to Redis).
func (c *Client) ReadCacheTracked(ctx context.Context, table, key string) (map[string]CacheEntry, HealMark, error) {
	fields, err := c.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, "", fmt.Errorf("coherence: read cache %s: %w", key, err)
	}
	mark, err := c.rdb.Get(ctx, healMarkKey(table)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("coherence: read heal mark of %s: %w", table, err)
	}
	entries, err := parseCacheHash(key, fields)
	return entries, HealMark(mark), err
}

// The defaults of Tracking.
const (
	// DefaultTrackingEntries bounds the local copy; past it the least
	// recently used entries go.
	DefaultTrackingEntries = 100_000
	// DefaultTrackingTTL is how long an entry is served at most without a
	// read from Redis, a safety net under the invalidations: each entry
	// lives a random 75–100 % of it, so entries read together do not all
	// expire together.
	DefaultTrackingTTL = 30 * time.Second
	// trackingDrainInterval is how often go-redis looks at idle pooled
	// connections for invalidations they carry: what a read from an idle
	// process may lag an invalidation by, at most.
	trackingDrainInterval = time.Millisecond
	// trackingPoolSize caps the copy's client's connections. Its drainer
	// peeks at every idle one each trackingDrainInterval (a recvfrom each):
	// with go-redis's default of 10 a core, the pool grown by a burst of
	// misses (a gateway's streams opening together) cost 14–17 % of the
	// gateway's CPU at 1,000 orders/s. Hits take no connection; misses and
	// stamps' writes are a round trip each, which two connections carry
	// at tens of thousands a second.
	trackingPoolSize = 2
)

// ErrTrackingRefused: the Redis deployment has no single server to track
// with (a Redis Cluster); the reads go to Redis every time instead.
var ErrTrackingRefused = errors.New("coherence: tracking needs one Redis server; a cluster's reads are not copied locally")

// TrackingConfig configures a Tracking.
type TrackingConfig struct {
	// Entries bounds the local copy (DefaultTrackingEntries when 0).
	Entries int
	// TTL bounds how long an entry lives (DefaultTrackingTTL when 0).
	TTL time.Duration
	// Metrics registers the counts (nowhere when nil).
	Metrics prometheus.Registerer
	// OnInvalidate, when set, is called with each key an invalidation
	// names as it arrives; the func it returns, when not nil, once the copy
	// dropped the key (benchmarks and tests time invalidations with it).
	OnInvalidate func(key string) (applied func())
}

// Tracking is a Redis client whose cacheable reads (GET, HGETALL, ...)
// are served from the process's local copy while Redis has not announced
// a change; writes and everything else go to Redis as usual.
type Tracking struct {
	rdb   *redis.Client
	cache *trackedCache
}

// NewTracking connects to the one Redis server of options (RESP3 is
// forced) with a local copy of the reads.
func NewTracking(options *redis.Options, config TrackingConfig) (*Tracking, error) {
	if config.Entries <= 0 {
		config.Entries = DefaultTrackingEntries
	}
	if config.TTL <= 0 {
		config.TTL = DefaultTrackingTTL
	}
	cache, err := newTrackedCache(config)
	if err != nil {
		return nil, err
	}
	// go-redis tracks only database 0 and a fixed identity: anything else
	// would silently leave every read to Redis.
	switch {
	case options.DB != 0:
		return nil, fmt.Errorf("coherence: tracking needs database 0, not %d", options.DB)
	case options.CredentialsProvider != nil || options.CredentialsProviderContext != nil || options.StreamingCredentialsProvider != nil:
		return nil, errors.New("coherence: tracking needs a fixed username and password, not a credentials provider")
	}
	opts := *options
	opts.Protocol = 3
	// Options taken from a client already in use carry its push processor
	// (a void one under RESP2): the copy's client makes its own.
	opts.PushNotificationProcessor = nil
	opts.ClientSideCache = cache
	opts.PoolSize, opts.MinIdleConns = trackingPoolSize, 0
	// go-redis reads the drainer's period from here even beside a cache of
	// its own.
	opts.ClientSideCacheConfig = &redis.ClientSideCacheConfig{DrainInterval: trackingDrainInterval}
	return &Tracking{rdb: redis.NewClient(&opts), cache: cache}, nil
}

// Client is the Redis client whose reads the local copy serves.
func (t *Tracking) Client() *redis.Client { return t.rdb }

// Stats counts what the local copy did.
func (t *Tracking) Stats() TrackingStats { return t.cache.stats() }

// Close closes the client's connections.
func (t *Tracking) Close() error { return t.rdb.Close() }

// TrackingStats counts a local copy's activity.
type TrackingStats struct {
	Hits, Misses uint64
	// Invalidations is the keys Redis announced changed that the copy held.
	Invalidations uint64
	// Flushes is how often the whole copy was dropped: a connection that
	// carried invalidations went away, or the server was flushed.
	Flushes uint64
	// Expired is entries dropped by their expiry, not by an invalidation.
	Expired uint64
	Entries int
}

// trackedCache is the local copy: go-redis's LocalCache, with three
// additions. A connection that goes away (it carried the invalidations of
// what was read on it: dropped, reconnected, or its server restarted)
// flushes the whole copy, not only what was read on it, before any read is
// served again (EvictByConn runs when go-redis removes the connection).
// Every entry expires a random 75–100 % of the TTL after it was read. And
// the copy counts what it does.
type trackedCache struct {
	local *redis.LocalCache
	ttl   time.Duration
	// deadlines holds each entry's expiry, bounded like the copy; an entry
	// whose deadline was evicted from it counts as expired.
	deadlines    *lru.Cache[string, time.Time]
	onInvalidate func(string) func()

	invalidations, flushes, expired atomic.Uint64
	// mu orders flushes with fills: a fill that began before a flush is
	// not kept. fills holds each reservation's epoch, by cache key and
	// the reservation's number go-redis hands out (a late answer to an
	// older reservation of the key must not touch the current one's).
	mu    sync.Mutex
	epoch uint64
	fills map[reservation]uint64

	metrics *trackingMetrics
}

func newTrackedCache(config TrackingConfig) (*trackedCache, error) {
	deadlines, err := lru.New[string, time.Time](config.Entries)
	if err != nil {
		return nil, err
	}
	c := &trackedCache{
		local: redis.NewLocalCache(redis.CacheConfig{
			MaxEntries:    config.Entries,
			DrainInterval: trackingDrainInterval,
			// The hard bound under the jittered expiry.
			MaxStaleness: config.TTL,
		}),
		ttl:          config.TTL,
		deadlines:    deadlines,
		onInvalidate: config.OnInvalidate,
		fills:        map[reservation]uint64{},
	}
	if config.Metrics != nil {
		c.metrics = newTrackingMetrics(config.Metrics, c)
	}
	return c, nil
}

func (c *trackedCache) Get(ctx context.Context, cacheKey string) ([]byte, bool) {
	value, ok := c.local.Get(ctx, cacheKey)
	if !ok {
		return nil, false
	}
	if deadline, known := c.deadlines.Get(cacheKey); !known || !time.Now().Before(deadline) {
		c.local.DeleteByCacheKey(cacheKey)
		c.deadlines.Remove(cacheKey)
		c.expired.Add(1)
		return nil, false
	}
	return value, true
}

// reservation is one fetch of a cache key.
type reservation struct {
	cacheKey string
	number   uint64
}

func (c *trackedCache) Reserve(cacheKey string, redisKeys []string) (uint64, bool) {
	number, fetch := c.local.Reserve(cacheKey, redisKeys)
	if fetch {
		c.mu.Lock()
		c.fills[reservation{cacheKey, number}] = c.epoch
		c.mu.Unlock()
	}
	return number, fetch
}

func (c *trackedCache) FulfillOwned(cacheKey string, number, ownerConnID uint64, value []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	fill := reservation{cacheKey, number}
	began, ok := c.fills[fill]
	delete(c.fills, fill)
	if !ok || began != c.epoch {
		// A flush came while it was read: what was read may predate an
		// invalidation the flush stands for.
		c.local.Cancel(cacheKey, number)
		return false
	}
	// The deadline first: readers waiting for this fill are woken by it.
	// A fill go-redis refuses (its reservation was taken over) leaves the
	// current entry's deadline as it was.
	previous, had := c.deadlines.Peek(cacheKey)
	jitter := time.Duration(rand.Int64N(int64(c.ttl)/4 + 1))
	c.deadlines.Add(cacheKey, time.Now().Add(c.ttl-jitter))
	if c.local.FulfillOwned(cacheKey, number, ownerConnID, value) {
		return true
	}
	if had {
		c.deadlines.Add(cacheKey, previous)
	} else {
		c.deadlines.Remove(cacheKey)
	}
	return false
}

func (c *trackedCache) Cancel(cacheKey string, number uint64) bool {
	c.mu.Lock()
	delete(c.fills, reservation{cacheKey, number})
	c.mu.Unlock()
	return c.local.Cancel(cacheKey, number)
}

func (c *trackedCache) DeleteByRedisKey(redisKey string) int {
	var applied func()
	if c.onInvalidate != nil {
		// go-redis prefixes the key with its database and user.
		applied = c.onInvalidate(redisKey[strings.LastIndexByte(redisKey, 0)+1:])
	}
	removed := c.local.DeleteByRedisKey(redisKey)
	c.invalidations.Add(uint64(removed))
	if applied != nil {
		applied()
	}
	return removed
}

func (c *trackedCache) DeleteByCacheKey(cacheKey string) bool {
	return c.local.DeleteByCacheKey(cacheKey)
}

// EvictByConn flushes the whole copy when the connection held entries: it
// carried the invalidations of what was read on it, and the seeds' rule is
// that a lost invalidation channel leaves nothing behind, not even what
// other connections fetched.
func (c *trackedCache) EvictByConn(connID uint64) int {
	if connID == 0 {
		return 0
	}
	// go-redis also calls this for a connection's first use, which owns
	// nothing: only the loss of one that carried invalidations flushes.
	if c.local.EvictByConn(connID) == 0 {
		return 0
	}
	return c.Flush()
}

func (c *trackedCache) Flush() int {
	c.mu.Lock()
	c.epoch++
	c.mu.Unlock()
	c.flushes.Add(1)
	c.deadlines.Purge()
	return c.local.Flush()
}

func (c *trackedCache) Stats() redis.CSCStats { return c.local.Stats() }

func (c *trackedCache) stats() TrackingStats {
	local := c.local.Stats()
	return TrackingStats{Hits: local.Hits, Misses: local.Misses, Invalidations: c.invalidations.Load(),
		Flushes: c.flushes.Load(), Expired: c.expired.Load(), Entries: local.Entries}
}

// trackingMetrics exports a local copy's counts.
type trackingMetrics struct {
	cache *trackedCache
	descs map[string]*prometheus.Desc
}

func newTrackingMetrics(registerer prometheus.Registerer, cache *trackedCache) *trackingMetrics {
	m := &trackingMetrics{cache: cache, descs: map[string]*prometheus.Desc{
		"hits":          prometheus.NewDesc("coherence_tracking_hits_total", "Reads the local copy answered without asking Redis.", nil, nil),
		"misses":        prometheus.NewDesc("coherence_tracking_misses_total", "Reads the local copy did not hold, sent to Redis.", nil, nil),
		"invalidations": prometheus.NewDesc("coherence_tracking_invalidations_total", "Entries dropped because Redis announced their key changed.", nil, nil),
		"flushes":       prometheus.NewDesc("coherence_tracking_flushes_total", "Whole-copy flushes: a connection carrying invalidations went away, or the server was flushed.", nil, nil),
		"expired":       prometheus.NewDesc("coherence_tracking_expired_total", "Entries dropped by their jittered expiry, not by an invalidation.", nil, nil),
		"entries":       prometheus.NewDesc("coherence_tracking_entries", "Entries the local copy holds.", nil, nil),
	}}
	registerer.MustRegister(m)
	return m
}

func (m *trackingMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, desc := range m.descs {
		ch <- desc
	}
}

func (m *trackingMetrics) Collect(ch chan<- prometheus.Metric) {
	s := m.cache.stats()
	for name, value := range map[string]uint64{"hits": s.Hits, "misses": s.Misses, "invalidations": s.Invalidations,
		"flushes": s.Flushes, "expired": s.Expired} {
		ch <- prometheus.MustNewConstMetric(m.descs[name], prometheus.CounterValue, float64(value))
	}
	ch <- prometheus.MustNewConstMetric(m.descs["entries"], prometheus.GaugeValue, float64(s.Entries))
}
