package settlement

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestCoherenceDedupOutlastsASecondCarry holds the coherence queues' dedup
// retention to what placement.CoherenceDedupRetention says it outlives: the
// sweep's second carry of a row whose marking was lost (the sweep age, this
// worker's sweep interval and the relay's 5 s timeout) fifty times over,
// and a PostgreSQL outage as long as the default retries keep an order alive
// at the most (their whole backoffs: twice OutageOutlasted's halves).
func TestCoherenceDedupOutlastsASecondCarry(t *testing.T) {
	testserver.Parallel(t)
	const relayTimeout = 5 * time.Second
	if ordinary := placement.DefaultSweepAge + sweepInterval + relayTimeout; placement.CoherenceDedupRetention < 50*ordinary {
		t.Errorf("coherence dedup retention %s, under fifty times a second carry's %s", placement.CoherenceDedupRetention, ordinary)
	}
	if outage := 2 * DefaultConfig().OutageOutlasted(); placement.CoherenceDedupRetention <= outage {
		t.Errorf("coherence dedup retention %s, not past the %s of PostgreSQL outage orders outlive", placement.CoherenceDedupRetention, outage)
	}
}

// TestOutageOutlasted holds the sum to the retry script's equal jitter,
// which never waits less than half the backoff; cmd/worker's -max-attempts
// help quotes it for the defaults.
func TestOutageOutlasted(t *testing.T) {
	testserver.Parallel(t)
	tests := []struct {
		name  string
		retry emq.RetryPolicy
		want  time.Duration
	}{
		{name: "defaults: over 4.4 minutes", retry: DefaultConfig().Retry, want: 266350 * time.Millisecond},
		{name: "one attempt, no retry", retry: emq.RetryPolicy{MaxAttempts: 1, BaseDelay: time.Second, MaxDelay: time.Minute}, want: 0},
		{name: "doubling under the cap", retry: emq.RetryPolicy{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Hour}, want: 350 * time.Millisecond},
		{name: "capped from the start", retry: emq.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Second, MaxDelay: time.Second}, want: 1500 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (Config{Retry: tt.retry}).OutageOutlasted(); got != tt.want {
				t.Errorf("OutageOutlasted = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestWorkBesideStopsWhenALoopFails: a coherence loop that fails stops the
// settlement worker too, and its error is what Run returns.
func TestWorkBesideStopsWhenALoopFails(t *testing.T) {
	testserver.Parallel(t)
	broken := errors.New("coherence consumer broke")
	tests := []struct {
		name    string
		loops   []func(context.Context) error
		cancel  bool
		wantErr error
	}{
		{name: "a loop fails", loops: []func(context.Context) error{
			func(ctx context.Context) error { <-ctx.Done(); return nil },
			func(context.Context) error { return broken },
		}, wantErr: broken},
		{name: "all run until cancelled", cancel: true, loops: []func(context.Context) error{
			func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
		}},
		{name: "no loops", cancel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				time.AfterFunc(20*time.Millisecond, cancel)
			}
			workStopped := false
			err := workBeside(ctx, tt.loops, func(ctx context.Context) error {
				<-ctx.Done()
				workStopped = true
				return nil
			})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Errorf("workBeside = %v, want %v", err, tt.wantErr)
			}
			if !workStopped {
				t.Error("the work did not run until stopped")
			}
		})
	}
}
