package coherence_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func eventually(t testing.TB, timeout time.Duration, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCoherenceAddresses(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{coherence.Queue("balances"), "ecc.coh.balances"},
		{coherence.Channel("balances"), "ecc:{balances}:coh"},
		{coherence.CacheKey("balances", "ACC_1"), "ecc:{balances}:ACC_1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

func TestModes(t *testing.T) {
	modes := coherence.Modes{"balances": coherence.ModeJob, "instruments": coherence.ModeBroadcast}
	for _, c := range []struct {
		table string
		want  coherence.Mode
	}{
		{"balances", coherence.ModeJob},
		{"instruments", coherence.ModeBroadcast},
		{"undeclared", coherence.ModeNone},
	} {
		if got := modes.Of(c.table); got != c.want {
			t.Errorf("Of(%q) = %q, want %q", c.table, got, c.want)
		}
	}
	if err := modes.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for name, modes := range map[string]coherence.Modes{
		"unknown mode":   {"balances": "pushing"},
		"brace in table": {"bal{ances}": coherence.ModeJob},
		"empty table":    {"": coherence.ModeJob},
	} {
		if err := modes.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %v", name, modes)
		}
	}
	for _, name := range []string{"none", "broadcast", "job", "tracking"} {
		if mode, err := coherence.ParseMode(name); err != nil || string(mode) != name {
			t.Errorf("ParseMode(%q) = %q, %v", name, mode, err)
		}
	}
	if _, err := coherence.ParseMode("pushing"); err == nil {
		t.Error("ParseMode(pushing) accepted a mode that does not exist")
	}
}

func TestFillIfNewer(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	const key = "ecc:{test}:fill"
	for _, c := range []struct {
		name    string
		stored  string // "" for an absent field
		version int64
		value   string
		wrote   bool
		after   string
	}{
		{"absent field is filled", "", 5, "1.50", true, "5 1.50"},
		{"older stored version is replaced", "4 1.00", 5, "1.50", true, "5 1.50"},
		{"equal version is kept", "5 1.00", 5, "1.50", false, "5 1.00"},
		{"newer stored version is kept", "6 2.00", 5, "1.50", false, "6 2.00"},
		// Compared as digit strings, not as text: 10 is newer than 9.
		{"more digits are newer", "9 9.00", 10, "10.00", true, "10 10.00"},
		{"fewer digits are older", "10 10.00", 9, "9.00", false, "10 10.00"},
		// Beyond 2^53 a float comparison would call these equal.
		{"exact beyond float precision", "9007199254740992 a", 9007199254740993, "b", true, "9007199254740993 b"},
		{"version zero fills an absent field", "", 0, "0", true, "0 0"},
		{"a value without a version is repaired", "garbage", 1, "x", true, "1 x"},
		{"values may hold spaces", "", 3, "a b c", true, "3 a b c"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := rdb.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			if c.stored != "" {
				if err := rdb.HSet(ctx, key, "USD", c.stored).Err(); err != nil {
					t.Fatal(err)
				}
			}
			wrote, err := client.FillIfNewer(ctx, key, "USD", c.version, c.value)
			if err != nil {
				t.Fatalf("FillIfNewer: %v", err)
			}
			if wrote != c.wrote {
				t.Errorf("wrote = %v, want %v", wrote, c.wrote)
			}
			if got := rdb.HGet(ctx, key, "USD").Val(); got != c.after {
				t.Errorf("field holds %q, want %q", got, c.after)
			}
		})
	}
	if _, err := client.FillIfNewer(ctx, key, "USD", -1, "x"); err == nil {
		t.Error("FillIfNewer took a negative version")
	}
}

func TestFillManyIfNewerIsOneStepAndReportsWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	client := coherence.New(testserver.QueueRedis(t))
	key := coherence.CacheKey("test", "many")
	if _, err := client.FillIfNewer(ctx, key, "BTC", 7, "0.5"); err != nil {
		t.Fatal(err)
	}
	fills, err := client.FillManyIfNewer(ctx, key, []coherence.CacheEntry{
		{Field: "BTC", Version: 6, Value: "0.4"},
		{Field: "USD", Version: 2, Value: "10.00"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []coherence.CacheFill{
		{Wrote: false, Held: coherence.CacheEntry{Field: "BTC", Version: 7, Value: "0.5"}},
		{Wrote: true, Held: coherence.CacheEntry{Field: "USD", Version: 2, Value: "10.00"}},
	}
	if fmt.Sprint(fills) != fmt.Sprint(want) {
		t.Errorf("fills = %+v, want %+v", fills, want)
	}
	cached, err := client.ReadCache(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(cached) != 2 || cached["BTC"] != want[0].Held || cached["USD"] != want[1].Held {
		t.Errorf("ReadCache = %+v", cached)
	}
	if fills, err := client.FillManyIfNewer(ctx, key, nil); err != nil || fills != nil {
		t.Errorf("an empty fill = %v, %v; want nothing", fills, err)
	}
}

func TestReadCache(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	empty, err := client.ReadCache(ctx, coherence.CacheKey("test", "absent"))
	if err != nil || len(empty) != 0 {
		t.Errorf("ReadCache of an absent hash = %v, %v; want empty", empty, err)
	}
	key := coherence.CacheKey("test", "bad")
	for _, stored := range []string{"no-version", "x 1", "-1 1"} {
		if err := rdb.HSet(ctx, key, "F", stored).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := client.ReadCache(ctx, key); !errors.Is(err, coherence.ErrCacheValue) {
			t.Errorf("ReadCache of %q = %v, want ErrCacheValue", stored, err)
		}
	}
}

// counterOf reads one counter back from the registry, as a scrape would
// see it: the series labelled with table, or the unlabelled one when
// table is "".
func counterOf(t testing.TB, registry *prometheus.Registry, name, table string) float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, family := range families {
		if family.GetName() != name {
			continue
		}
		for _, metric := range family.GetMetric() {
			if table == "" && len(metric.GetLabel()) == 0 {
				return metric.GetCounter().GetValue()
			}
			for _, label := range metric.GetLabel() {
				if label.GetName() == "table" && label.GetValue() == table {
					return metric.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{table=%q} in the registry", name, table)
	return 0
}

// blockingApplier records what it applies and, until released, holds the
// applier on the first message it gets.
type blockingApplier struct {
	mu      sync.Mutex
	applied []string
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlockingApplier(t testing.TB) *blockingApplier {
	a := &blockingApplier{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(a.unblock)
	return a
}

func (a *blockingApplier) apply(payload string) {
	a.mu.Lock()
	a.applied = append(a.applied, payload)
	first := len(a.applied) == 1
	a.mu.Unlock()
	if first {
		close(a.entered)
		<-a.release
	}
}

func (a *blockingApplier) unblock() { a.once.Do(func() { close(a.release) }) }

func (a *blockingApplier) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.applied...)
}

func TestBroadcastFloodIsDroppedAndCountedWithoutBlockingThePublisher(t *testing.T) {
	const (
		capacity = 16
		flood    = 3000
		table    = "flood"
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	registry := prometheus.NewRegistry()
	applier := newBlockingApplier(t)
	sub, err := client.Subscribe(ctx, table, capacity, applier.apply, coherence.WithBroadcastMetrics(registry))
	if err != nil {
		t.Fatal(err)
	}

	// The first message parks the applier, holding its slot.
	if err := client.Broadcast(ctx, table, "m-0000"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-applier.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the applier never got the first message")
	}

	// The flood: every PUBLISH is answered at once, however far behind the
	// applier is, because the subscriber's reader never waits for it.
	began := time.Now()
	var slowest time.Duration
	for i := 1; i < flood; i++ {
		sent := time.Now()
		if err := client.Broadcast(ctx, table, fmt.Sprintf("m-%04d", i)); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		slowest = max(slowest, time.Since(sent))
	}
	took := time.Since(began)
	if slowest > time.Second || took > 20*time.Second {
		t.Errorf("publishing %d messages took %s, the slowest %s: the publisher was held up", flood, took, slowest)
	}
	eventually(t, 10*time.Second, "the reader reads every message", func() bool {
		return sub.Stats().Received == flood
	})

	stats := sub.Stats()
	if stats.Dropped != flood-capacity || stats.Held != capacity || stats.Applied != 0 {
		t.Errorf("stats at the peak = %+v, want %d dropped, %d held, none applied yet", stats, flood-capacity, capacity)
	}
	if got := counterOf(t, registry, "emq_coherence_broadcast_dropped_total", table); got != flood-capacity {
		t.Errorf("emq_coherence_broadcast_dropped_total = %v, want %d", got, flood-capacity)
	}
	if got := counterOf(t, registry, "emq_coherence_broadcast_received_total", table); got != flood {
		t.Errorf("emq_coherence_broadcast_received_total = %v, want %d", got, flood)
	}

	// Released, the applier gets exactly what the ring kept: capacity
	// messages, the one it held included. A single server delivers in
	// publish order, so those are the first ones; on a cluster a PUBLISH
	// reaches the subscriber's node through the cluster bus unless it was
	// sent to that node, so the order is not kept there.
	applier.unblock()
	eventually(t, 10*time.Second, "the applier drains the ring", func() bool {
		return sub.Stats().Applied == capacity
	})
	time.Sleep(50 * time.Millisecond) // room for a wrongly kept message to show up
	seen := applier.seen()
	if len(seen) != capacity {
		t.Fatalf("applied %d messages, want %d", len(seen), capacity)
	}
	distinct := map[string]bool{}
	for i, payload := range seen {
		var n int
		if _, err := fmt.Sscanf(payload, "m-%04d", &n); err != nil || n >= flood || distinct[payload] {
			t.Errorf("applied[%d] = %q: not one of the flood's messages, or applied twice", i, payload)
		}
		distinct[payload] = true
		if want := fmt.Sprintf("m-%04d", i); payload != want && !testserver.ClusterMode() {
			t.Errorf("applied[%d] = %q, want %q", i, payload, want)
		}
	}

	// With room again, the channel carries messages as before.
	if err := client.Broadcast(ctx, table, "after"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a message after the flood is applied", func() bool {
		seen := applier.seen()
		return len(seen) == capacity+1 && seen[capacity] == "after"
	})
}

func TestSubscriptionSurvivesAServerRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	server := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	client := coherence.New(rdb)
	var mu sync.Mutex
	var got []string
	sub, err := client.Subscribe(ctx, "restart", 8, func(payload string) {
		mu.Lock()
		got = append(got, payload)
		mu.Unlock()
	}, coherence.WithHealthCheck(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	has := func(want string) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, payload := range got {
			if payload == want {
				return true
			}
		}
		return false
	}
	if err := client.Broadcast(ctx, "restart", "before"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the message before the restart arrives", func() bool { return has("before") })

	server.Restart(t)
	// At most once: what went out while the subscriber reconnected is lost,
	// so keep publishing until one gets through.
	deadline := time.Now().Add(20 * time.Second)
	for n := 0; ; n++ {
		payload := "after-" + strconv.Itoa(n)
		_ = client.Broadcast(ctx, "restart", payload)
		if has(payload) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message reached the subscriber after the restart; stats %+v", sub.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}

	cancel()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not stop after its context was cancelled")
	}
}

func TestSubscriptionStopsWhileTheApplierWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	client := coherence.New(testserver.QueueRedis(t))
	sub, err := client.Subscribe(ctx, "stop", 4, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-sub.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription did not stop after its context was cancelled")
	}
}

func TestSubscribeRefusals(t *testing.T) {
	ctx := context.Background()
	client := coherence.New(testserver.QueueRedis(t))
	if _, err := client.Subscribe(ctx, "t", 0, func(string) {}); err == nil {
		t.Error("Subscribe took a capacity of 0")
	}
	if _, err := client.Subscribe(ctx, "t", 1, nil); err == nil {
		t.Error("Subscribe took no apply function")
	}
}

func TestSubscriptionSurvivesAPanickingApply(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := coherence.New(testserver.QueueRedis(t))
	applied := make(chan string, 2)
	_, err := client.Subscribe(ctx, "panics", 4, func(payload string) {
		if payload == "bad" {
			panic("bad message")
		}
		applied <- payload
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{"bad", "good"} {
		if err := client.Broadcast(ctx, "panics", payload); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case payload := <-applied:
		if payload != "good" {
			t.Errorf("applied %q, want good", payload)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a panicking apply stopped the applier")
	}
}

// TestFillHashesIfNewerFillsEachHashConditionally: several hashes in one
// round trip, each field kept when it holds a newer version, on a server
// that lost its scripts (the NOSCRIPT path) as after a restart.
func TestFillHashesIfNewerFillsEachHashConditionally(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	first, second := coherence.CacheKey("test", "a"), coherence.CacheKey("test", "b")
	if _, err := client.FillIfNewer(ctx, first, "BTC", 7, "0.5"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	filled, err := client.FillHashesIfNewer(ctx, map[string][]coherence.CacheEntry{
		first:  {{Field: "BTC", Version: 6, Value: "0.4"}, {Field: "USD", Version: 2, Value: "10.00"}},
		second: {{Field: "ETH", Version: 1, Value: "3"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wrote := map[string][]bool{}
	for key, fills := range filled {
		for _, fill := range fills {
			wrote[key] = append(wrote[key], fill.Wrote)
		}
	}
	if want := map[string][]bool{first: {false, true}, second: {true}}; !maps.EqualFunc(wrote, want, slices.Equal) {
		t.Errorf("fills wrote %v, want %v", wrote, want)
	}
	for key, want := range map[string]map[string]string{
		first:  {"BTC": "7 0.5", "USD": "2 10.00"},
		second: {"ETH": "1 3"},
	} {
		got, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", key, got, want)
		}
	}
}

// TestRefreshHashesIfNewerLeavesAbsentFieldsAbsent: a refresh writes only
// over an older version; a field holding nothing, or a value without a
// version, is left as it is and answered Absent (the caller reads the
// truth for it), where a fill would write it.
func TestRefreshHashesIfNewerLeavesAbsentFieldsAbsent(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	key := coherence.CacheKey("test", "refresh")
	if _, err := client.FillIfNewer(ctx, key, "BTC", 7, "0.5"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.FillIfNewer(ctx, key, "ETH", 3, "1"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, key, "SOL", "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	entries := []coherence.CacheEntry{
		{Field: "BTC", Version: 8, Value: "0.6"}, // older held: written
		{Field: "ETH", Version: 2, Value: "0.9"}, // newer held: kept
		{Field: "USD", Version: 4, Value: "10"},  // nothing held: left
		{Field: "SOL", Version: 5, Value: "2"},   // no version held: left
	}
	refreshed, err := client.RefreshHashesIfNewer(ctx, map[string][]coherence.CacheEntry{key: entries})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct{ wrote, absent bool }
	var got []answer
	for _, fill := range refreshed[key] {
		got = append(got, answer{fill.Wrote, fill.Absent})
	}
	if want := []answer{{true, false}, {false, false}, {false, true}, {false, true}}; !slices.Equal(got, want) {
		t.Errorf("the refresh answered %v, want %v", got, want)
	}
	held, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"BTC": "8 0.6", "ETH": "3 1", "SOL": "garbage"}; !maps.Equal(held, want) {
		t.Errorf("%s holds %v after the refresh, want %v", key, held, want)
	}
	if _, err := client.FillHashesIfNewer(ctx, map[string][]coherence.CacheEntry{key: entries[2:]}); err != nil {
		t.Fatal(err)
	}
	if got, err := rdb.HMGet(ctx, key, "USD", "SOL").Result(); err != nil || got[0] != "4 10" || got[1] != "5 2" {
		t.Errorf("a fill of the absent fields left %v, %v; want 4 10 and 5 2", got, err)
	}
}

// TestFillHashesIfNewerAnswersEachHashOnItsOwn: the hashes of one table
// (one hash tag, one slot) go in one script call, and a hash whose key holds
// no hash gets its own error while the others are still filled.
func TestFillHashesIfNewerAnswersEachHashOnItsOwn(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	keys := []string{coherence.CacheKey("test", "a"), coherence.CacheKey("test", "b"), coherence.CacheKey("test", "c")}
	if err := rdb.Set(ctx, keys[1], "no hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	scripts := func() int64 {
		if testserver.ClusterMode() {
			return 0 // commandstats are per master; the single leg counts
		}
		var n int64
		for _, command := range []string{"evalsha", "eval"} {
			stats, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(stats) {
				if rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls="); ok {
					calls, _, _ := strings.Cut(rest, ",")
					v, err := strconv.ParseInt(calls, 10, 64)
					if err != nil {
						t.Fatal(err)
					}
					n += v
				}
			}
		}
		return n
	}
	before := scripts()
	filled, err := client.FillHashesIfNewer(ctx, map[string][]coherence.CacheEntry{
		keys[0]: {{Field: "BTC", Version: 3, Value: "0.5"}},
		keys[1]: {{Field: "BTC", Version: 3, Value: "0.5"}},
		keys[2]: {{Field: "USD", Version: 1, Value: "10.00"}, {Field: "ETH", Version: 2, Value: "1"}},
	})
	if calls := scripts() - before; calls > 2 { // EVALSHA, and EVAL once after NOSCRIPT
		t.Errorf("%d script calls for three hashes of one slot, want one", calls)
	}
	if err == nil || !strings.Contains(err.Error(), keys[1]) || strings.Contains(err.Error(), keys[0]) || strings.Contains(err.Error(), keys[2]) {
		t.Errorf("error %v, want one naming %s alone", err, keys[1])
	}
	if _, ok := filled[keys[1]]; ok {
		t.Errorf("answered %v for the key holding no hash", filled[keys[1]])
	}
	for key, want := range map[string]map[string]string{
		keys[0]: {"BTC": "3 0.5"},
		keys[2]: {"USD": "1 10.00", "ETH": "2 1"},
	} {
		if got := len(filled[key]); got != len(want) {
			t.Errorf("%s: %d fills answered, want %d", key, got, len(want))
		}
		got, err := rdb.HGetAll(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s holds %v, want %v", key, got, want)
		}
	}
}

// TestFillHashesIfNewerFillsManyHashes: a fill of more hashes than one call
// takes (a heal's scan page) fills and answers every one.
func TestFillHashesIfNewerFillsManyHashes(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client := coherence.New(rdb)
	fills := map[string][]coherence.CacheEntry{}
	for i := range 150 {
		fills[coherence.CacheKey("test", strconv.Itoa(i))] = []coherence.CacheEntry{{Field: "USD", Version: int64(i + 1), Value: "1"}}
	}
	filled, err := client.FillHashesIfNewer(ctx, fills)
	if err != nil {
		t.Fatal(err)
	}
	for key, entries := range fills {
		if got := filled[key]; len(got) != 1 || !got[0].Wrote || got[0].Held.Version != entries[0].Version {
			t.Errorf("%s: answered %+v, want version %d written", key, got, entries[0].Version)
		}
		if held, err := rdb.HGet(ctx, key, "USD").Result(); err != nil || held != strconv.FormatInt(entries[0].Version, 10)+" 1" {
			t.Errorf("%s holds %q, %v", key, held, err)
		}
	}
}
