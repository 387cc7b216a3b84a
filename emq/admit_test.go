package emq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// newQueue returns a connected queue that accepts kind "test.job", on a fresh
// Redis, or on the shared Redis Cluster when EMQ_TEST_REDIS=cluster.
func newQueue(t testing.TB) (*emq.Queue, redis.UniversalClient) {
	t.Helper()
	return queueOn(t, testserver.QueueRedis(t))
}

func job(id, group, dedup string) emq.Job {
	return emq.Job{ID: id, Kind: "test.job", Group: group, Payload: []byte(`{"n":"` + id + `"}`), DedupKey: dedup, Fingerprint: "fp-" + id}
}

func keys(t testing.TB, rdb redis.UniversalClient) []string {
	t.Helper()
	return testserver.Keys(t, rdb, "*")
}

func TestAdmitWritesRowLaneAndDedupKey(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, rdb := newQueue(t)
	before := time.Now().Add(-time.Second)

	admission, err := queue.Admit(ctx, emq.Job{
		ID: "J1", Kind: "test.job", Group: "acct-a", Payload: []byte("payload-1"),
		DedupKey: "acct-a:c1", Fingerprint: "f1",
	})
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	if admission != (emq.Admission{ID: "J1", Fingerprint: "f1"}) {
		t.Fatalf("admission = %+v", admission)
	}
	if rows, err := rdb.HKeys(ctx, "emq:{work}:jobs").Result(); err != nil || !slices.Equal(rows, []string{"J1"}) {
		t.Fatalf("job rows = %v, %v; want J1's", rows, err)
	}
	info, err := queue.Job(ctx, "J1")
	if err != nil {
		t.Fatal(err)
	}
	want := emq.JobInfo{ID: "J1", State: emq.StatePending, Kind: "test.job", Group: "acct-a", Payload: []byte("payload-1"), Created: info.Created}
	if !reflect.DeepEqual(info, want) {
		t.Errorf("job = %+v, want %+v", info, want)
	}
	if info.Created.Before(before) || info.Created.After(time.Now().Add(time.Second)) {
		t.Errorf("created = %v, want about now (server time)", info.Created)
	}
	if lane, err := rdb.LRange(ctx, "emq:{work}:lane:acct-a", 0, -1).Result(); err != nil || !slices.Equal(lane, []string{"J1"}) {
		t.Errorf("lane = %v, %v; want [J1]", lane, err)
	}
	if tag, err := rdb.ZScore(ctx, "emq:{work}:rotation", "acct-a").Result(); err != nil || tag != 0 {
		t.Errorf("rotation tag = %v, %v; want 0", tag, err)
	}
	if depth, err := queue.LaneDepth(ctx, "acct-a"); err != nil || depth != 1 {
		t.Errorf("lane depth = %d, %v; want 1", depth, err)
	}
	// A queue that named no retention holds keys 24 h, in windows of 12 h.
	windows := testserver.Keys(t, rdb, "emq:{work}:dedup:*")
	if len(windows) != 1 || !strings.HasPrefix(windows[0], "emq:{work}:dedup:43200000:") {
		t.Fatalf("dedup windows = %v, want one of 12 h", windows)
	}
	entries, err := rdb.HGetAll(ctx, windows[0]).Result()
	if err != nil || len(entries) != 1 {
		t.Fatalf("dedup entries = %v, %v; want one", entries, err)
	}
	for digest, value := range entries {
		if len(digest) != 14 || value != "J1 f1" {
			t.Errorf("dedup entry %x = %q, want a 14-byte digest holding \"J1 f1\"", digest, value)
		}
	}
	// The window lives to the end of the second one after it plus the skew
	// allowance: the key is held 24 h to 36 h and a minute.
	ttl, err := rdb.PTTL(ctx, windows[0]).Result()
	if err != nil || ttl < 24*time.Hour || ttl > 36*time.Hour+time.Minute {
		t.Errorf("dedup window ttl = %v, %v; want 24h to 36h1m", ttl, err)
	}
}

