package emq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
)

// TestWorkerReclaimsJobsOfADeadWorker: a worker that claimed jobs and died
// (simulated by claiming and never coming back) loses them to a live worker
// once the lease has run out and the next reap has run.
func TestWorkerReclaimsJobsOfADeadWorker(t *testing.T) {
	tests := []struct {
		name         string
		lease        time.Duration
		reapInterval time.Duration // 0: the runtime's default, Lease/4
	}{
		{name: "explicit reap interval", lease: 600 * time.Millisecond, reapInterval: 150 * time.Millisecond},
		{name: "default reap interval", lease: 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, _ := newQueue(t)
			ids := admitPayloads(t, queue, "dead", repeated("ok", 5)...)
			dead, err := queue.Claim(context.Background(), len(ids), tt.lease)
			if err != nil || len(dead) != len(ids) {
				t.Fatalf("the doomed worker claimed %d jobs, %v", len(dead), err)
			}
			diedAt := time.Now()

			var mu sync.Mutex
			reclaimedAfter := make(map[string]time.Duration)
			handler := func(ctx context.Context, job emq.Claim) error {
				mu.Lock()
				defer mu.Unlock()
				reclaimedAfter[job.ID] = time.Since(diedAt)
				if job.Token != 2 {
					return emq.Permanent(fmt.Errorf("token %d, want 2", job.Token))
				}
				return nil
			}
			done := &completions{}
			logger, _ := workerLogger(t)
			startWorker(t, queue, handler, emq.WorkerOptions{
				Lease: tt.lease, ReapInterval: tt.reapInterval, Logger: logger, OnComplete: done.record,
			})
			eventually(t, 10*time.Second, "the dead worker's jobs completed", func() bool { return done.total() == len(ids) })

			reapInterval := tt.reapInterval
			if reapInterval == 0 {
				reapInterval = tt.lease / 4
			}
			// The live worker's idle poll (at most 200ms) comes on top of
			// lease + reap interval; the rest is slack for a loaded machine.
			bound := tt.lease + reapInterval + 200*time.Millisecond + time.Second
			mu.Lock()
			defer mu.Unlock()
			var slowest time.Duration
			for _, id := range ids {
				after := reclaimedAfter[id]
				if after < tt.lease {
					t.Errorf("%s was claimed again %s after its worker died, before the %s lease ran out", id, after, tt.lease)
				}
				slowest = max(slowest, after)
			}
			if slowest > bound {
				t.Errorf("the last job was claimed again %s after its worker died; want within %s", slowest, bound)
			}
			t.Logf("dead worker's jobs claimable again after at most %s (lease %s, reap interval %s)", slowest, tt.lease, reapInterval)
		})
	}
}

// TestWorkerSamplesQueueDepths: the gauges show the queue as it is, lanes
// included, without inspecting every job.
//
// The blocker holds the worker's one slot until the test lets it go, and
// the test stops the worker only once the queue is empty: a blocker left
// running at the stop had its release race the drain's reserve (20 ms of a
// 200 ms drain timeout), which a loaded machine missed ("drain left jobs
// leased"). The drain's release is drain_test.go's to prove.
func TestWorkerSamplesQueueDepths(t *testing.T) {
	queue, _ := newQueue(t)
	blocker := admitPayloads(t, queue, "first", "blocker")[0]
	started := make(chan emq.Claim, 1)
	unblock := make(chan struct{})
	handler := payloadHandler(nil, nil)
	registry := prometheus.NewRegistry()
	// A second NewMetrics on the same registry shares the first's series.
	emq.NewMetrics(registry)
	logger, _ := workerLogger(t)
	worker := startWorker(t, queue, func(ctx context.Context, claim emq.Claim) error {
		if claim.ID == blocker {
			started <- claim
			<-unblock
			return nil
		}
		return handler(ctx, claim)
	}, emq.WorkerOptions{
		Concurrency: 1, DrainTimeout: 200 * time.Millisecond,
		Logger: logger, Metrics: emq.NewMetrics(registry), MetricsInterval: 20 * time.Millisecond,
	})
	<-started
	admitPayloads(t, queue, "busy", "ok", "ok", "ok")
	admitPayloads(t, queue, "quiet", "ok")
	want := map[string]float64{
		"emq_pending_jobs": 4, "emq_active_jobs": 1, "emq_lanes": 2, "emq_lane_depth_max": 3,
		"emq_delayed_jobs": 0, "emq_dead_jobs": 0,
	}
	var values map[string]float64
	eventually(t, 5*time.Second, "the gauges show 4 pending jobs in 2 lanes", func() bool {
		values = gathered(t, registry)
		for name, value := range want {
			if values[name] != value {
				return false
			}
		}
		return true
	})
	close(unblock)
	eventually(t, 10*time.Second, "the gauges show the queue empty", func() bool {
		values = gathered(t, registry)
		return values["emq_pending_jobs"] == 0 && values["emq_active_jobs"] == 0 && values["emq_lanes"] == 0
	})
	if _, err := worker.stop(t); err != nil {
		t.Errorf("Work = %v", err)
	}
	if info := readJob(t, queue, blocker); info.State != emq.StateDone {
		t.Errorf("blocking job is %s, want done", info.State)
	}
}
