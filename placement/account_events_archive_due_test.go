package placement_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// Accounts whose events began together fall due over the second half of
// the delay, not in one pass, and never past the delay.
func TestAccountsFallDueSpreadOverTheLaterHalfOfTheDelay(t *testing.T) {
	const accounts, slices = 1000, 10
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{
		{name: "no delay: at once", delay: 0},
		{name: "the default delay", delay: placement.DefaultEventArchiveDelay},
		{name: "a second", delay: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inSlice [slices]int
			for i := range accounts {
				account := "01JAccount" + strconv.Itoa(i)
				wait := placement.DueAfter(account, tc.delay)
				if wait < tc.delay/2 || wait > tc.delay {
					t.Fatalf("%s waits %v at a delay of %v, want between half of it and all of it", account, wait, tc.delay)
				}
				if wait != placement.DueAfter(account, tc.delay) {
					t.Fatalf("%s's wait changed between two calls", account)
				}
				if tc.delay > 0 {
					inSlice[min(slices-1, int(slices*(wait-tc.delay/2)/(tc.delay-tc.delay/2)))]++
				}
			}
			for i, n := range inSlice {
				// 100 a slice if spread evenly; one pass's burst would
				// put them all in one.
				if tc.delay > 0 && (n < accounts/slices/2 || n > 2*accounts/slices) {
					t.Errorf("%d of %d accounts fall due in tenth %d of the later half of the delay, want about %d: %v", n, accounts, i, accounts/slices, inSlice)
				}
			}
		})
	}
}

// The archiver archives each account at its own share of the delay: one
// whose share is short is archived while one whose share is long still
// waits.
func TestTheArchiverWaitsEachAccountsOwnShare(t *testing.T) {
	testserver.Parallel(t)
	const delay = 2 * time.Second
	var early, late string
	for i := 0; early == "" || late == ""; i++ {
		account := fmt.Sprintf("01JSHARE%04d", i)
		switch wait := placement.DueAfter(account, delay); {
		case wait <= 1100*time.Millisecond && early == "":
			early = account
		case wait >= 1900*time.Millisecond && late == "":
			late = account
		}
	}
	f := newArchiveFixture(t)
	archiver := f.archiver(nil, emq.LogHotTail{Count: 5, Age: time.Hour}, placement.WithArchiveDelay(delay))
	pass(t, archiver) // the start's reconcile: nothing yet
	appendEvents(t, f.queue, early, 3)
	appendEvents(t, f.queue, late, 3)
	before := time.Now()
	pass(t, archiver) // hears of both: their waits count from within it
	time.Sleep(1200 * time.Millisecond)
	pass(t, archiver)
	if time.Since(before) >= 1900*time.Millisecond {
		t.Skip("the box is too slow for this timing")
	}
	f.historyOf(t, early, 3)
	events, err := f.history.EventsAfter(context.Background(), late, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 0 {
		t.Fatalf("%s (its wait %v) archived %d events %v after its first: before its share of the delay",
			late, placement.DueAfter(late, delay), len(events), time.Since(before))
	}
}
