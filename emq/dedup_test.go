package emq

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestParseDedupSettings(t *testing.T) {
	valid := []struct {
		text string
		want dedupSettings
	}{
		{"", dedupSettings{current: dedupSetting{retention: 86_400_000, window: 43_200_000}}},
		{"600000 300000", dedupSettings{text: "600000 300000", current: dedupSetting{retention: 600_000, window: 300_000}}},
		{"600000 300000 3600000 1800000 1767225600000", dedupSettings{text: "600000 300000 3600000 1800000 1767225600000",
			current: dedupSetting{retention: 600_000, window: 300_000},
			earlier: []dedupSetting{{retention: 3_600_000, window: 1_800_000, until: 1_767_225_600_000}}}},
	}
	for _, tt := range valid {
		got, err := parseDedupSettings(tt.text)
		if err != nil || got.text != tt.want.text || got.current != tt.want.current || !slices.Equal(got.earlier, tt.want.earlier) {
			t.Errorf("parse %q = %+v, %v; want %+v", tt.text, got, err, tt.want)
		}
	}
	for _, text := range []string{"600000", "600000 300000 1", "600000 300000 1 2", "0 300000", "-600000 300000", "ten minutes", "600000 3e5"} {
		if got, err := parseDedupSettings(text); err == nil {
			t.Errorf("parse %q = %+v, want an error", text, got)
		}
	}
}

func TestDedupWindows(t *testing.T) {
	queue := (&Client{}).Queue("work") // naming keys needs no server
	const (
		minute = time.Minute
		m5     = 5 * time.Minute
		h12    = 12 * time.Hour
	)
	window := func(length time.Duration, w int64) string {
		return fmt.Sprintf("emq:{work}:dedup:%d:%d", length.Milliseconds(), w)
	}
	at := func(length time.Duration, w int64, offset time.Duration) time.Time {
		return time.UnixMilli(w * length.Milliseconds()).Add(offset)
	}
	expiry := func(length time.Duration, w int64) int64 { return w*length.Milliseconds() + minute.Milliseconds() }
	tenMinutes := "600000 300000"
	tests := []struct {
		name     string
		settings string
		skew     time.Duration
		now      time.Time
		write    string
		others   []string
		expireAt int64
	}{
		{"start of a window: back to the window of now - R - the allowance", tenMinutes, minute, at(m5, 1000, 0),
			window(m5, 1000), []string{window(m5, 997), window(m5, 998), window(m5, 999)}, expiry(m5, 1003)},
		{"middle of a window", tenMinutes, minute, at(m5, 1000, m5/2),
			window(m5, 1000), []string{window(m5, 998), window(m5, 999)}, expiry(m5, 1003)},
		{"just outside the skew allowance of its end", tenMinutes, minute, at(m5, 1000, m5-minute-time.Millisecond),
			window(m5, 1000), []string{window(m5, 998), window(m5, 999)}, expiry(m5, 1003)},
		{"within the skew allowance of its end", tenMinutes, minute, at(m5, 1000, m5-minute),
			window(m5, 1000), []string{window(m5, 998), window(m5, 999), window(m5, 1001)}, expiry(m5, 1003)},
		{"no settings stored: 24 h in windows of 12 h", "", minute, at(h12, 40, time.Hour),
			window(h12, 40), []string{window(h12, 38), window(h12, 39)}, expiry(h12, 43)},
		{"a minute's retention has windows of a minute", "60000 60000", minute, at(minute, 5000, 0),
			window(minute, 5000), []string{window(minute, 4998), window(minute, 4999), window(minute, 5001)}, expiry(minute, 5002)},
		{"windows shorter than the allowance: as many ahead as it reaches", "200 100", 250 * time.Millisecond, at(100*time.Millisecond, 70, 80*time.Millisecond),
			window(100*time.Millisecond, 70), []string{window(100*time.Millisecond, 66), window(100*time.Millisecond, 67),
				window(100*time.Millisecond, 68), window(100*time.Millisecond, 69),
				window(100*time.Millisecond, 71), window(100*time.Millisecond, 72), window(100*time.Millisecond, 73)},
			70*100 + 300 + 250},
		{"an earlier setting's windows until it runs out", tenMinutes + " 3600000 1800000 " + strconv.FormatInt(at(m5, 1000, time.Second).UnixMilli(), 10), minute, at(m5, 1000, 0),
			window(m5, 1000), []string{window(m5, 997), window(m5, 998), window(m5, 999), window(30*minute, 164), window(30*minute, 165), window(30*minute, 166)}, expiry(m5, 1003)},
		{"not once it ran out", tenMinutes + " 3600000 1800000 " + strconv.FormatInt(at(m5, 1000, 0).UnixMilli(), 10), minute, at(m5, 1000, 0),
			window(m5, 1000), []string{window(m5, 997), window(m5, 998), window(m5, 999)}, expiry(m5, 1003)},
		{"an earlier setting of the same window length adds the windows missing", "60000 60000 180000 60000 " + strconv.FormatInt(at(minute, 5000, time.Hour).UnixMilli(), 10), minute, at(minute, 5000, 0),
			window(minute, 5000), []string{window(minute, 4998), window(minute, 4999), window(minute, 5001), window(minute, 4996), window(minute, 4997)}, expiry(minute, 5002)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			settings, err := parseDedupSettings(tt.settings)
			if err != nil {
				t.Fatal(err)
			}
			write, others, expireAt := queue.dedupWindows(settings, tt.now, tt.skew)
			if write != tt.write || !slices.Equal(others, tt.others) {
				t.Errorf("windows = %s + %v, want %s + %v", write, others, tt.write, tt.others)
			}
			if expireAt != tt.expireAt {
				t.Errorf("expires at %d, want %d", expireAt, tt.expireAt)
			}
		})
	}
}