// TestRowsKeepAnyBytes: the job row is one string holding every field, so
// the strings in it must come back unchanged whatever bytes they hold, and
// at every length MessagePack encodes differently.
func TestRowsKeepAnyBytes(t *testing.T) {
	testserver.Parallel(t)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	tests := []struct {
		name  string
		kind  string
		group string
		cause string
		load  []byte
	}{
		{"every byte in the payload", "test.job", "g", "boom", every},
		{"empty payload", "test.job", "g", "boom", []byte{}},
		{"a payload that reads as MessagePack", "test.job", "g", "boom", []byte("\x01\xa1p\x00\xc0\xdb\xff\xff")},
		{"a payload over 64 KiB", "test.job", "g", "boom", bytes.Repeat([]byte("0123456789"), 7000)},
		{"multi-byte text", "tâche", "groupe é", "échec ✗", []byte("ünïcødé")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			queue, _ := newQueue(t)
			if err := queue.Declare(ctx, tt.kind); err != nil {
				t.Fatal(err)
			}
			_, err := queue.Admit(ctx, emq.Job{ID: "J1", Kind: tt.kind, Group: tt.group, Payload: tt.load})
			if err != nil {
				t.Fatal(err)
			}
			c := claimOne(t, queue, time.Minute)
			if c.Kind != tt.kind || c.Group != tt.group || !bytes.Equal(c.Payload, tt.load) {
				t.Fatalf("claim = %q %q %q", c.Kind, c.Group, c.Payload)
			}
			if _, err := queue.Retry(ctx, "J1", c.Token, errors.New(tt.cause), emq.DefaultRetryPolicy); err != nil {
				t.Fatal(err)
			}
			for _, read := range []func() (emq.JobInfo, error){
				func() (emq.JobInfo, error) { return queue.Job(ctx, "J1") },
				func() (emq.JobInfo, error) {
					if err := queue.Cancel(ctx, "J1"); err != nil {
						return emq.JobInfo{}, err
					}
					return queue.Job(ctx, "J1")
				},
			} {
				info, err := read()
				if err != nil {
					t.Fatal(err)
				}
				if info.Kind != tt.kind || info.Group != tt.group || info.LastError != tt.cause ||
					!bytes.Equal(info.Payload, tt.load) || info.Attempts != 1 {
					t.Errorf("%s job = %+v", info.State, info)
				}
			}
		})
	}
}

func TestAdmitRefusals(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		first   *emq.Job
		job     emq.Job
		wantErr error
		want    emq.Admission
	}{
		{
			name:    "kind not accepted",
			job:     emq.Job{ID: "J1", Kind: "other.kind", Group: "g", Payload: []byte("x")},
			wantErr: emq.ErrKind,
		},
		{
			name:  "duplicate dedup key returns the first job",
			first: ptr(job("J1", "g", "k")),
			job:   job("J2", "g", "k"),
			want:  emq.Admission{ID: "J1", Fingerprint: "fp-J1", Duplicate: true},
		},
		{
			name:    "existing job id",
			first:   ptr(job("J1", "g", "k1")),
			job:     job("J1", "g", "k2"),
			wantErr: emq.ErrExists,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, rdb := newQueue(t)
			if tt.first != nil {
				if _, err := queue.Admit(ctx, *tt.first); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, rdb)
			got, err := queue.Admit(ctx, tt.job)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				var scriptErr *emq.ScriptError
				if !errors.As(err, &scriptErr) || !strings.HasPrefix(scriptErr.Message, scriptErr.Code+" ") {
					t.Errorf("err %v is not a coded script error", err)
				}
			} else if err != nil || got != tt.want {
				t.Fatalf("admit = %+v, %v; want %+v", got, err, tt.want)
			}
			if after := snapshot(t, rdb); after != before {
				t.Errorf("the refused admit wrote to Redis:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// snapshot renders every key with its type and value, so two snapshots differ
// when a script wrote anything at all.
func snapshot(t testing.TB, rdb redis.UniversalClient) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	all := keys(t, rdb)
	slices.Sort(all)
	for _, key := range all {
		dump, err := rdb.Dump(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%x;", key, dump)
	}
	return b.String()
}

func TestAdmitSurvivesScriptFlush(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, rdb := newQueue(t)
	if _, err := queue.Admit(ctx, job("J1", "g", "")); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Admit(ctx, job("J2", "g", "")); err != nil {
		t.Fatalf("admit after SCRIPT FLUSH: %v", err)
	}
	if n, _ := queue.Pending(ctx); n != 2 {
		t.Errorf("pending = %d, want 2", n)
	}
}

func TestAdmitConcurrentDuplicatesAdmitOnce(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, rdb := newQueue(t)
	const callers = 64
	var wg sync.WaitGroup
	results := make([]emq.Admission, callers)
	errs := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = queue.Admit(ctx, job(fmt.Sprintf("J%02d", i), "g", "same"))
		}()
	}
	wg.Wait()
	admitted := 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if !results[i].Duplicate {
			admitted++
		}
		if results[i].ID != results[0].ID {
			t.Errorf("caller %d got job %s, caller 0 got %s", i, results[i].ID, results[0].ID)
		}
	}
	if admitted != 1 {
		t.Errorf("%d admissions, want 1", admitted)
	}
	if rows, err := rdb.HLen(ctx, "emq:{work}:jobs").Result(); err != nil || rows != 1 {
		t.Errorf("job rows = %d, %v; want 1", rows, err)
	}
}

