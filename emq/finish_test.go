package emq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestWorkerRetriesAndBuriesFailedJobs(t *testing.T) {
	testserver.Parallel(t)
	errDeclined := errors.New("card declined")
	tests := []struct {
		name         string
		maxAttempts  int
		handle       func(job emq.Claim) error
		wantState    string
		wantAttempts int64
		wantError    string
		wantCounts   map[string]float64
	}{
		{
			name: "fails twice, then succeeds",
			handle: func(job emq.Claim) error {
				if job.Token < 3 {
					return fmt.Errorf("attempt %d: exchange busy", job.Token)
				}
				return nil
			},
			wantState: emq.StateDone, wantAttempts: 3,
			wantCounts: map[string]float64{"emq_jobs_completed_total": 1, "emq_jobs_retried_total": 2, "emq_jobs_dead_total": 0},
		},
		{
			name:      "a permanent error is dead at once",
			handle:    func(emq.Claim) error { return emq.Permanent(fmt.Errorf("order refused: %w", errDeclined)) },
			wantState: emq.StateDead, wantAttempts: 1, wantError: "order refused: card declined",
			wantCounts: map[string]float64{"emq_jobs_completed_total": 0, "emq_jobs_retried_total": 0, "emq_jobs_dead_total": 1},
		},
		{
			name: "a panic counts as an error",
			handle: func(job emq.Claim) error {
				if job.Token == 1 {
					panic("nil order book")
				}
				return nil
			},
			wantState: emq.StateDone, wantAttempts: 2,
			wantCounts: map[string]float64{"emq_jobs_completed_total": 1, "emq_jobs_retried_total": 1},
		},
		{
			name:        "spent attempts are dead with the last error",
			maxAttempts: 3,
			handle:      func(job emq.Claim) error { return fmt.Errorf("attempt %d failed", job.Token) },
			wantState:   emq.StateDead, wantAttempts: 3, wantError: "attempt 3 failed",
			wantCounts: map[string]float64{"emq_jobs_completed_total": 0, "emq_jobs_retried_total": 2, "emq_jobs_dead_total": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, _ := newQueue(t)
			id := admitPayloads(t, queue, "retry", "ok")[0]
			done := &completions{}
			registry := prometheus.NewRegistry()
			logger, _ := workerLogger(t)
			startWorker(t, queue, func(ctx context.Context, job emq.Claim) error { return tt.handle(job) }, emq.WorkerOptions{
				Lease:           2 * time.Second,
				Retry:           emq.RetryPolicy{MaxAttempts: tt.maxAttempts, BaseDelay: 10 * time.Millisecond, MaxDelay: 40 * time.Millisecond},
				PromoteInterval: 20 * time.Millisecond,
				Logger:          logger,
				Metrics:         emq.NewMetrics(registry),
				OnComplete:      done.record,
			})
			wantCompletions := 0
			if tt.wantState == emq.StateDone {
				wantCompletions = 1
			}
			// The worker reports a move (OnComplete, counters) once the
			// queue's answer is back, a moment after the job shows its state.
			var info emq.JobInfo
			var values map[string]float64
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				info, values = readJob(t, queue, id), gathered(t, registry)
				settled := info.State == tt.wantState && done.of(id) == wantCompletions
				for name, want := range tt.wantCounts {
					settled = settled && values[name] == want
				}
				if settled || time.Now().After(deadline) {
					break
				}
			}
			if info.State != tt.wantState {
				t.Fatalf("state = %s, want %s", info.State, tt.wantState)
			}
			if info.Attempts != tt.wantAttempts {
				t.Errorf("attempts = %d, want %d", info.Attempts, tt.wantAttempts)
			}
			if tt.wantError != "" && info.LastError != tt.wantError {
				t.Errorf("last error = %q, want %q", info.LastError, tt.wantError)
			}
			if got := done.of(id); got != wantCompletions {
				t.Errorf("completions = %d, want %d", got, wantCompletions)
			}
			for name, want := range tt.wantCounts {
				if values[name] != want {
					t.Errorf("%s = %v, want %v", name, values[name], want)
				}
			}
		})
	}
}
