package emq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
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
	testserver.Parallel(t)
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

// scriptCalls counts the script runs a go-redis client sends, by the first
// key they name.
type scriptCalls struct {
	mu      sync.Mutex
	byFirst map[string]int
}

func (s *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 3 && (cmd.Name() == "evalsha" || cmd.Name() == "eval") {
			s.mu.Lock()
			s.byFirst[fmt.Sprint(args[3])]++
			s.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (s *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *scriptCalls) reset() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := s.byFirst
	s.byFirst = map[string]int{}
	return counts
}

// TestIdleWorkerLeavesMaintenanceToItsClaims: the claims of a worker on an
// empty queue look for due retries and expired leases as they poll, so the
// promoter and the reaper, which poll less often, make no calls of their
// own; once a claim sees work due, the moves run at once.
func TestIdleWorkerLeavesMaintenanceToItsClaims(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	calls := &scriptCalls{byFirst: map[string]int{}}
	rdb.AddHook(calls)
	queue, _ := queueOn(t, rdb)
	logger, _ := workerLogger(t)
	done := &completions{}
	startWorker(t, queue, func(context.Context, emq.Claim) error { return nil },
		emq.WorkerOptions{Logger: logger, OnComplete: done.record})

	// Past the start's runs and the idle poll's growth to its ceiling.
	time.Sleep(500 * time.Millisecond)
	calls.reset()
	time.Sleep(2 * time.Second)
	counts := calls.reset()
	claims, promotes, reaps := counts[queue.Key("jobs")], counts[queue.Key("delayed")], counts[queue.Key("active")]
	t.Logf("in 2s idle: %d claims, %d promotes, %d reaps", claims, promotes, reaps)
	if claims < 5 {
		t.Fatalf("%d claims in 2s idle; the worker should poll every 200ms", claims)
	}
	// Plain ticks make 8 promotes and 4 reaps; a claim held up on a loaded
	// machine may let one through.
	if promotes > 2 || reaps > 1 {
		t.Errorf("%d promotes and %d reaps in 2s idle; want none beside the claims", promotes, reaps)
	}

	// A lease that ran out is taken back and the job run by the idle worker
	// within its claim poll, not the reap interval after it. The job is
	// another client's: one of the worker's own wakes it at once.
	other, _ := queueOn(t, rdb)
	ids := admitPayloads(t, other, "g", "ok")
	if dead, err := other.Claim(ctx, 1, 50*time.Millisecond); err != nil || len(dead) != 1 {
		t.Fatalf("the doomed claim took %d jobs, %v", len(dead), err)
	}
	claimedAt := time.Now()
	eventually(t, 5*time.Second, "the expired lease's job completed", func() bool { return done.total() == len(ids) })
	t.Logf("an expired lease's job completed %s after a 50ms lease was taken", time.Since(claimedAt))
	if counts := calls.reset(); counts[queue.Key("active")] == 0 {
		t.Errorf("no reap ran, yet the job came back")
	}
}

// TestFullWorkerStillReaps: a worker whose slots are all taken claims
// nothing, so no claim tells its reaper anything; the reaper still takes
// back a lease that ran out within lease + reap interval.
func TestFullWorkerStillReaps(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	logger, _ := workerLogger(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	handler := func(ctx context.Context, _ emq.Claim) error {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	admitPayloads(t, queue, "busy", "block")
	const reapInterval = 100 * time.Millisecond
	startWorker(t, queue, handler, emq.WorkerOptions{
		Concurrency: 1, Lease: 5 * time.Second, ReapInterval: reapInterval, Logger: logger,
	})
	// Cleanups run last first: the handler returns before the worker drains.
	t.Cleanup(func() { close(release) })
	<-started
	// Past the claims the worker made before its slot filled.
	time.Sleep(300 * time.Millisecond)
	admitPayloads(t, queue, "dead", "doomed")
	const lease = 200 * time.Millisecond
	if dead, err := queue.Claim(ctx, 1, lease); err != nil || len(dead) != 1 {
		t.Fatalf("the doomed claim took %d jobs, %v", len(dead), err)
	}
	claimedAt := time.Now()
	eventually(t, 5*time.Second, "the expired lease taken back", func() bool {
		stats, err := queue.Stats(ctx)
		return err == nil && stats.Pending == 1
	})
	took := time.Since(claimedAt)
	// The reap interval's jitter, then slack for a loaded machine.
	if bound := lease + reapInterval*11/10 + 500*time.Millisecond; took > bound {
		t.Errorf("the expired lease came back %s after the claim; want within %s", took, bound)
	}
	t.Logf("an expired lease came back %s after a %s lease was taken (reap interval %s)", took, lease, reapInterval)
}