// TestAdmitTagsServeGroupsInRotation checks the fair-lane tags: a group that
// queued much still alternates with a group that queued little, whether the
// jobs are claimed one by one or in batches.
func TestAdmitTagsServeGroupsInRotation(t *testing.T) {
	testserver.Parallel(t)
	for _, batch := range []int{1, 2, 3, 7} {
		t.Run(fmt.Sprintf("claims of %d", batch), func(t *testing.T) {
			ctx := context.Background()
			queue, _ := newQueue(t)
			for i := range 5 {
				if _, err := queue.Admit(ctx, job(fmt.Sprintf("A%d", i), "a", "")); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 2 {
				if _, err := queue.Admit(ctx, job(fmt.Sprintf("B%d", i), "b", "")); err != nil {
					t.Fatal(err)
				}
			}
			for group, want := range map[string]int64{"a": 5, "b": 2} {
				if depth, _ := queue.LaneDepth(ctx, group); depth != want {
					t.Errorf("lane %s depth = %d, want %d", group, depth, want)
				}
			}
			var order []string
			for len(order) < 7 {
				claims, err := queue.Claim(ctx, batch, time.Minute)
				if err != nil || len(claims) != min(batch, 7-len(order)) {
					t.Fatalf("claim = %d jobs, %v", len(claims), err)
				}
				for _, c := range claims {
					order = append(order, c.ID)
				}
			}
			want := "A0 B0 A1 B1 A2 A3 A4"
			if got := strings.Join(order, " "); got != want {
				t.Errorf("claim order = %s, want %s", got, want)
			}
		})
	}
}

// TestClaimBatchesKeepTheRotation: a claim sees only the lanes at the head
// of the rotation it read; batches of any size still take ten backlogged
// groups in turn, one job each per round.
func TestClaimBatchesKeepTheRotation(t *testing.T) {
	testserver.Parallel(t)
	var want []string
	for round := range 3 {
		for g := range 10 {
			want = append(want, fmt.Sprintf("g%d-%05d", g, round))
		}
	}
	for _, batch := range []int{1, 2, 4, 13, 30} {
		t.Run(fmt.Sprintf("claims of %d", batch), func(t *testing.T) {
			queue, _ := newQueue(t)
			for g := range 10 {
				admitN(t, queue, fmt.Sprintf("g%d", g), 3)
			}
			var got []string
			for len(got) < len(want) {
				claims, err := queue.Claim(context.Background(), batch, time.Minute)
				if err != nil || len(claims) == 0 {
					t.Fatalf("claim = %v, %v", claims, err)
				}
				for _, c := range claims {
					got = append(got, c.ID)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("claim order\n%v, want\n%v", got, want)
			}
		})
	}
}

func TestConnectFencesProtocolVersion(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	tests := []struct {
		name    string
		held    string
		wantErr bool
	}{
		{name: "fresh server is claimed", held: ""},
		{name: "same version", held: emq.ProtocolVersion},
		{name: "other version", held: "echomq:1.4.0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := testserver.StartRedis(t).Client(t)
			if tt.held != "" {
				rdb.Set(ctx, "{emq}:version", tt.held, 0)
			}
			_, err := emq.Connect(ctx, rdb)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("connect: %v", err)
				}
				if got := rdb.Get(ctx, "{emq}:version").Val(); got != emq.ProtocolVersion {
					t.Errorf("version = %q", got)
				}
				return
			}
			if !errors.Is(err, emq.ErrProtocolVersion) {
				t.Fatalf("err = %v, want ErrProtocolVersion", err)
			}
			for _, version := range []string{tt.held, emq.ProtocolVersion} {
				if !strings.Contains(err.Error(), version) {
					t.Errorf("error %q does not name %s", err, version)
				}
			}
			if got := rdb.Get(ctx, "{emq}:version").Val(); got != tt.held {
				t.Errorf("connect overwrote the version: %q", got)
			}
		})
	}
}

func TestConnectWarnsWhenServerEvicts(t *testing.T) {
	testserver.Parallel(t)
	for _, tt := range []struct {
		policy   string
		wantWarn bool
	}{{"noeviction", false}, {"allkeys-lru", true}} {
		t.Run(tt.policy, func(t *testing.T) {
			rdb := testserver.StartRedis(t, testserver.WithRedisConfig("maxmemory-policy", tt.policy)).Client(t)
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			if _, err := emq.Connect(context.Background(), rdb, emq.WithLogger(logger)); err != nil {
				t.Fatal(err)
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), tt.policy)
			if warned != tt.wantWarn {
				t.Errorf("warned = %v, want %v; logs: %s", warned, tt.wantWarn, logs.String())
			}
		})
	}
}

