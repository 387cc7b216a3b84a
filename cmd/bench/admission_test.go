package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestAlternatingTakesTurns checks that the two loads run in turns, a b then
// b a, that each one's total is its own, and that the ratio of each round is
// b's rate over a's: b costs twice a's time per call, so about one half.
// The costs are tens of milliseconds so that a busy machine's scheduling
// delay (added to both) barely moves the ratio.
func TestAlternatingTakesTurns(t *testing.T) {
	var mu sync.Mutex
	var turns []string
	op := func(name string, cost time.Duration) closedLoopOp {
		return closedLoopOp{name: name, op: func(context.Context) error {
			mu.Lock()
			if len(turns) == 0 || turns[len(turns)-1] != name {
				turns = append(turns, name)
			}
			mu.Unlock()
			time.Sleep(cost)
			return nil
		}}
	}
	a, b := op("a", 20*time.Millisecond), op("b", 40*time.Millisecond)
	resultA, resultB, ratios := alternating(context.Background(), 4, 800*time.Millisecond, 200*time.Millisecond, func(string, ...any) {}, a, b)

	// a b, b a, a b, b a: with the back-to-back turns of one load merged,
	// a b a b a (strict a b rounds would give a b a b a b a b).
	if want := []string{"a", "b", "a", "b", "a"}; !slices.Equal(turns, want) {
		t.Errorf("turns %v, want %v", turns, want)
	}
	if resultA.Name != "a" || resultB.Name != "b" || resultA.Concurrency != 4 || resultB.Concurrency != 4 {
		t.Errorf("results named %q and %q at concurrency %d and %d", resultA.Name, resultB.Name, resultA.Concurrency, resultB.Concurrency)
	}
	for _, r := range []loadResult{resultA, resultB} {
		if r.Seconds < 0.8 || r.Seconds > 1.2 || r.Errors != 0 {
			t.Errorf("%s ran %.2f s with %d errors, want about 0.8 s and none", r.Name, r.Seconds, r.Errors)
		}
	}
	if len(ratios) != 4 {
		t.Fatalf("%d round ratios, want 4", len(ratios))
	}
	// One round is a fifth of a second, so on a loaded machine a single
	// late wake-up moves its ratio by a third; each round must still show
	// b slower than a, and the whole run the half that the costs make.
	for i, ratio := range ratios {
		if ratio <= 0.1 || ratio >= 0.95 {
			t.Errorf("round %d: ratio %.2f, want b's rate below a's", i+1, ratio)
		}
	}
	if whole := resultB.PerSecond / resultA.PerSecond; whole < 0.3 || whole > 0.7 {
		t.Errorf("overall ratio %.2f, want about 0.5", whole)
	}
}

// TestOpenLoopAtKeepsItsScheduleAndCountsQueueing offers 100 requests/s
// for 300 ms to one sender whose request takes 20 ms, so requests queue:
// each must still be scheduled 10 ms after the one before, start no
// earlier than scheduled, and be timed from its scheduled time, queueing
// included (a closed loop would report 20 ms for each).
func TestOpenLoopAtKeepsItsScheduleAndCountsQueueing(t *testing.T) {
	const (
		rate    = 100
		cost    = 20 * time.Millisecond
		total   = 30
		spacing = time.Second / rate
	)
	var mu sync.Mutex
	scheduled := make([]time.Time, total)
	started := make([]time.Time, total)
	calls := 0
	r := openLoopAt(context.Background(), "test", rate, 1, total*spacing, func(string, ...any) {}, func(_ context.Context, i int, at time.Time) error {
		mu.Lock()
		scheduled[i], started[i] = at, time.Now()
		calls++
		mu.Unlock()
		time.Sleep(cost)
		return nil
	})
	if calls != total || r.Orders != total || r.Errors != 0 {
		t.Fatalf("%d calls, %d orders, %d errors; want %d, %d, 0", calls, r.Orders, r.Errors, total, total)
	}
	for i := range total {
		if got := scheduled[i].Sub(scheduled[0]); got != time.Duration(i)*spacing {
			t.Errorf("request %d scheduled %v after the first, want %v", i, got, time.Duration(i)*spacing)
		}
		if started[i].Before(scheduled[i]) {
			t.Errorf("request %d started %v before its scheduled time", i, scheduled[i].Sub(started[i]))
		}
	}
	// One sender serves one request every 20 ms at best, so request i
	// starts no earlier than i × 20 ms and waits i × 10 ms or more past
	// its schedule: the last one's latency is at least 29 × 10 + 20 ms,
	// the median's (the 15th of 30, request 14) 14 × 10 + 20.
	if last := 29*spacing + cost; r.MaxMs < ms(last) {
		t.Errorf("max latency %.1f ms, want ≥ %.1f ms (the queueing behind the earlier requests)", r.MaxMs, ms(last))
	}
	if median := 14*spacing + cost; r.P50Ms < ms(median) {
		t.Errorf("p50 %.1f ms, want ≥ %.1f ms", r.P50Ms, ms(median))
	}
	// Request 29 waits for the sender from its schedule (290 ms) until the
	// 29 before it are done (580 ms at best): the lag to a sender shows
	// that wait, apart from the ticker's own lateness.
	if r.TakenP99Ms < 280 || r.ReleaseP99Ms > r.TakenP99Ms {
		t.Errorf("lag p99 to a sender %.1f ms, to the release %.1f ms; want ≥ 280 ms and the release's below it", r.TakenP99Ms, r.ReleaseP99Ms)
	}
	if r.TargetRate != rate {
		t.Errorf("target rate %v, want %v", r.TargetRate, rate)
	}
}

func TestScheduledAtSpacesRequestsEvenly(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rate float64
		i    int
		want time.Duration
	}{
		{1000, 0, 0},
		{1000, 1, time.Millisecond},
		{1000, 60_000, time.Minute},
		{3, 1, 333_333_333},
		{3, 3, time.Second},
		{1234.5, 1234, 999_594_977},
	} {
		if got := scheduledAt(start, c.rate, c.i).Sub(start); got != c.want {
			t.Errorf("rate %v, request %d: %v after the start, want %v", c.rate, c.i, got, c.want)
		}
	}
}
