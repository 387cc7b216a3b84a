package settlement_test

import (
	"runtime/debug"
	"testing"

	"github.com/ordergate/ordergate/settlement"
)

func TestTuneGCKeepsWhatGOGCSays(t *testing.T) {
	for _, tc := range []struct {
		name, gogc string
		want       int
	}{
		{name: "GOGC unset: the worker's target", gogc: "", want: settlement.GCPercent},
		{name: "GOGC set: the runtime's, as it read it", gogc: "150", want: 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The runtime read GOGC at start; set the target it would have.
			before := debug.SetGCPercent(150)
			t.Cleanup(func() { debug.SetGCPercent(before) })
			restore := settlement.TuneGC(func(name string) string {
				if name == "GOGC" {
					return tc.gogc
				}
				return ""
			})
			if got := debug.SetGCPercent(tc.want); got != tc.want {
				t.Errorf("target after TuneGC: %d, want %d", got, tc.want)
			}
			restore()
			if got := debug.SetGCPercent(150); got != 150 {
				t.Errorf("target after restore: %d, want the one before, 150", got)
			}
		})
	}
}