// TestAdmitOnRedisCluster runs in every mode, so a plain `go test` proves the
// keyspace is Cluster-safe too.
func TestAdmitOnRedisCluster(t *testing.T) {
	ctx := context.Background()
	cluster := testserver.SharedRedisCluster(t).Client(t)
	client, err := emq.Connect(ctx, cluster)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	for _, name := range []string{"orders", "alpha", "beta"} {
		queue := client.Queue(name)
		if err := queue.Declare(ctx, "test.job"); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			if _, err := queue.Admit(ctx, job(fmt.Sprintf("J%d", i), fmt.Sprintf("g%d", i%3), "")); err != nil {
				t.Fatalf("admit on %s: %v", name, err)
			}
		}
		if n, err := queue.Pending(ctx); err != nil || n != 20 {
			t.Errorf("%s pending = %d, %v", name, n, err)
		}
		dup, err := queue.Admit(ctx, job("J99", "g0", "J3"))
		if err != nil || !dup.Duplicate || dup.ID != "J3" {
			t.Errorf("%s duplicate = %+v, %v", name, dup, err)
		}
	}
}

func newRedisForModel(t testing.TB) redis.UniversalClient {
	t.Helper()
	return testserver.QueueRedis(t)
}

// BenchmarkAdmitMany admits as the outbox relay does: a round trip of jobs
// with dedup keys, each in a lane of its own group. It reports the Redis
// CPU and the commands (scripts' own included) each admission costs, which
// a loaded machine's wall time would hide.
func BenchmarkAdmitMany(b *testing.B) {
	ctx := context.Background()
	queue, rdb := newQueue(b)
	jobs := make([]emq.Job, 64)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	redisCPU := serverCPU(b, rdb)
	b.ResetTimer()
	for n := 0; n < b.N; n += len(jobs) {
		for i := range jobs {
			id := fmt.Sprintf("JOB_%09d", n+i)
			jobs[i] = emq.Job{ID: id, Kind: "test.job", Group: "g" + strconv.Itoa((n+i)%1000),
				Payload: []byte(`{"id":"` + id + `","account":"ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1@17"}`), DedupKey: id}
		}
		if _, errs := queue.AdmitMany(ctx, jobs); errors.Join(errs...) != nil {
			b.Fatal(errors.Join(errs...))
		}
	}
	b.StopTimer()
	admitted := float64((b.N + len(jobs) - 1) / len(jobs) * len(jobs))
	if cpu := serverCPU(b, rdb); cpu > 0 {
		b.ReportMetric((cpu-redisCPU)*1e6/admitted, "redis-µs/job")
	}
	b.ReportMetric(float64(commandCalls(b, rdb))/admitted, "commands/job")
}

// BenchmarkAdmit admits one job at a time as a placement does: a dedup
// key, a rate-limit permit and a log entry. Its allocs/op are the client's
// work an admission (the call's keys and arguments, go-redis's command and
// reply), which a loaded machine's wall time would hide.
func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	queue, _ := newQueue(b)
	limit := &emq.RateLimit{Bucket: "key:bench", Limit: emq.Rate{Capacity: emq.MaxBucketSize, PerSecond: emq.MaxBucketSize}}
	b.ReportAllocs()
	b.ResetTimer()
	for n := range b.N {
		id := "JOB_" + strconv.Itoa(n)
		job := emq.Job{ID: id, Kind: "test.job", Group: "acct-" + strconv.Itoa(n%8), DedupKey: "acct:" + id,
			Payload: []byte(`{"id":"` + id + `","account":"ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1@17"}`), RateLimit: limit,
			Log: &emq.LogEntry{ID: id + ".accepted", Type: "order.accepted", Data: []byte(`{"id":"` + id + `"}`)}}
		if _, err := queue.Admit(ctx, job); err != nil {
			b.Fatal(err)
		}
	}
}

// commandCalls is how many commands the server ran since its stats were
// reset, those scripts ran included; 0 on a cluster.
func commandCalls(tb testing.TB, rdb redis.UniversalClient) int64 {
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		return 0
	}
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var calls int64
	for line := range strings.Lines(info) {
		_, stats, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		count, _, _ := strings.Cut(stats, ",")
		n, _ := strconv.ParseInt(count, 10, 64)
		calls += n
	}
	return calls
}
