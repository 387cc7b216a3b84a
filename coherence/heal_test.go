package coherence_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// heal begins and ends a heal of table on the server rdb reaches and fails
// the test unless both are done.
func heal(t testing.TB, client *coherence.Client, table string) coherence.CacheServer {
	t.Helper()
	ctx := context.Background()
	server, err := client.CacheServer(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	if begun, err := client.BeginHeal(ctx, table, server.Identity, "token", time.Minute); err != nil || !begun {
		t.Fatalf("begin heal: %v, %v", begun, err)
	}
	if ended, err := client.EndHeal(ctx, table, server.Identity, "token"); err != nil || !ended {
		t.Fatalf("end heal: %v, %v", ended, err)
	}
	return server
}

// TestAHealIsBegunAndEndedOnOneServerByOneHealer: a new server's cache was
// never healed; a heal names the server it heals and holds a lease another
// healer cannot take; while it runs the mark says so; its end marks the
// cache healed on the server.
func TestAHealIsBegunAndEndedOnOneServerByOneHealer(t *testing.T) {
	ctx := context.Background()
	client := coherence.New(testserver.QueueRedis(t))
	server, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if server.Identity == "" || server.Mark != "" || server.Healed() {
		t.Fatalf("a new server: %+v; want an identity, never healed", server)
	}
	steps := []struct {
		name     string
		move     func() (bool, error)
		done     bool
		healing  bool
		healedOn bool
	}{
		{"begin on another server", func() (bool, error) {
			return client.BeginHeal(ctx, "healtest", "0123:4567", "first", time.Minute)
		}, false, false, false},
		{"begin", func() (bool, error) { return client.BeginHeal(ctx, "healtest", server.Identity, "first", time.Minute) }, true, true, false},
		{"begin by another healer", func() (bool, error) {
			return client.BeginHeal(ctx, "healtest", server.Identity, "second", time.Minute)
		}, false, true, false},
		{"renew", func() (bool, error) { return client.BeginHeal(ctx, "healtest", server.Identity, "first", time.Minute) }, true, true, false},
		{"end on another server", func() (bool, error) { return client.EndHeal(ctx, "healtest", "0123:4567", "first") }, false, true, false},
		{"begin again after the lease was given up", func() (bool, error) {
			return client.BeginHeal(ctx, "healtest", server.Identity, "second", time.Minute)
		}, true, true, false},
		{"end", func() (bool, error) { return client.EndHeal(ctx, "healtest", server.Identity, "second") }, true, false, true},
	}
	for _, step := range steps {
		done, err := step.move()
		if err != nil || done != step.done {
			t.Fatalf("%s: %v, %v; want %v", step.name, done, err, step.done)
		}
		now, err := client.CacheServer(ctx, "healtest")
		if err != nil {
			t.Fatal(err)
		}
		if now.Mark.Healing() != step.healing || now.Healed() != step.healedOn {
			t.Errorf("after %s: mark %q; want healing %v, healed %v", step.name, now.Mark, step.healing, step.healedOn)
		}
	}
}

// TestARestartedServerIsNotHealed: the mark survives a restart with the rest
// of the data (AOF), but names the server process before it, so the cache,
// which may have lost the AOF's tail, is not taken for healed.
func TestARestartedServerIsNotHealed(t *testing.T) {
	ctx := context.Background()
	redisServer := testserver.StartRedis(t, testserver.WithRedisConfig("appendonly", "yes"))
	client := coherence.New(redisServer.Client(t))
	before := heal(t, client, "healtest")
	redisServer.Restart(t)
	after, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Mark) != before.Identity || after.Identity == before.Identity || after.Healed() {
		t.Errorf("after a restart: %+v; want the mark of %s kept and not healed", after, before.Identity)
	}
}

// TestAServerPromotedAgainIsNotHealed: A is healed; B, its replica, is
// promoted without a heal finishing on it; A follows B (taking B's copy and
// its mark, which names A) and is promoted again. A's process never
// restarted, yet its copy is B's: the promotion makes it a new identity.
func TestAServerPromotedAgainIsNotHealed(t *testing.T) {
	ctx := context.Background()
	a, b := testserver.StartRedis(t), testserver.StartRedis(t)
	aClient, bClient := a.Client(t), b.Client(t)
	b.Follow(t, a)
	client := coherence.New(aClient)
	first := heal(t, client, "healtest")
	if n, err := aClient.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	if err := bClient.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	a.Follow(t, b)
	if err := aClient.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	again, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Mark) != first.Identity || again.Identity == first.Identity || again.Healed() {
		t.Errorf("A promoted again: %+v; want the mark of %s and not healed", again, first.Identity)
	}
}

// TestAFillIsFencedByAHealThatBeganSinceItsRead: a reader's fill carries the
// mark it read beside the hash; a heal begun since refuses it whole.
func TestAFillIsFencedByAHealThatBeganSinceItsRead(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	key := coherence.CacheKey("healtest", "ACC_1")
	entries := []coherence.CacheEntry{{Field: "USD", Version: 3, Value: "1"}, {Field: "~complete"}}
	_, mark, err := client.ReadCacheMarked(ctx, "healtest", key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.FillManyIfMarked(ctx, "healtest", key, mark, entries); err != nil {
		t.Fatalf("a fill with the mark unchanged: %v", err)
	}
	_, mark, err = client.ReadCacheMarked(ctx, "healtest", key)
	if err != nil {
		t.Fatal(err)
	}
	server, err := client.CacheServer(ctx, "healtest")
	if err != nil {
		t.Fatal(err)
	}
	if begun, err := client.BeginHeal(ctx, "healtest", server.Identity, "token", time.Minute); err != nil || !begun {
		t.Fatal(begun, err)
	}
	newer := []coherence.CacheEntry{{Field: "USD", Version: 4, Value: "2"}}
	if _, err := client.FillManyIfMarked(ctx, "healtest", key, mark, newer); !errors.Is(err, coherence.ErrFenced) {
		t.Errorf("a fill after a heal began: %v; want ErrFenced", err)
	}
	if held, err := rdb.HGet(ctx, key, "USD").Result(); err != nil || held != "3 1" {
		t.Errorf("USD holds %q, %v; want the fill before the heal", held, err)
	}
}

// TestScanCacheListsEveryCacheKeyOfTheTable: every key of the table, over
// many pages, and nothing else: not the heal mark or lease, not another
// table's keys.
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
	if begun, err := client.BeginHeal(ctx, "scantest", server.Identity, "token", time.Minute); err != nil || !begun {
		t.Fatal(begun, err)
	}
	got := map[string]bool{}
	pages := 0
	err = client.ScanCache(ctx, "scantest", server.Identity, func(ids []string) error {
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
