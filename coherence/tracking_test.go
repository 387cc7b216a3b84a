package coherence_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// newTracking is a Tracking on srv, closed at cleanup.
func newTracking(t testing.TB, srv *testserver.Redis, config coherence.TrackingConfig) *coherence.Tracking {
	t.Helper()
	tracking, err := coherence.NewTracking(&redis.Options{Addr: srv.Addr}, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracking.Close() })
	return tracking
}

func get(t testing.TB, rdb *redis.Client, key string) string {
	t.Helper()
	value, err := rdb.Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return value
}

// A read is answered from the local copy until another client writes the
// key; then the copy is invalidated and the next read sees the write.
func TestTrackingServesTheLocalCopyUntilAWriteInvalidatesIt(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartRedis(t)
	writer := srv.Client(t)
	registry := prometheus.NewRegistry()
	tracking := newTracking(t, srv, coherence.TrackingConfig{Metrics: registry})
	if err := writer.Set(ctx, "k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	reader := tracking.Client()
	for range 3 {
		if got := get(t, reader, "k"); got != "1" {
			t.Fatalf("read %q, want 1", got)
		}
	}
	if stats := tracking.Stats(); stats.Misses != 1 || stats.Hits != 2 || stats.Entries != 1 {
		t.Errorf("after three reads: %+v, want one miss, two hits, one entry", stats)
	}
	if err := writer.Set(ctx, "k", "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the write reaches the local copy", func() bool { return get(t, reader, "k") == "2" })
	if stats := tracking.Stats(); stats.Invalidations != 1 || stats.Flushes != 0 {
		t.Errorf("after the write: %+v, want one invalidation and no flush", stats)
	}
	if got := counterOf(t, registry, "coherence_tracking_invalidations_total", ""); got != 1 {
		t.Errorf("coherence_tracking_invalidations_total = %v, want 1", got)
	}
}

// trackingConnections are the ids of the clients with tracking on.
func trackingConnections(t testing.TB, admin *redis.Client) []string {
	t.Helper()
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		var id, flags string
		for _, field := range strings.Fields(line) {
			if value, ok := strings.CutPrefix(field, "id="); ok {
				id = value
			}
			if value, ok := strings.CutPrefix(field, "flags="); ok {
				flags = value
			}
		}
		if strings.Contains(flags, "t") {
			ids = append(ids, id)
		}
	}
	return ids
}

