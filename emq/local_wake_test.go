package emq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestAJobThisClientMadePendingWakesAnIdleWorker: a worker whose queue
// ran empty sleeps its idle poll, here far longer than the test waits,
// without a wait on the queue server (no WakeOnAdmission); a job its own
// client makes pending ends the sleep: admitted, or promoted after a
// retry's backoff (a lease taken back: the next test).
func TestAJobThisClientMadePendingWakesAnIdleWorker(t *testing.T) {
	const idlePoll = 20 * time.Second
	tests := []struct {
		name string
		// pending makes a job pending on queue once the worker is idle and
		// returns its id; the worker's handler fails a job's first attempt
		// when its payload is "fail-once".
		pending func(t *testing.T, queue *emq.Queue) string
	}{
		{"admitted", func(t *testing.T, queue *emq.Queue) string {
			return admitPayloads(t, queue, "a", "ok")[0]
		}},
		{"promoted after its retry's backoff", func(t *testing.T, queue *emq.Queue) string {
			return admitPayloads(t, queue, "r", "fail-once")[0]
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, _ := newQueue(t)
			started := make(chan emq.Claim, 8)
			var failed atomic.Bool
			handler := func(ctx context.Context, job emq.Claim) error {
				started <- job
				if string(job.Payload) == "fail-once" && failed.CompareAndSwap(false, true) {
					return errors.New("first attempt fails")
				}
				return nil
			}
			startWorker(t, queue, handler, emq.WorkerOptions{
				Concurrency: 4, Lease: 10 * time.Second, IdlePoll: idlePoll,
				ReapInterval: 100 * time.Millisecond, PromoteInterval: 100 * time.Millisecond,
				Retry: emq.RetryPolicy{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 100 * time.Millisecond},
			})
			// Let the worker claim the queue empty and sleep.
			time.Sleep(300 * time.Millisecond)
			id := tt.pending(t, queue)
			began := time.Now()
			for attempt := 1; ; attempt++ {
				select {
				case claim := <-started:
					if claim.ID != id {
						t.Fatalf("the worker started %s, want %s", claim.ID, id)
					}
					if tt.name == "promoted after its retry's backoff" && attempt == 1 {
						continue // the failed attempt; the retry follows
					}
					t.Logf("started %s after %s", id, time.Since(began))
					return
				case <-time.After(idlePoll / 4):
					t.Fatalf("%s not started within %s (the idle poll is %s)", id, idlePoll/4, idlePoll)
				}
			}
		})
	}
}

// TestAnIdleWorkerReapsALeaseWithinItsEndAndItsInterval: an idle worker's
// claims come an idle poll apart, and say when the first lease runs out,
// so its reaper makes no call while nothing is leased, and takes back a
// lease longer than the poll by its end and a reap interval, as a plain
// tick would.
func TestAnIdleWorkerReapsALeaseWithinItsEndAndItsInterval(t *testing.T) {
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	calls := &scriptCalls{byFirst: map[string]int{}}
	rdb.AddHook(calls)
	queue, _ := queueOn(t, rdb)
	// Another client's jobs: its admissions wake none of this worker's loops.
	other, _ := queueOn(t, rdb)
	logger, _ := workerLogger(t)
	done := &completions{}
	const idlePoll, reapInterval = 500 * time.Millisecond, 100 * time.Millisecond
	startWorker(t, queue, func(context.Context, emq.Claim) error { return nil }, emq.WorkerOptions{
		Lease: 10 * time.Second, IdlePoll: idlePoll, ReapInterval: reapInterval, Logger: logger, OnComplete: done.record,
	})
	time.Sleep(300 * time.Millisecond)
	calls.reset()
	time.Sleep(2 * time.Second)
	counts := calls.reset()
	claims, promotes, reaps := counts[queue.Key("jobs")], counts[queue.Key("delayed")], counts[queue.Key("active")]
	t.Logf("in 2s idle: %d claims, %d promotes, %d reaps", claims, promotes, reaps)
	if claims < 2 || claims > 6 {
		t.Errorf("%d claims in 2s idle; want about 4, one a poll of %s", claims, idlePoll)
	}
	// Plain ticks make 8 promotes and 20 reaps; a claim held up on a loaded
	// machine may let one through.
	if promotes > 1 || reaps > 1 {
		t.Errorf("%d promotes and %d reaps in 2s idle; want none beside the claims", promotes, reaps)
	}

	admitPayloads(t, other, "g", "ok")
	const lease = 2 * idlePoll
	dead, err := other.Claim(ctx, 1, lease)
	if err != nil || len(dead) != 1 {
		t.Fatalf("the doomed claim took %d jobs, %v", len(dead), err)
	}
	claimedAt := time.Now()
	eventually(t, 10*time.Second, "the expired lease's job completed", func() bool { return done.total() == 1 })
	took := time.Since(claimedAt)
	t.Logf("a %s lease's job completed %s after the claim", lease, took)
	if bound := lease + reapInterval*11/10 + 500*time.Millisecond; took > bound {
		t.Errorf("the expired lease's job completed %s after the claim; want within %s", took, bound)
	}
}
