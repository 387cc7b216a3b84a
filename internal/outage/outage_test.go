package outage

import (
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"
)

// The pause starts at the loop's interval (never under the floor), doubles
// with each failure, stops at the ceiling, and is spread by at most ±10%.
func TestBackoff(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		interval time.Duration
		failures int
		want     time.Duration
	}{
		{0, 1, BackoffFloor},
		{0, 3, 4 * BackoffFloor},
		{200 * time.Millisecond, 1, 200 * time.Millisecond},
		{200 * time.Millisecond, 2, 400 * time.Millisecond},
		{time.Second, 5, BackoffCeiling},
		{time.Minute, 1, BackoffCeiling},
	}
	for _, tt := range tests {
		var o Tracker
		for range tt.failures {
			o.Fail(quiet, errors.New("down"))
		}
		for range 50 {
			got := o.Backoff(tt.interval)
			if got < tt.want*9/10 || got > tt.want*11/10 {
				t.Errorf("interval %s, %d failures: %s, want %s ± 10%%", tt.interval, tt.failures, got, tt.want)
			}
		}
		o.Recover(quiet)
		if o.Failures() != 0 {
			t.Errorf("after Recover: %d failures", o.Failures())
		}
	}
}