// The connections that carry the invalidations dropping (CLIENT KILL) or
// the server restarting flushes the whole copy: a write made while no
// invalidation could reach the process is read, never the value before it.
func TestTrackingFlushesWhenItsInvalidationsCannotArrive(t *testing.T) {
	for _, lose := range []struct {
		name string
		do   func(t *testing.T, srv *testserver.Redis, admin *redis.Client)
	}{
		{"client kill", func(t *testing.T, srv *testserver.Redis, admin *redis.Client) {
			ids := trackingConnections(t, admin)
			if len(ids) == 0 {
				t.Fatal("no connection has tracking on")
			}
			for _, id := range ids {
				n, _ := strconv.ParseInt(id, 10, 64)
				if err := admin.ClientKillByFilter(context.Background(), "ID", strconv.FormatInt(n, 10)).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"server restart", func(t *testing.T, srv *testserver.Redis, _ *redis.Client) { srv.Restart(t) }},
	} {
		t.Run(lose.name, func(t *testing.T) {
			ctx := context.Background()
			srv := testserver.StartRedis(t)
			admin := srv.Client(t)
			tracking := newTracking(t, srv, coherence.TrackingConfig{})
			reader := tracking.Client()
			if err := admin.Set(ctx, "k", "before", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if got := get(t, reader, "k"); got != "before" {
				t.Fatalf("read %q", got)
			}
			lose.do(t, srv, admin)
			eventually(t, 5*time.Second, "the copy is flushed", func() bool { return tracking.Stats().Flushes > 0 })
			// Written after the tracking connections went: no invalidation
			// of it can have reached the process.
			eventually(t, 5*time.Second, "the write is made", func() bool { return admin.Set(ctx, "k", "after", 0).Err() == nil })
			if got := get(t, reader, "k"); got != "after" {
				t.Errorf("after the flush the copy answered %q, want the write made while invalidations could not arrive", got)
			}
		})
	}
}

// Under a write storm on one key, a read that begins after an
// invalidation was applied never answers a value written before it: the
// invalidation removes the entry, and a read in flight while it came is
// not kept.
func TestTrackingNeverServesOlderThanTheLastInvalidation(t *testing.T) {
	ctx := context.Background()
	srv := testserver.StartRedis(t)
	writer := srv.Client(t)
	var written, floor atomic.Int64
	tracking := newTracking(t, srv, coherence.TrackingConfig{OnInvalidate: func(key string) func() {
		// Every write acknowledged as the invalidation arrives was made
		// before it; a read that begins once it is applied sees them.
		acknowledged := written.Load()
		return func() {
			if key == "k" {
				floor.Store(acknowledged)
			}
		}
	}})
	if err := writer.Set(ctx, "k", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	reader := tracking.Client()
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads, older atomic.Int64
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				least := floor.Load()
				value, err := reader.Get(ctx, "k").Int64()
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				if value < least {
					older.Add(1)
					t.Errorf("read %d after the invalidation applied past write %d", value, least)
				}
			}
		})
	}
	for i := int64(1); i <= 3000; i++ {
		if err := writer.Set(ctx, "k", i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		written.Store(i)
	}
	eventually(t, time.Second, "the last write reaches the local copy", func() bool { return get(t, reader, "k") == "3000" })
	close(stop)
	readers.Wait()
	stats := tracking.Stats()
	if stats.Invalidations == 0 || stats.Hits == 0 {
		t.Errorf("%d reads: %+v; want both hits and invalidations", reads.Load(), stats)
	}
	t.Logf("%d reads, %+v", reads.Load(), stats)
}

// Every entry expires within the TTL even without a write.
func TestTrackingEntriesExpire(t *testing.T) {
	srv := testserver.StartRedis(t)
	if err := srv.Client(t).Set(context.Background(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	tracking := newTracking(t, srv, coherence.TrackingConfig{TTL: 100 * time.Millisecond})
	get(t, tracking.Client(), "k")
	get(t, tracking.Client(), "k")
	time.Sleep(120 * time.Millisecond)
	get(t, tracking.Client(), "k")
	if stats := tracking.Stats(); stats.Misses != 2 || stats.Hits != 1 {
		t.Errorf("%+v, want a hit before the expiry and a miss after it", stats)
	}
}

// Options taken from a client already in use (as the gateway takes its
// queue client's) make a working copy, RESP2 ones included; a database
// other than 0, which go-redis does not track, is refused rather than
// silently read from Redis every time.
func TestTrackingFromAnotherClientsOptions(t *testing.T) {
	srv := testserver.StartRedis(t)
	for _, query := range []string{"", "?protocol=2"} {
		t.Run("url"+query, func(t *testing.T) {
			ctx := context.Background()
			options, err := redis.ParseURL("redis://" + srv.Addr + query)
			if err != nil {
				t.Fatal(err)
			}
			used := redis.NewClient(options)
			defer used.Close()
			if err := used.Set(ctx, "k", "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			tracking, err := coherence.NewTracking(used.Options(), coherence.TrackingConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer tracking.Close()
			for range 3 {
				get(t, tracking.Client(), "k")
			}
			if stats := tracking.Stats(); stats.Hits != 2 {
				t.Errorf("%+v, want the repeats answered from the local copy", stats)
			}
		})
	}
	if _, err := coherence.NewTracking(&redis.Options{Addr: srv.Addr, DB: 1}, coherence.TrackingConfig{}); err == nil {
		t.Error("a copy of database 1 was made")
	}
}