// TestAdmitWindowsHoldTheirAnswer: the answer an admission reuses is the
// one dedupWindows gives, at every moment, across windows' edges and the
// skew allowance's, under settings that change between calls.
func TestAdmitWindowsHoldTheirAnswer(t *testing.T) {
	testserver.Parallel(t)
	queue := (&Client{}).Queue("work")
	var settings []dedupSettings
	for _, text := range []string{"", "600000 300000", "60000 60000", "200 100", "600000 300000 3600000 1800000 1767225600000"} {
		s, err := parseDedupSettings(text)
		if err != nil {
			t.Fatal(err)
		}
		settings = append(settings, s)
	}
	start := time.UnixMilli(1767225600000 - 3*time.Minute.Milliseconds())
	for step := time.Duration(0); step < 20*time.Minute; step += 997 * time.Millisecond {
		for i, skew := range []time.Duration{time.Minute, 250 * time.Millisecond} {
			s := settings[(int(step/time.Second)+i)%len(settings)]
			// Twice at each moment, and once a millisecond on: the second
			// call is answered from what the first kept.
			for _, now := range []time.Time{start.Add(step), start.Add(step), start.Add(step + time.Millisecond)} {
				write, others, expireAt := queue.admitWindows(s, now, skew)
				wantWrite, wantOthers, wantExpireAt := queue.dedupWindows(s, now, skew)
				if write != wantWrite || !slices.Equal(others, wantOthers) || expireAt != wantExpireAt {
					t.Fatalf("settings %q, skew %s, at %d: admitWindows = %s + %v until %d, want %s + %v until %d",
						s.text, skew, now.UnixMilli(), write, others, expireAt, wantWrite, wantOthers, wantExpireAt)
				}
			}
		}
	}
}

