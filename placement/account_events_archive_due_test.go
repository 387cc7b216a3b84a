package placement_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/ordergate/ordergate/placement"
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
