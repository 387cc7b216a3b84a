package coherence_test

import (
	"context"
	"maps"
	"strconv"
	"testing"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/internal/testserver"
)

// TestCacheServerSaysWhereTheCacheWasHealed: a new server's cache was never
// healed; a mark naming another server is refused; the server's own run id
// marks it healed.
func TestCacheServerSaysWhereTheCacheWasHealed(t *testing.T) {
	ctx := context.Background()
	client := coherence.New(testserver.QueueRedis(t))
	server, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if server.RunID == "" || server.HealedOn != "" || server.Healed() {
		t.Fatalf("a new server: %+v; want a run id, never healed", server)
	}
	if marked, err := client.MarkCacheHealed(ctx, "healtest", "0123456789abcdef"); err != nil || marked {
		t.Errorf("marking another server's run id: %v, %v; want refused", marked, err)
	}
	if marked, err := client.MarkCacheHealed(ctx, "healtest", server.RunID); err != nil || !marked {
		t.Fatalf("marking the server's run id: %v, %v; want marked", marked, err)
	}
	if again, err := client.CacheServer(ctx, "healtest"); err != nil || !again.Healed() || again.RunID != server.RunID {
		t.Errorf("after the mark: %+v, %v; want healed on %s", again, err, server.RunID)
	}
}

// TestARestartedServerIsNotHealed: the mark survives a restart with the rest
// of the data (AOF), but names the server process before it, so the cache,
// which may have lost the AOF's tail, is not taken for healed.
func TestARestartedServerIsNotHealed(t *testing.T) {
	ctx := context.Background()
	redisServer := testserver.StartRedis(t, testserver.WithRedisConfig("appendonly", "yes"))
	client := coherence.New(redisServer.Client(t))
	before, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if marked, err := client.MarkCacheHealed(ctx, "healtest", before.RunID); err != nil || !marked {
		t.Fatalf("mark: %v, %v", marked, err)
	}
	redisServer.Restart(t)
	after, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if after.HealedOn != before.RunID || after.RunID == before.RunID || after.Healed() {
		t.Errorf("after a restart: %+v; want the mark of %s kept and not healed", after, before.RunID)
	}
}

// TestScanCacheListsEveryCacheKeyOfTheTable: every key of the table, over
// many pages, and nothing else: not the heal mark, not another table's keys.
func TestScanCacheListsEveryCacheKeyOfTheTable(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	want := map[string]bool{}
	pipe := rdb.Pipeline()
	for i := range 1_234 {
		id := "ACC_" + strconv.Itoa(i)
		want[id] = true
		pipe.HSet(ctx, coherence.CacheKey("scantest", id), "USD", "1 1")
	}
	pipe.HSet(ctx, coherence.CacheKey("othertable", "ACC_0"), "USD", "1 1")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	server, err := client.CacheServer(ctx, "scantest")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.MarkCacheHealed(ctx, "scantest", server.RunID); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	pages := 0
	err = client.ScanCache(ctx, "scantest", func(ids []string) error {
		pages++
		for _, id := range ids {
			got[id] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Errorf("scan listed %d ids, want the %d keys of the table", len(got), len(want))
		for id := range got {
			if !want[id] {
				t.Errorf("listed %q, which is no cache key of the table", id)
			}
		}
	}
	if pages < 2 {
		t.Errorf("%d pages for %d keys; the test means to cover several", pages, len(want))
	}
}
