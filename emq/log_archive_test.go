package emq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// appendN appends count entries to group's log, one per append, named
// <group><sequence>.
func appendN(t testing.TB, queue *emq.Queue, group string, count int) {
	t.Helper()
	for range count {
		if _, err := queue.AppendLog(context.Background(), group, emq.LogSource{}, []emq.LogEntry{{ID: group, Type: "t"}}); err != nil {
			t.Fatal(err)
		}
	}
}

func bounds(t testing.TB, queue *emq.Queue, group string) string {
	t.Helper()
	first, last, err := queue.LogBounds(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d..%d", first, last)
}

// A log drops no entry before its archiver marks it archived, however old
// or many: appends drop nothing. A mark raises the archived position (never
// lowers it) and drops, oldest first, the archived entries that are older
// than the hot tail's age or beyond its newest count; a log left empty is
// gone, its sequence going on.
func TestALogDropsOnlyWhatItsArchiverMarked(t *testing.T) {
	ctx := context.Background()
	queue, rdb := newQueue(t)
	mark := func(archived int64, hot emq.LogHotTail) emq.LogMarked {
		t.Helper()
		marked, err := queue.MarkLogsArchived(ctx, []emq.LogMark{{Group: "g", Archived: archived}}, hot)
		if err != nil {
			t.Fatal(err)
		}
		return marked[0]
	}
	old := emq.LogHotTail{Count: 2, Age: 0}
	appendN(t, queue, "g", 10)
	time.Sleep(5 * time.Millisecond)
	if got := bounds(t, queue, "g"); got != "1..10" {
		t.Fatalf("appends dropped entries: the log holds %s", got)
	}
	steps := []struct {
		name     string
		archived int64
		hot      emq.LogHotTail
		want     emq.LogMarked
		bounds   string
	}{
		{name: "nothing archived: nothing drops, however old", archived: 0, hot: old, want: emq.LogMarked{First: 1}, bounds: "1..10"},
		{name: "archived through 4: 1..4 drop", archived: 4, hot: old, want: emq.LogMarked{Archived: 4, First: 5, Dropped: 4}, bounds: "5..10"},
		{name: "a lower mark raises nothing", archived: 3, hot: old, want: emq.LogMarked{Archived: 4, First: 5}, bounds: "5..10"},
		{name: "young but beyond the newest two", archived: 10, hot: emq.LogHotTail{Count: 2, Age: time.Hour},
			want: emq.LogMarked{Archived: 10, First: 9, Dropped: 4}, bounds: "9..10"},
	}
	for _, step := range steps {
		if got := mark(step.archived, step.hot); got != step.want {
			t.Fatalf("%s: marked %+v, want %+v", step.name, got, step.want)
		}
		if got := bounds(t, queue, "g"); got != step.bounds {
			t.Fatalf("%s: the log holds %s, want %s", step.name, got, step.bounds)
		}
	}

	// Young and few: kept, and due once they age; a log that is not
	// appended to any more is trimmed by the due list.
	young := emq.LogHotTail{Count: 100, Age: 300 * time.Millisecond}
	appendN(t, queue, "g", 2)
	if got := mark(12, young); got != (emq.LogMarked{Archived: 12, First: 9}) {
		t.Fatalf("a young tail marked: %+v", got)
	}
	if due, err := queue.LogsDue(ctx, 10); err != nil || len(due) != 0 {
		t.Fatalf("due before the tail aged: %v, %v", due, err)
	}
	time.Sleep(400 * time.Millisecond)
	due, err := queue.LogsDue(ctx, 10)
	if err != nil || !slices.Equal(due, []string{"g"}) {
		t.Fatalf("due after the tail aged: %v, %v; want g", due, err)
	}
	if got := mark(0, young); got != (emq.LogMarked{Archived: 12, Dropped: 4}) {
		t.Fatalf("the aged tail marked: %+v", got)
	}
	if n, err := rdb.Exists(ctx, "emq:{work}:log:g").Result(); err != nil || n != 0 {
		t.Errorf("the emptied log is still there: %d, %v", n, err)
	}
	if due, err := queue.LogsDue(ctx, 10); err != nil || len(due) != 0 {
		t.Errorf("an empty log is still due: %v, %v", due, err)
	}
	if got := bounds(t, queue, "g"); got != "13..12" {
		t.Errorf("the emptied log's bounds %s, want 13..12", got)
	}
	appendN(t, queue, "g", 1)
	if got := readAll(t, queue, "g"); !slices.Equal(got, []string{"13 g"}) {
		t.Errorf("the log after the next append holds %v", got)
	}
	if archived, err := queue.LogsArchived(ctx, []string{"g", "never"}); err != nil || archived["g"] != 12 || archived["never"] != 0 {
		t.Errorf("archived positions %v, %v", archived, err)
	}
}

// An entry not archived stays whatever happens around it: a log whose
// archiver lags keeps growing past its hot tail, and a mark drops at most
// what it covers, leaving the log due again when it could not drop all.
func TestALogKeepsWhatItsArchiverLagsBehind(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	appendN(t, queue, "g", 50)
	time.Sleep(5 * time.Millisecond)
	marked, err := queue.MarkLogsArchived(ctx, []emq.LogMark{{Group: "g", Archived: 20}}, emq.LogHotTail{})
	if err != nil || marked[0] != (emq.LogMarked{Archived: 20, First: 21, Dropped: 20}) {
		t.Fatalf("marked %+v, %v", marked, err)
	}
	// Whatever the tail, 21..50 are not archived.
	for _, hot := range []emq.LogHotTail{{}, {Count: 1}, {Age: time.Nanosecond}} {
		if marked, err := queue.MarkLogsArchived(ctx, []emq.LogMark{{Group: "g"}}, hot); err != nil || marked[0].Dropped != 0 {
			t.Fatalf("%+v: marked %+v, %v", hot, marked, err)
		}
	}
	if got := bounds(t, queue, "g"); got != "21..50" {
		t.Errorf("the log holds %s, want 21..50", got)
	}
	page, err := queue.ReadLogPage(ctx, "g", 3, 2)
	if err != nil || page.Last != 50 || !slices.Equal(logged(page.Events), []string{"21 g", "22 g"}) {
		t.Errorf("a page after 3: %v last %d, %v; want 21, 22 and 50", logged(page.Events), page.Last, err)
	}
	if page, err := queue.ReadLogPage(ctx, "never", 0, 2); err != nil || page.Last != 0 || len(page.Events) != 0 {
		t.Errorf("a page of a log never written: %+v, %v", page, err)
	}
}

// The readers of one share take each announcement once between them; a
// share is made where the stream ends when first read, and a reader that
// leaves takes the idle ones with it.
func TestReadersOfAShareSplitTheLogChanges(t *testing.T) {
	ctx := context.Background()
	queue, rdb := newQueue(t)
	appendN(t, queue, "before", 1)
	for _, reader := range []string{"r1", "r2"} {
		if changes, err := queue.TakeLogChanges(ctx, "archive", reader, -1, 10); err != nil || len(changes) != 0 {
			t.Fatalf("%s's first take: %v, %v; want the share made and nothing taken", reader, changes, err)
		}
	}
	appendN(t, queue, "a", 5)
	appendN(t, queue, "b", 5)
	var taken []string
	for round := 0; len(taken) < 10 && round < 10; round++ {
		for _, reader := range []string{"r1", "r2"} {
			changes, err := queue.TakeLogChanges(ctx, "archive", reader, 10*time.Millisecond, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, change := range changes {
				taken = append(taken, change.Group+strconv.FormatInt(change.Sequence, 10))
			}
		}
	}
	sort.Strings(taken)
	if want := []string{"a1", "a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4", "b5"}; !slices.Equal(taken, want) {
		t.Errorf("the readers took %v, want each append once: %v", taken, want)
	}
	// Another share reads the same stream on its own.
	if _, err := queue.TakeLogChanges(ctx, "other", "r1", -1, 10); err != nil {
		t.Fatal(err)
	}
	appendN(t, queue, "c", 1)
	if changes, err := queue.TakeLogChanges(ctx, "other", "r1", -1, 10); err != nil || len(changes) != 1 || changes[0] != (emq.LogChange{Group: "c", Sequence: 1}) {
		t.Errorf("the other share took %v, %v", changes, err)
	}
	if err := queue.LeaveLogChanges(ctx, "archive", "r1", time.Hour); err != nil {
		t.Fatal(err)
	}
	readers, err := rdb.XInfoConsumers(ctx, "emq:{work}:logchanges", "archive").Result()
	if err != nil || len(readers) != 1 || readers[0].Name != "r2" {
		t.Errorf("readers after r1 left: %+v, %v", readers, err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := queue.LeaveLogChanges(ctx, "archive", "r3", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if readers, err := rdb.XInfoConsumers(ctx, "emq:{work}:logchanges", "archive").Result(); err != nil || len(readers) != 0 {
		t.Errorf("the idle reader stayed: %+v, %v", readers, err)
	}
}

// ScanLogPositions walks every log's last and archived sequences.
func TestScanLogPositionsWalksEveryLog(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	client, err := emq.Connect(ctx, testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("scan")
	want := map[string]emq.LogPosition{}
	for i := range 30 {
		group := "g" + strconv.Itoa(i)
		appendN(t, queue, group, 1+i%3)
		want[group] = emq.LogPosition{Group: group, Last: int64(1 + i%3)}
	}
	if _, err := queue.MarkLogsArchived(ctx, []emq.LogMark{{Group: "g2", Archived: 2}}, emq.DefaultLogHotTail); err != nil {
		t.Fatal(err)
	}
	want["g2"] = emq.LogPosition{Group: "g2", Last: 3, Archived: 2}
	got := map[string]emq.LogPosition{}
	for cursor, first := uint64(0), true; first || cursor != 0; first = false {
		var positions []emq.LogPosition
		if positions, cursor, err = queue.ScanLogPositions(ctx, cursor, 7); err != nil {
			t.Fatal(err)
		}
		for _, position := range positions {
			got[position.Group] = position
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("positions %v\nwant %v", got, want)
	}
}

// A log's claim is its holder's until it expires or the holder releases
// it: the holder renews it, another holder is refused it, and anyone
// takes it once it expired or was released; only its holder releases it.
func TestALogClaimIsItsHoldersUntilItExpires(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	const ttl = 400 * time.Millisecond
	steps := []struct {
		name   string
		holder string
		groups []string
		wait   time.Duration
		// releaser, when set, releases release before the claim.
		releaser string
		release  []string
		want     []string
	}{
		{name: "free logs are taken", holder: "a", groups: []string{"g1", "g2"}, want: []string{"g1", "g2"}},
		{name: "another holder is refused them", holder: "b", groups: []string{"g1", "g2", "g3"}, want: []string{"g3"}},
		{name: "the holder renews its own", holder: "a", groups: []string{"g1", "g3"}, wait: ttl / 2, want: []string{"g1"}},
		{name: "renewed claims outlast the first ttl", holder: "b", groups: []string{"g1"}, wait: ttl * 3 / 4, want: []string{}},
		{name: "expired claims are anyone's", holder: "b", groups: []string{"g1", "g2"}, wait: ttl + ttl/4, want: []string{"g1", "g2"}},
		{name: "another's release frees nothing", releaser: "a", release: []string{"g1"}, holder: "a", groups: []string{"g1"}, want: []string{}},
		{name: "released claims are anyone's", releaser: "b", release: []string{"g1", "g2"}, holder: "a", groups: []string{"g1", "g2"}, want: []string{"g1", "g2"}},
	}
	for _, step := range steps {
		time.Sleep(step.wait)
		if step.releaser != "" {
			if err := queue.ReleaseLogs(ctx, step.release, step.releaser); err != nil {
				t.Fatal(err)
			}
		}
		got, err := queue.ClaimLogs(ctx, step.groups, step.holder, ttl)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, step.want) {
			t.Fatalf("%s: %s holds %v, want %v", step.name, step.holder, got, step.want)
		}
	}
}

// ReadLogsReplicated answers a log's entries once the replicas asked for
// hold them, and refuses them when too few do in time.
func TestReadLogsReplicatedWaitsForTheReplicas(t *testing.T) {
	if testserver.ClusterMode() {
		t.Skip("starts a replica of its own; the single-server leg runs it")
	}
	tests := []struct {
		name     string
		replicas int
		want     []int64 // the sequences read
		wantErr  bool
	}{
		{name: "waiting for none", replicas: 0, want: []int64{1, 2}},
		{name: "a replica in sync", replicas: 1, want: []int64{1, 2}},
		{name: "more replicas than there are", replicas: 2, wantErr: true},
	}
	ctx := context.Background()
	// A wait of a second: a replica in sync acknowledges in milliseconds,
	// but not always within 100 ms under -race on a busy box.
	primary, follower := testserver.StartRedis(t, testserver.WithRedisConfig("repl-diskless-sync-delay", "0")), testserver.StartRedis(t)
	follower.Follow(t, primary)
	appendN(t, mustQueue(t, primary), "a", 2)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, err := emq.Connect(ctx, primary.Client(t), emq.WithLogger(slog.New(slog.DiscardHandler)), emq.WithAdmitReplicas(tt.replicas, time.Second))
			if err != nil {
				t.Fatal(err)
			}
			read, err := client.Queue("work").ReadLogsReplicated(ctx, map[string]int64{"a": 0}, 10)
			var notReplicated *emq.NotReplicatedError
			if tt.wantErr {
				if !errors.As(err, &notReplicated) || read != nil {
					t.Errorf("%v, %v; want *NotReplicatedError", read, err)
				}
				return
			}
			var got []int64
			for _, event := range read["a"] {
				got = append(got, event.Sequence)
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("%v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// An archiver copies only entries a failover cannot lose
// (ReadLogsReplicated): the entries it reads and the replicas' answer
// must come from one server. Here the primary it reads from has lost its
// replica (promoted, as an orchestrator does), so WAIT there blocks; a
// failover then moves the address to the promoted server, which has a
// replica in sync, and cuts the connections. go-redis sends a command cut
// off this way again, on a new connection, to the promoted server: a wait
// answered there must not vouch for entries read from the old one, which
// the promoted server never held.
func TestReadLogsReplicatedVouchesOnlyForEntriesItsReplicasHold(t *testing.T) {
	if testserver.ClusterMode() {
		t.Skip("fails a single server over through a proxy; the single-server leg runs it")
	}
	ctx := context.Background()
	syncNow := testserver.WithRedisConfig("repl-diskless-sync-delay", "0")
	old, promoted, follower := testserver.StartRedis(t), testserver.StartRedis(t, syncNow), testserver.StartRedis(t)
	// Both hold entry 1; entry 2 reached the old primary after its
	// replica was promoted, so a failover loses it.
	appendN(t, mustQueue(t, old), "a", 2)
	appendN(t, mustQueue(t, promoted), "a", 1)
	follower.Follow(t, promoted)

	proxy := testserver.StartProxy(t, old.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(old.Addr)})
	t.Cleanup(func() { _ = rdb.Close() })
	client, err := emq.Connect(ctx, rdb, emq.WithLogger(slog.New(slog.DiscardHandler)), emq.WithAdmitReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("work")

	failover := time.AfterFunc(300*time.Millisecond, func() {
		if err := proxy.Repoint(old.Addr, promoted.Addr); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { failover.Stop() })
	read, err := queue.ReadLogsReplicated(ctx, map[string]int64{"a": 0}, 10)
	var got []int64
	for _, event := range read["a"] {
		got = append(got, event.Sequence)
	}
	// Refused (not replicated, or the connection's end), or what the
	// promoted server holds; never sequence 2.
	if err == nil && !slices.Equal(got, []int64{1}) {
		t.Errorf("read sequences %v vouched for by the replicas; the promoted server holds only [1]", got)
	}
}

// mustQueue is the queue "work" on server, waiting for no replica.
func mustQueue(t testing.TB, server *testserver.Redis) *emq.Queue {
	t.Helper()
	queue, _ := queueOn(t, server.Client(t))
	return queue
}

// A Redis at maxmemory (noeviction) refuses writes: admissions and appends
// fail until memory is freed, and the logs are most of it once their
// archiver fell behind (PostgreSQL down a while: a log drops nothing it
// has not archived). The archiver's own steps must still run there, or
// nothing frees it: claim the log, read it with the replicas' answer,
// mark it archived and trim it.
func TestTheArchiverTrimsALogOnARedisAtMaxmemory(t *testing.T) {
	testserver.Parallel(t)
	if testserver.ClusterMode() {
		t.Skip("starts a replica of its own; the single-server leg runs it")
	}
	ctx := context.Background()
	primary, follower := testserver.StartRedis(t, testserver.WithRedisConfig("repl-diskless-sync-delay", "0")), testserver.StartRedis(t)
	follower.Follow(t, primary)
	appendN(t, mustQueue(t, primary), "a", 20)
	client, err := emq.Connect(ctx, primary.Client(t), emq.WithLogger(slog.New(slog.DiscardHandler)), emq.WithAdmitReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("work")
	admin := primary.Client(t)
	for _, kv := range [][2]string{{"maxmemory-policy", "noeviction"}, {"maxmemory", "1"}} {
		if err := admin.ConfigSet(ctx, kv[0], kv[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = admin.ConfigSet(ctx, "maxmemory", "0").Err() })

	held, err := queue.ClaimLogs(ctx, []string{"a"}, "archiver", time.Second)
	if err != nil || len(held) != 1 {
		t.Fatalf("claim: %v, %v; want [a]", held, err)
	}
	read, err := queue.ReadLogsReplicated(ctx, map[string]int64{"a": 0}, 10)
	if err != nil || len(read["a"]) != 10 {
		t.Fatalf("read: %d entries, %v; want 10", len(read["a"]), err)
	}
	marked, err := queue.MarkLogsArchived(ctx, []emq.LogMark{{Group: "a", Archived: 10}}, emq.LogHotTail{})
	if err != nil || marked[0].Dropped != 10 {
		t.Fatalf("mark: %+v, %v; want 10 dropped", marked, err)
	}
}
