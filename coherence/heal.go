package coherence

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/lua"
)

// What heals a cache after Redis loses writes (docs/durability.md, "Caches
// after Redis loses writes"): a cache filled on one server and then served
// by another (a promoted replica, a restart from a snapshot or an AOF that
// lost its tail) may hold older versions than readers already saw, and no
// fill is coming to replace them. The heal mark, kept beside the cache,
// names the server the cache was last healed on; CacheServer tells a healer
// when the server is another, ScanCache lists what to refill, and
// MarkCacheHealed records the server once it is done.

// healMarkKey is table's heal mark: in the table's slot, beside its cache
// keys, but outside CacheKey's names, so ScanCache never lists it.
func healMarkKey(table string) string { return "ecc:{" + table + "}~healed" }

// cacheServerScript is Repeatable: it reads, or sets the mark to a value
// that a second run sets again.
var cacheServerScript = scriptpipe.Repeatable(lua.CacheServer)

// CacheServer is the server holding a table's cache.
type CacheServer struct {
	// RunID is the server's run id, new with every server process.
	RunID string
	// HealedOn is the run id of the server the cache was last healed on;
	// empty when it never was (a new or emptied server).
	HealedOn string
}

// Healed reports whether the cache was healed on the server holding it now.
func (s CacheServer) Healed() bool { return s.RunID != "" && s.HealedOn == s.RunID }

// CacheServer reports which server holds table's cache and where the cache
// was last healed.
func (c *Client) CacheServer(ctx context.Context, table string) (CacheServer, error) {
	return c.cacheServer(ctx, table, "")
}

// MarkCacheHealed records that table's cache was healed on the server of
// run id runID, and reports whether it did: not when another server holds
// the cache by now (it needs healing in turn).
func (c *Client) MarkCacheHealed(ctx context.Context, table, runID string) (bool, error) {
	if runID == "" {
		return false, fmt.Errorf("coherence: mark %s healed: no run id", table)
	}
	server, err := c.cacheServer(ctx, table, runID)
	if err != nil {
		return false, err
	}
	return server.RunID == runID && server.Healed(), nil
}

func (c *Client) cacheServer(ctx context.Context, table, healedOn string) (CacheServer, error) {
	reply, err := cacheServerScript.Run(ctx, c.rdb, []string{healMarkKey(table)}, healedOn).Slice()
	if err != nil {
		return CacheServer{}, fmt.Errorf("coherence: cache server of %s: %w", table, err)
	}
	if len(reply) != 2 {
		return CacheServer{}, fmt.Errorf("coherence: cache server of %s: unexpected reply %v", table, reply)
	}
	runID, _ := reply[0].(string)
	mark, _ := reply[1].(string)
	if runID == "" {
		return CacheServer{}, fmt.Errorf("coherence: cache server of %s: the server reports no run id", table)
	}
	return CacheServer{RunID: runID, HealedOn: mark}, nil
}

// scanPage is how many keys one SCAN step asks for.
const scanPage = 500

// ScanCache calls page with the ids of table's cache keys (CacheKey(table,
// id)), a page at a time, until every key that existed throughout the scan
// was listed; a key may be listed twice. All of a table's keys share its
// slot, so on a Redis Cluster the scan runs on the node serving that slot.
// An error from page ends the scan with it.
func (c *Client) ScanCache(ctx context.Context, table string, page func(ids []string) error) error {
	var scanner redis.Cmdable = c.rdb
	if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
		node, err := cluster.MasterForKey(ctx, healMarkKey(table))
		if err != nil {
			return fmt.Errorf("coherence: scan %s cache: %w", table, err)
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
