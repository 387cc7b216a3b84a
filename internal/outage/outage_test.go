package outage

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
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

// Of many goroutines meeting a fault at once, one logs; then none until
// LogEvery has passed.
func TestSparseLetsOneLineThroughPerInterval(t *testing.T) {
	var sparse Sparse
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			if sparse.Allow() {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := allowed.Load(); n != 1 {
		t.Errorf("%d of 50 goroutines logged at once, want 1", n)
	}
	if sparse.Allow() {
		t.Error("logged again at once, want nothing until LogEvery passed")
	}
	sparse.last.Add(-int64(LogEvery))
	if !sparse.Allow() {
		t.Error("nothing logged once LogEvery passed")
	}
}
