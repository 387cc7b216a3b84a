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
		return closedLoopOp{name, func(context.Context) error {
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