// TestDedupAcrossWindows admits the same dedup key at two moments by two
// clocks and checks whether the second admission sees the first.
func TestDedupAcrossWindows(t *testing.T) {
	testserver.Parallel(t)
	const r, w = 10 * time.Minute, 5 * time.Minute
	// Windows in the near future, so that their expiry is too.
	base := time.UnixMilli((time.Now().UnixMilli()/w.Milliseconds() + 2) * w.Milliseconds())
	tests := []struct {
		name          string
		first, second time.Time
		duplicate     bool
	}{
		{"same window", base.Add(time.Minute), base.Add(2 * time.Minute), true},
		{"two windows on, within the retention", base.Add(4 * time.Minute), base.Add(13 * time.Minute), true},
		{"past the retention, in the window it ends in", base.Add(time.Minute), base.Add(12 * time.Minute), true},
		{"past the retention, that window and the allowance", base.Add(time.Minute), base.Add(16 * time.Minute), false},
		{"a retry by a clock ahead, near the end of the retention", base.Add(w - time.Millisecond), base.Add(w - time.Millisecond + r - time.Millisecond + 30*time.Second), true},
		{"a clock ahead wrote to the next window", base.Add(w + 10*time.Second), base.Add(w - 20*time.Second), true},
		{"a clock ahead by more than the allowance is missed", base.Add(w + 10*time.Second), base.Add(w - 2*time.Minute), false},
		{"a clock behind wrote to the previous window", base.Add(w - 10*time.Second), base.Add(w + 20*time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue := dedupQueue(t, r)
			admitAt(t, queue, dedupJob("J1", "key"), tt.first)
			got := admitAt(t, queue, dedupJob("J2", "key"), tt.second)
			want := Admission{ID: "J2", Fingerprint: "fp-J2"}
			if tt.duplicate {
				want = Admission{ID: "J1", Fingerprint: "fp-J1", Duplicate: true}
			}
			if got != want {
				t.Errorf("second admission = %+v, want %+v", got, want)
			}
		})
	}
}

// TestDedupAcrossRetentionChanges: a second process declares another
// retention (a rolling deploy with a new DEDUP_RETENTION), and admits a key
// the first admitted. A key admitted before the change is found for the
// retention it was admitted under; one admitted after it, by the first
// process still holding the old retention, is held for the new one.
func TestDedupAcrossRetentionChanges(t *testing.T) {
	testserver.Parallel(t)
	base := time.Now().Add(time.Minute)
	tests := []struct {
		name          string
		first, second time.Duration
		// firstAfter: the first admission comes after the second declaration.
		firstAfter bool
		secondAt   time.Time
		duplicate  bool
	}{
		{"a longer retention finds a key admitted under a shorter one", 10 * time.Minute, time.Hour, false, base.Add(5 * time.Minute), true},
		{"a shorter retention refuses for the longer one a key was admitted under", time.Hour, 10 * time.Minute, false, base.Add(40 * time.Minute), true},
		{"a process that has not heard of the change admits under it", time.Hour, 10 * time.Minute, true, base.Add(40 * time.Minute), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := testserver.QueueRedis(t)
			before := dedupQueueOn(t, rdb, tt.first)
			var first Admission
			if !tt.firstAfter {
				first = admitAt(t, before, dedupJob("J1", "key"), base)
			}
			after := dedupQueueOn(t, rdb, tt.second)
			if tt.firstAfter {
				first = admitAt(t, before, dedupJob("J1", "key"), base)
				if got := before.dedupSettings().retention(); got != tt.second {
					t.Errorf("the first process admitted under %v, want the last declared %v", got, tt.second)
				}
			}
			got := admitAt(t, after, dedupJob("J2", "key"), tt.secondAt)
			if got.Duplicate != tt.duplicate || (tt.duplicate && got.ID != first.ID) {
				t.Errorf("second admission = %+v, want duplicate %v of %+v", got, tt.duplicate, first)
			}
		})
	}
}

