package emq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestHandlerIsCancelledWhenItsLeaseIsLost: once the queue no longer holds
// the job for the worker, the handler's context ends with ErrLeaseLost and
// the worker never completes the job, even though the handler returns nil.
func TestHandlerIsCancelledWhenItsLeaseIsLost(t *testing.T) {
	const lease = 600 * time.Millisecond
	tests := []struct {
		name string
		// single needs a server of its own to stop.
		single bool
		// loseLease takes the lease away while the handler runs.
		loseLease func(t *testing.T, queue *emq.Queue, rdb redis.UniversalClient, server *testserver.Redis, id string)
		wantStale bool
		// within bounds the time from losing the lease to the cancellation.
		within time.Duration
	}{
		{
			name: "another worker claimed the job",
			loseLease: func(t *testing.T, queue *emq.Queue, rdb redis.UniversalClient, _ *testserver.Redis, id string) {
				ctx := context.Background()
				// The worker's heartbeat may renew the lease between the two
				// calls, and the worker's own reaper may take the job back
				// first; age the lease again until the job is pending.
				eventually(t, 5*time.Second, "the reap took the job back", func() bool {
					expireLease(t, rdb, queue, id)
					if _, err := queue.Reap(ctx, 10, 100); err != nil {
						t.Fatalf("reap: %v", err)
					}
					return readJob(t, queue, id).State == emq.StatePending
				})
				claims, err := queue.Claim(ctx, 1, time.Minute)
				if err != nil || len(claims) != 1 || claims[0].ID != id || claims[0].Token != 2 {
					t.Fatalf("the other worker's claim = %+v, %v", claims, err)
				}
			},
			wantStale: true,
			// the next heartbeat (every lease/3) hears EMQSTALE
			within: lease/3 + 500*time.Millisecond,
		},
		{
			name:   "the queue server is unreachable",
			single: true,
			loseLease: func(t *testing.T, _ *emq.Queue, _ redis.UniversalClient, server *testserver.Redis, _ string) {
				server.Stop(t)
			},
			// nothing renews the lease, so it runs out where it stands
			within: lease + 500*time.Millisecond,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var queue *emq.Queue
			var rdb redis.UniversalClient
			var server *testserver.Redis
			if tt.single {
				if testserver.ClusterMode() {
					t.Skip("stops its server, which the shared cluster cannot do")
				}
				server = testserver.StartRedis(t)
				queue, rdb = queueOn(t, quickToGiveUp(t, server))
			} else {
				queue, rdb = newQueue(t)
			}
			id := admitPayloads(t, queue, "lost", "block")[0]
			started := make(chan emq.Claim, 1)
			causes := make(chan error, 1)
			done := &completions{}
			registry := prometheus.NewRegistry()
			logger, _ := workerLogger(t)
			// One slot, held by the blocked handler, and no reaping after the
			// first: the test plays the other worker and must win the job.
			worker := startWorker(t, queue, payloadHandler(started, causes), emq.WorkerOptions{
				Concurrency: 1, Lease: lease, ReapInterval: time.Hour,
				Logger: logger, OnComplete: done.record, Metrics: emq.NewMetrics(registry),
			})
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("the handler never started")
			}

			tt.loseLease(t, queue, rdb, server, id)
			lostAt := time.Now()
			select {
			case cause := <-causes:
				if took := time.Since(lostAt); took > tt.within {
					t.Errorf("handler cancelled %s after the lease was lost; want within %s", took, tt.within)
				}
				if !errors.Is(cause, emq.ErrLeaseLost) {
					t.Errorf("cancel cause = %v, want ErrLeaseLost", cause)
				}
				if errors.Is(cause, emq.ErrStale) != tt.wantStale {
					t.Errorf("cancel cause = %v; stale %v, want %v", cause, !tt.wantStale, tt.wantStale)
				}
			case <-time.After(tt.within + 5*time.Second):
				t.Fatal("the handler's context was never cancelled")
			}

			// The handler returned nil: the worker must still drop the result.
			if _, err := worker.stop(t); err != nil {
				t.Errorf("Work = %v", err)
			}
			if n := done.total(); n != 0 {
				t.Errorf("the worker reported %d completions of a job it no longer held", n)
			}
			values := gathered(t, registry)
			if values["emq_jobs_completed_total"] != 0 {
				t.Errorf("emq_jobs_completed_total = %v, want 0", values["emq_jobs_completed_total"])
			}
			if tt.wantStale && values["emq_stale_refusals_total"] != 1 {
				t.Errorf("emq_stale_refusals_total = %v, want 1", values["emq_stale_refusals_total"])
			}
			if !tt.single {
				if info := readJob(t, queue, id); info.State != emq.StateActive || info.Attempts != 2 {
					t.Errorf("job = %s attempts %d, want still active under the other worker's token 2", info.State, info.Attempts)
				}
				if err := queue.Complete(context.Background(), id, 2); err != nil {
					t.Errorf("the other worker's complete: %v", err)
				}
			}
		})
	}
}
