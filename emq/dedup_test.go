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
	const r = 10 * time.Minute
	base := time.UnixMilli(42 * r.Milliseconds())
	window := func(w int) string { return fmt.Sprintf("emq:{work}:dedup:600000:%d", w) }
	tests := []struct {
		name   string
		now    time.Time
		others []string
	}{
		{"start of a window", base, []string{window(41)}},
		{"middle of a window", base.Add(r / 2), []string{window(41)}},
		{"just outside the skew allowance of its end", base.Add(r - time.Minute - time.Millisecond), []string{window(41)}},
		{"within the skew allowance of its end", base.Add(r - time.Minute), []string{window(41), window(43)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			write, others, expireAt := queue.dedupWindows(r, tt.now)
			if write != window(42) || !slices.Equal(others, tt.others) {
				t.Errorf("windows = %s + %v, want %s + %v", write, others, window(42), tt.others)
			}
			if want := base.Add(2*r + time.Minute).UnixMilli(); expireAt != want {
				t.Errorf("expires at %d, want %d: the end of the next window plus the allowance", expireAt, want)
			}
		})
	}
}

// TestDedupAcrossWindows admits the same dedup key at two moments by two
// clocks and checks whether the second admission sees the first.
func TestDedupAcrossWindows(t *testing.T) {
	const r = 10 * time.Minute
	// Windows in the near future, so that their expiry is too.
	base := time.UnixMilli((time.Now().UnixMilli()/r.Milliseconds() + 1) * r.Milliseconds())
	tests := []struct {
		name          string
		first, second time.Time
		duplicate     bool
	}{
		{"same window", base.Add(time.Minute), base.Add(2 * time.Minute), true},
		{"next window, within the retention", base.Add(9 * time.Minute), base.Add(18 * time.Minute), true},
		{"two windows on", base.Add(time.Minute), base.Add(2*r + time.Minute), false},
		{"a clock ahead wrote to the next window", base.Add(r + 10*time.Second), base.Add(r - 20*time.Second), true},
		{"a clock ahead by more than the allowance is missed", base.Add(r + 10*time.Second), base.Add(r - 2*time.Minute), false},
		{"a clock behind wrote to the previous window", base.Add(r - 10*time.Second), base.Add(r + 20*time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			client, err := Connect(ctx, testserver.QueueRedis(t))
			if err != nil {
				t.Fatal(err)
			}
			queue := client.Queue("work")
			if err := queue.Declare(ctx, "test.job"); err != nil {
				t.Fatal(err)
			}
			admit := func(id string, now time.Time) Admission {
				t.Helper()
				job := Job{ID: id, Kind: "test.job", Group: "g", DedupKey: "key", Fingerprint: "fp-" + id, DedupRetention: r}
				keys, args, err := queue.admitCall(job, now)
				if err != nil {
					t.Fatal(err)
				}
				admission, err := queue.admission(id, admitScript.Run(ctx, client.rdb, keys, args...))
				if err != nil {
					t.Fatal(err)
				}
				return admission
			}
			admit("J1", tt.first)
			got := admit("J2", tt.second)
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
