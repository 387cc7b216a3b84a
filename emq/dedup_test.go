package emq

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ordergate/ordergate/internal/testserver"
)

func TestDedupWindows(t *testing.T) {
	queue := (&Client{}).Queue("work") // naming keys needs no server
	const day = dedupWindowLength
	base := time.UnixMilli(42 * day.Milliseconds())
	window := func(w int) string { return fmt.Sprintf("emq:{work}:dedup:%d", w) }
	tests := []struct {
		name      string
		retention time.Duration
		now       time.Time
		others    []string
		expiresAt time.Time
	}{
		{"start of a window", 24 * time.Hour, base, []string{window(41)}, base.Add(2*day + time.Minute)},
		{"middle of a window", 24 * time.Hour, base.Add(day / 2), []string{window(41)}, base.Add(2*day + time.Minute)},
		{"just outside the skew allowance of its end", 24 * time.Hour, base.Add(day - time.Minute - time.Millisecond), []string{window(41)}, base.Add(2*day + time.Minute)},
		{"within the skew allowance of its end", 24 * time.Hour, base.Add(day - time.Minute), []string{window(41), window(43)}, base.Add(2*day + time.Minute)},
		{"a retention shorter than a window still looks one back", 10 * time.Minute, base, []string{window(41)}, base.Add(2*day + time.Minute)},
		{"a longer retention looks further back and lives longer", 48 * time.Hour, base, []string{window(40), window(41)}, base.Add(3*day + time.Minute)},
		{"a retention just over a day takes two windows", 25 * time.Hour, base, []string{window(40), window(41)}, base.Add(3*day + time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write, others, expireAt := queue.dedupWindows(tt.retention, tt.now)
			if write != window(42) || !slices.Equal(others, tt.others) {
				t.Errorf("windows = %s + %v, want %s + %v", write, others, window(42), tt.others)
			}
			if want := tt.expiresAt.UnixMilli(); expireAt != want {
				t.Errorf("expires at %d, want %d", expireAt, want)
			}
		})
	}
}

// TestDedupAcrossWindows admits the same dedup key at two moments by two
// clocks and checks whether the second admission sees the first.
func TestDedupAcrossWindows(t *testing.T) {
	const r, day = 24 * time.Hour, dedupWindowLength
	// Windows in the near future, so that their expiry is too.
	base := time.UnixMilli((time.Now().UnixMilli()/day.Milliseconds() + 1) * day.Milliseconds())
	tests := []struct {
		name                         string
		first, second                time.Time
		firstRetention, secondRetain time.Duration
		duplicate                    bool
	}{
		{"same window", base.Add(time.Minute), base.Add(2 * time.Minute), r, r, true},
		{"next window, within the retention", base.Add(23 * time.Hour), base.Add(day + 22*time.Hour), r, r, true},
		{"two windows on", base.Add(time.Minute), base.Add(2*day + time.Minute), r, r, false},
		{"a clock ahead wrote to the next window", base.Add(day + 10*time.Second), base.Add(day - 20*time.Second), r, r, true},
		{"a clock ahead by more than the allowance is missed", base.Add(day + 10*time.Second), base.Add(day - 2*time.Minute), r, r, false},
		{"a clock behind wrote to the previous window", base.Add(day - 10*time.Second), base.Add(day + 20*time.Second), r, r, true},
		// A retention changed between the two admissions (a rolling deploy).
		{"a longer retention sees a key kept for a shorter one", base.Add(time.Hour), base.Add(day + time.Hour), r, 48 * time.Hour, true},
		{"a shorter retention sees a key kept for a longer one", base.Add(time.Hour), base.Add(2 * time.Hour), 48 * time.Hour, time.Hour, true},
		{"a longer retention holds past two windows", base.Add(time.Hour), base.Add(2*day + 30*time.Minute), 48 * time.Hour, 48 * time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue := dedupQueue(t)
			admit := func(id string, now time.Time, retention time.Duration) Admission {
				t.Helper()
				return admitAt(t, queue, Job{ID: id, Kind: "test.job", Group: "g", DedupKey: "key", Fingerprint: "fp-" + id, DedupRetention: retention}, now)
			}
			admit("J1", tt.first, tt.firstRetention)
			got := admit("J2", tt.second, tt.secondRetain)
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

// TestDedupWindowKeepsTheLongestExpiry: an admission under a short retention
// must not cut short the window a longer retention's key lives in.
func TestDedupWindowKeepsTheLongestExpiry(t *testing.T) {
	ctx := context.Background()
	const day = dedupWindowLength
	base := time.UnixMilli((time.Now().UnixMilli()/day.Milliseconds() + 1) * day.Milliseconds())
	queue := dedupQueue(t)
	for i, retention := range []time.Duration{48 * time.Hour, time.Hour} {
		id := fmt.Sprintf("J%d", i)
		admitAt(t, queue, Job{ID: id, Kind: "test.job", Group: "g", DedupKey: id, DedupRetention: retention}, base.Add(time.Duration(i+1)*time.Hour))
	}
	window, _, _ := queue.dedupWindows(time.Hour, base)
	expires, err := queue.client.rdb.PExpireTime(ctx, window).Result()
	if want := base.Add(3*day + time.Minute); err != nil || expires != time.Duration(want.UnixMilli())*time.Millisecond {
		t.Errorf("window expires at %v (%v), want %v: the 48 h key's end", expires, err, want)
	}
}

// dedupQueue is a queue "work" accepting "test.job" on a fresh Redis (or the
// shared cluster).
func dedupQueue(t testing.TB) *Queue {
	t.Helper()
	client, err := Connect(context.Background(), testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("work")
	if err := queue.Declare(context.Background(), "test.job"); err != nil {
		t.Fatal(err)
	}
	return queue
}

// admitAt admits job as an admitting process whose clock reads now would.
func admitAt(t testing.TB, queue *Queue, job Job, now time.Time) Admission {
	t.Helper()
	keys, args, err := queue.admitCall(job, now)
	if err != nil {
		t.Fatal(err)
	}
	admission, err := queue.admission(job, admitScript.Run(context.Background(), queue.client.rdb, keys, args...))
	if err != nil {
		t.Fatal(err)
	}
	return admission
}
