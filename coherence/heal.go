package coherence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/lua"
)

// What heals a cache after Redis loses writes (docs/durability.md, "Cached
// balances after Redis loses writes"): a cache filled on one server and then
// served by another (a promoted replica, a restart from a snapshot or an AOF
// that lost its tail) may hold older versions than readers already saw, and
// no fill is coming to replace them. The heal mark, kept beside the cache,
// names the server identity the cache was last healed on; CacheServer tells
// a healer when the server is another, BeginHeal marks a heal begun (readers
// then stop trusting whole hashes, and fills that read before it are
// fenced), ScanCache lists what to refill, and EndHeal marks the server
// healed.

// healMarkKey is table's heal mark and healLeaseKey its healer's lease: in
// the table's slot, beside its cache keys, but outside CacheKey's names, so
// ScanCache never lists them.
func healMarkKey(table string) string  { return "ecc:{" + table + "}~healed" }
func healLeaseKey(table string) string { return "ecc:{" + table + "}~healer" }

// cacheServerScript is Repeatable: a second run of a move finds it done and
// answers the same, but for "end", which a lost reply makes answer 0: the
// next check then finds the cache healed and nothing to do.
var cacheServerScript = scriptpipe.Repeatable(lua.CacheServer)

// healingPrefix starts the mark while a heal runs.
const healingPrefix = "healing:"

// HealMark is what a table's heal mark holds: the identity of the server the
// cache was last healed on, "healing:<identity>" while a heal runs, or empty.
type HealMark string

// Healing reports whether a heal of the cache runs: whole hashes may be
// stale until it ends.
func (m HealMark) Healing() bool { return strings.HasPrefix(string(m), healingPrefix) }

// CacheServer is the server holding a table's cache.
type CacheServer struct {
	// Identity is the server's run id and replication id: new with every
	// server process and every promotion.
	Identity string
	// Mark is the table's heal mark on it.
	Mark HealMark
}

// Healed reports whether the cache was healed on the server holding it now.
func (s CacheServer) Healed() bool { return s.Identity != "" && string(s.Mark) == s.Identity }

// CacheServer reports which server holds table's cache and its heal mark.
func (c *Client) CacheServer(ctx context.Context, table string) (CacheServer, error) {
	server, _, err := runCacheServer(ctx, c.rdb, table, "read")
	return server, err
}

// BeginHeal takes (or renews) the lease of table's healer for holder and
// marks a heal of the cache on identity begun, and reports whether it did:
// not when another healer holds the lease or another server holds the cache
// by now. A healer renews it before the lease runs out, or another takes
// over.
func (c *Client) BeginHeal(ctx context.Context, table, identity, holder string, lease time.Duration) (bool, error) {
	_, done, err := runCacheServer(ctx, c.rdb, table, "begin", identity, holder, strconv.FormatInt(lease.Milliseconds(), 10))
	return done, err
}

// EndHeal gives up holder's lease and marks table's cache healed on
// identity, and reports whether it did: not when another server holds the
// cache by now, or another heal began since (it needs healing in turn).
func (c *Client) EndHeal(ctx context.Context, table, identity, holder string) (bool, error) {
	_, done, err := runCacheServer(ctx, c.rdb, table, "end", identity, holder)
	return done, err
}

func runCacheServer(ctx context.Context, rdb redis.UniversalClient, table, move string, args ...string) (CacheServer, bool, error) {
	argv := make([]any, 0, 1+len(args))
	argv = append(argv, move)
	for _, arg := range args {
		argv = append(argv, arg)
	}
	reply, err := cacheServerScript.Run(ctx, rdb, []string{healMarkKey(table), healLeaseKey(table)}, argv...).Slice()
	if err != nil {
		return CacheServer{}, false, fmt.Errorf("coherence: cache server of %s: %s: %w", table, move, err)
	}
	if len(reply) != 3 {
		return CacheServer{}, false, fmt.Errorf("coherence: cache server of %s: unexpected reply %v", table, reply)
	}
	identity, _ := reply[0].(string)
	mark, _ := reply[1].(string)
	done, _ := reply[2].(int64)
	return CacheServer{Identity: identity, Mark: HealMark(mark)}, done == 1, nil
}

// ReadCacheMarked reads the cache hash key of table as ReadCache does, and
// table's heal mark beside it in the same round trip: a reader that fills
// the hash passes the mark to FillManyIfMarked.
func (c *Client) ReadCacheMarked(ctx context.Context, table, key string) (map[string]CacheEntry, HealMark, error) {
	pipe := c.rdb.Pipeline()
	fields := pipe.HGetAll(ctx, key)
	mark := pipe.Get(ctx, healMarkKey(table))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("coherence: read cache %s: %w", key, err)
	}
	entries, err := parseCacheHash(key, fields.Val())
	return entries, HealMark(mark.Val()), err
}

// ErrFenced: a fill was refused because table's heal mark changed since the
// filler read it: what it read may predate a loss of Redis writes.
var ErrFenced = errors.New("coherence: fill fenced by a heal")

// FillManyIfMarked fills as FillManyIfNewer does, but only while table's
// heal mark is still mark; otherwise it writes nothing and returns
// ErrFenced.
func (c *Client) FillManyIfMarked(ctx context.Context, table, key string, mark HealMark, entries []CacheEntry) ([]CacheFill, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	args, err := fillArgs(key, entries)
	if err != nil {
		return nil, err
	}
	reply, err := cacheFillScript.Run(ctx, c.rdb, []string{key, healMarkKey(table)}, append([]any{string(mark)}, args...)...).Slice()
	if err != nil {
		if strings.HasPrefix(err.Error(), "ECCFENCED") {
			return nil, fmt.Errorf("%w: %s", ErrFenced, key)
		}
		return nil, fmt.Errorf("coherence: fill %s: %w", key, err)
	}
	return parseFills(key, entries, reply)
}

// scanPage is how many keys one SCAN step asks for.
const scanPage = 500

// ScanCache calls page with the ids of table's cache keys (CacheKey(table,
// id)), a page at a time, until every key that existed throughout the scan
// was listed; a key may be listed twice. All of a table's keys share its
// slot, so on a Redis Cluster the scan runs on the node serving that slot,
// which must be the server of identity: a node map not yet updated after a
// failover would scan the old one. An error from page ends the scan with it.
func (c *Client) ScanCache(ctx context.Context, table, identity string, page func(ids []string) error) error {
	var scanner redis.Cmdable = c.rdb
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		node, err := cluster.MasterForKey(ctx, healMarkKey(table))
		if err != nil {
			return fmt.Errorf("coherence: scan %s cache: %w", table, err)
		}
		server, _, err := runCacheServer(ctx, node, table, "read")
		if err != nil || server.Identity != identity {
			cluster.ReloadState(ctx)
			return fmt.Errorf("coherence: scan %s cache: the node of its slot is not the server healed (%s, %v)", table, server.Identity, err)
		}
		scanner = node
	}
	prefix := CacheKey(table, "")
	var cursor uint64
	for {
		keys, next, err := scanner.Scan(ctx, cursor, prefix+"*", scanPage).Result()
		if err != nil {
			return fmt.Errorf("coherence: scan %s cache: %w", table, err)
		}
		if len(keys) > 0 {
			ids := make([]string, len(keys))
			for i, key := range keys {
				ids[i] = strings.TrimPrefix(key, prefix)
			}
			if err := page(ids); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}