// TestLastDeclarationWins: two processes declare different retentions; the
// last one's is stored, the first process admits under it from its next
// admission on, and the change is logged.
func TestLastDeclarationWins(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	first := dedupQueueOn(t, rdb, time.Hour)
	var log bytes.Buffer
	client, err := Connect(ctx, rdb, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	second := client.Queue("work", WithDedupRetention(10*time.Minute))
	if err := second.Declare(ctx, "test.job"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "changed the queue's dedup retention") || !strings.Contains(log.String(), "from=1h0m0s to=10m0s") {
		t.Errorf("log = %q, want the change from 1h to 10m", log.String())
	}
	for _, queue := range []*Queue{first, second} {
		if got, err := queue.DedupRetention(ctx); err != nil || got != 10*time.Minute {
			t.Errorf("stored retention = %v, %v; want 10m", got, err)
		}
	}
	// The first process still holds the hour; its admission is refused
	// before it writes anything, and goes again with ten minutes.
	if _, err := first.Admit(ctx, dedupJob("J1", "key")); err != nil {
		t.Fatal(err)
	}
	if got := first.dedupSettings().retention(); got != 10*time.Minute {
		t.Errorf("the first process holds %v after its admission, want 10m", got)
	}
	if windows := testserver.Keys(t, rdb, "emq:{work}:dedup:*"); len(windows) != 1 || !strings.HasPrefix(windows[0], "emq:{work}:dedup:300000:") {
		t.Errorf("windows = %v, want one of five minutes", windows)
	}
	if got, err := second.Admit(ctx, dedupJob("J2", "key")); err != nil || !got.Duplicate || got.ID != "J1" {
		t.Errorf("second process's admission = %+v, %v; want a duplicate of J1", got, err)
	}
	// AdmitMany learns the same way.
	stale := dedupQueueOn(t, rdb, time.Hour)
	if err := second.Declare(ctx, "test.job"); err != nil {
		t.Fatal(err)
	}
	admissions, errs := stale.AdmitMany(ctx, []Job{dedupJob("J3", "key"), dedupJob("J4", "other")})
	if err := errs[0]; err != nil || !admissions[0].Duplicate || admissions[0].ID != "J1" {
		t.Errorf("batch admission of the key = %+v, %v; want a duplicate of J1", admissions[0], err)
	}
	if err := errs[1]; err != nil || admissions[1].Duplicate {
		t.Errorf("batch admission of another key = %+v, %v; want it admitted", admissions[1], err)
	}
}

// TestDeclareDedupSettings: what each declaration leaves stored.
func TestDeclareDedupSettings(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client, err := Connect(ctx, rdb, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		t.Helper()
		text, err := rdb.Get(ctx, "emq:{work}:dedup").Result()
		if err == redis.Nil {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	declare := func(retention time.Duration) {
		t.Helper()
		if err := client.Queue("work", WithDedupRetention(retention)).Declare(ctx, "test.job"); err != nil {
			t.Fatal(err)
		}
	}
	// until checks an earlier setting's end: its retention and twice the
	// allowance from the declaration's server time.
	until := func(text string, retention time.Duration) {
		t.Helper()
		fields := strings.Fields(text)
		end, _ := strconv.ParseInt(fields[len(fields)-1], 10, 64)
		want := time.Now().Add(retention + 2*time.Minute).UnixMilli()
		if end < want-5000 || end > want+5000 {
			t.Errorf("earlier setting ends at %d, want about %d", end, want)
		}
	}

	declare(10 * time.Minute)
	if got := stored(); got != "600000 300000" {
		t.Fatalf("a new queue's settings = %q, want no earlier setting to keep", got)
	}
	declare(time.Hour)
	got := stored()
	if !strings.HasPrefix(got, "3600000 1800000 600000 300000 ") {
		t.Fatalf("after a change settings = %q, want the hour and the ten minutes kept", got)
	}
	until(got, 10*time.Minute)
	if err := client.Queue("work").Declare(ctx, "test.job", "other.job"); err != nil || stored() != got {
		t.Errorf("a declaration naming no retention left %q (%v), want %q", stored(), err, got)
	}
	declare(10 * time.Minute)
	again := stored()
	if !strings.HasPrefix(again, "600000 300000 3600000 1800000 ") || strings.Count(again, " ") != 4 {
		t.Fatalf("back to ten minutes settings = %q, want the hour kept and no second ten minutes", again)
	}
	until(again, time.Hour)
	if kinds, _ := rdb.SMembers(ctx, "emq:{work}:kinds").Result(); len(kinds) != 2 {
		t.Errorf("kinds = %v, want both declared", kinds)
	}

	// A queue that has kinds but no settings may hold keys under the
	// defaults.
	if err := client.Queue("old").Declare(ctx, "test.job"); err != nil {
		t.Fatal(err)
	}
	if err := client.Queue("old", WithDedupRetention(10*time.Minute)).Declare(ctx, "test.job"); err != nil {
		t.Fatal(err)
	}
	if text, _ := rdb.Get(ctx, "emq:{old}:dedup").Result(); !strings.HasPrefix(text, "600000 300000 86400000 43200000 ") {
		t.Errorf("settings of a queue that ran on the defaults = %q, want the defaults kept", text)
	}
}

// TestDedupWindowKeepsTheLatestExpiry: an admission under a shorter retention
// must not cut short a window of the same length that a longer retention's
// key lives in.
func TestDedupWindowKeepsTheLatestExpiry(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	const w = time.Minute
	base := time.UnixMilli((time.Now().UnixMilli()/w.Milliseconds() + 2) * w.Milliseconds())
	rdb := testserver.QueueRedis(t)
	long := dedupQueueOn(t, rdb, 2*time.Minute)
	admitAt(t, long, dedupJob("J0", "J0"), base.Add(time.Second))
	short := dedupQueueOn(t, rdb, time.Minute)
	admitAt(t, short, dedupJob("J1", "J1"), base.Add(2*time.Second))
	window, _, _ := short.dedupWindows(short.dedupSettings(), base, time.Minute)
	expires, err := rdb.PExpireTime(ctx, window).Result()
	if want := base.Add(3*w + time.Minute); err != nil || expires != time.Duration(want.UnixMilli())*time.Millisecond {
		t.Errorf("window expires at %v (%v), want %v: the 2 min key's end", expires, err, want)
	}
}

// TestExpiredDedupKeyIsGone: on the server's own clock, a key refuses a
// second job for its queue's retention, and once past it and its window its
// hash is deleted and the key admits again. The skew allowance is shortened
// so that the windows are a fraction of a second.
func TestExpiredDedupKeyIsGone(t *testing.T) {
	ctx := context.Background()
	const retention, skew = 400 * time.Millisecond, 50 * time.Millisecond
	rdb := testserver.QueueRedis(t)
	client, err := Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	client.skewAllowance = skew
	queue := client.Queue("work", WithDedupRetention(retention))
	if err := queue.Declare(ctx, "test.job"); err != nil {
		t.Fatal(err)
	}
	node := nodeOf(t, queue)
	admitted := time.Now()
	if got, err := queue.Admit(ctx, dedupJob("J1", "key")); err != nil || got.Duplicate {
		t.Fatalf("first admission = %+v, %v", got, err)
	}
	if got, err := queue.Admit(ctx, dedupJob("J2", "key")); err != nil || !got.Duplicate {
		t.Fatalf("admission within the retention = %+v, %v; want a duplicate", got, err)
	}
	// Wait for the server to delete the window of its own accord: DBSIZE
	// counts a key until it is deleted, expired or not.
	keys, err := node.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := node.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if n < keys {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys after %v, want the window deleted", n, time.Since(admitted))
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := time.Since(admitted)
	if held < retention {
		t.Errorf("window deleted after %v, before the retention %v", held, retention)
	}
	usage, err := queue.MemoryUsage(ctx)
	if err != nil || usage.Dedup != 0 {
		t.Errorf("dedup memory = %d, %v; want none", usage.Dedup, err)
	}
	if got, err := queue.Admit(ctx, dedupJob("J3", "key")); err != nil || got.Duplicate {
		t.Errorf("admission after %v = %+v, %v; want admitted", time.Since(admitted), got, err)
	}
}

// nodeOf is the server holding queue's keys.
func nodeOf(t testing.TB, queue *Queue) redis.Cmdable {
	t.Helper()
	cluster, ok := queue.client.rdb.(*redis.ClusterClient)
	if !ok {
		return queue.client.rdb
	}
	node, err := cluster.MasterForKey(context.Background(), queue.jobsKey())
	if err != nil {
		t.Fatal(err)
	}
	return node
}

func dedupJob(id, key string) Job {
	return Job{ID: id, Kind: "test.job", Group: "g", DedupKey: key, Fingerprint: "fp-" + id}
}

// dedupQueue is a queue "work" accepting "test.job" under retention on a
// fresh Redis (or the shared cluster).
func dedupQueue(t testing.TB, retention time.Duration) *Queue {
	t.Helper()
	return dedupQueueOn(t, testserver.QueueRedis(t), retention)
}

// dedupQueueOn is queue "work" on rdb, declared with retention by a client
// of its own: another process.
func dedupQueueOn(t testing.TB, rdb redis.UniversalClient, retention time.Duration) *Queue {
	t.Helper()
	client, err := Connect(context.Background(), rdb, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("work", WithDedupRetention(retention))
	if err := queue.Declare(context.Background(), "test.job"); err != nil {
		t.Fatal(err)
	}
	return queue
}

// admitAt admits job as an admitting process whose clock reads now would.
func admitAt(t testing.TB, queue *Queue, job Job, now time.Time) Admission {
	t.Helper()
	admission, err := queue.admitAt(context.Background(), job, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return admission
}

func TestDedupHeld(t *testing.T) {
	for retention, want := range map[time.Duration]time.Duration{
		24 * time.Hour:   36*time.Hour + time.Minute,
		10 * time.Minute: 16 * time.Minute,
		time.Minute:      3 * time.Minute, // windows are a minute at the least
	} {
		if got := DedupHeld(retention); got != want {
			t.Errorf("DedupHeld(%v) = %v, want %v", retention, got, want)
		}
	}
}

// An admission's boxed keys (scriptpipe.Call.KeyArgs) are its keys, in
// order, whatever the job carries: the script reads KEYS by position.
func TestAdmitCallBoxesItsKeys(t *testing.T) {
	testserver.Parallel(t)
	queue := dedupQueue(t, 2*time.Hour)
	limit := &RateLimit{Bucket: "key:b", Limit: Rate{Capacity: 5, PerSecond: 5}}
	entry := &LogEntry{ID: "E1", Type: "order.accepted", Data: []byte("{}")}
	for _, tt := range []struct {
		name      string
		limit     *RateLimit
		log       *LogEntry
		extraKeys int
	}{
		{"plain", nil, nil, 0},
		{"rate limited", limit, nil, 1},
		{"logged", nil, entry, 3},
		{"rate limited and logged", limit, entry, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, group := range []string{"g1", "g2"} { // the lane changes, the fixed keys do not
				job := dedupJob("J-"+group, "D-"+group)
				job.Group, job.RateLimit, job.Log = group, tt.limit, tt.log
				call, err := queue.admitCall(job, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				if len(call.KeyArgs) != len(call.Keys) {
					t.Fatalf("%d boxed keys for %d keys", len(call.KeyArgs), len(call.Keys))
				}
				for i, key := range call.Keys {
					// Boxed as the string or as a pointer to it: go-redis
					// writes either as the string.
					boxed, _ := call.KeyArgs[i].(string)
					if p, ok := call.KeyArgs[i].(*string); ok {
						boxed = *p
					}
					if boxed != key {
						t.Errorf("key %d: boxed %q, key %q", i+1, boxed, key)
					}
				}
				if call.Keys[2] != queue.laneKey(group) {
					t.Errorf("KEYS[3] = %q, want the lane %q", call.Keys[2], queue.laneKey(group))
				}
				if windows := len(call.Keys) - 8 - tt.extraKeys; windows < 1 {
					t.Errorf("%d keys leave %d dedup windows", len(call.Keys), windows)
				}
			}
		})
	}
}
