package emq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/logbuffer"
	"github.com/ordergate/ordergate/internal/testserver"
)

// workerLogger returns a debug-level JSON logger whose lines the test prints
// only when it fails, so passing runs stay quiet.
func workerLogger(t testing.TB) (*slog.Logger, *logbuffer.Buffer) {
	t.Helper()
	logs := &logbuffer.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	return slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), logs
}

// runningWorker is a Queue.Work running in a goroutine.
type runningWorker struct {
	cancel  context.CancelFunc
	result  chan error
	once    sync.Once
	err     error
	stopped time.Duration
}

// startWorker runs queue.Work until the test stops it or ends.
func startWorker(t testing.TB, queue *emq.Queue, handler emq.Handler, opts emq.WorkerOptions) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	worker := &runningWorker{cancel: cancel, result: make(chan error, 1)}
	go func() { worker.result <- queue.Work(ctx, handler, opts) }()
	t.Cleanup(func() { worker.stop(t) })
	return worker
}

// stop cancels Work's context and returns Work's result and how long it took
// to return.
func (w *runningWorker) stop(t testing.TB) (time.Duration, error) {
	t.Helper()
	w.once.Do(func() {
		began := time.Now()
		w.cancel()
		select {
		case w.err = <-w.result:
			w.stopped = time.Since(began)
		case <-time.After(30 * time.Second):
			t.Fatal("Work did not return 30s after its context was cancelled")
		}
	})
	return w.stopped, w.err
}

// completions counts the completions a worker reports through OnComplete.
type completions struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *completions) record(job emq.Claim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[string]int)
	}
	c.counts[job.ID]++
}

func (c *completions) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[id]
}

func (c *completions) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.counts {
		total += n
	}
	return total
}

func eventually(t testing.TB, timeout time.Duration, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// admitPayloads admits one test.job per payload into group's lane and
// returns their ids in order.
func admitPayloads(t testing.TB, queue *emq.Queue, group string, payloads ...string) []string {
	t.Helper()
	ids := make([]string, len(payloads))
	for i, payload := range payloads {
		ids[i] = fmt.Sprintf("%s-%04d", group, i)
		if _, err := queue.Admit(context.Background(), emq.Job{ID: ids[i], Kind: "test.job", Group: group, Payload: []byte(payload)}); err != nil {
			t.Fatalf("admit %s: %v", ids[i], err)
		}
	}
	return ids
}

func repeated(payload string, n int) []string {
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = payload
	}
	return payloads
}

func readJob(t testing.TB, queue *emq.Queue, id string) emq.JobInfo {
	t.Helper()
	info, err := queue.Job(context.Background(), id)
	if err != nil {
		t.Fatalf("read job %s: %v", id, err)
	}
	return info
}

// queueSizes counts the queue's sorted sets: pending, active, delayed, dead
// and done.
func queueSizes(t testing.TB, rdb redis.UniversalClient, queue *emq.Queue) map[string]int64 {
	t.Helper()
	sizes := make(map[string]int64)
	for _, set := range []string{"pending", "active", "delayed", "dead", "done"} {
		n, err := rdb.ZCard(context.Background(), queue.Key(set)).Result()
		if err != nil {
			t.Fatalf("ZCARD %s: %v", set, err)
		}
		sizes[set] = n
	}
	return sizes
}

// payloadHandler acts as each job's payload says: "ok" succeeds at once,
// "sleep=<d>" succeeds after d unless cancelled, "block" waits for its
// context to end and then returns nil (a result the worker must drop),
// "stubborn=<d>" ignores its context for d.
func payloadHandler(started chan<- emq.Claim, causes chan<- error) emq.Handler {
	return func(ctx context.Context, job emq.Claim) error {
		if started != nil {
			started <- job
		}
		payload := string(job.Payload)
		switch {
		case payload == "ok":
			return nil
		case payload == "block":
			<-ctx.Done()
			if causes != nil {
				causes <- context.Cause(ctx)
			}
			return nil
		case strings.HasPrefix(payload, "sleep="):
			took, _ := time.ParseDuration(strings.TrimPrefix(payload, "sleep="))
			select {
			case <-time.After(took):
				return nil
			case <-ctx.Done():
				if causes != nil {
					causes <- context.Cause(ctx)
				}
				return context.Cause(ctx)
			}
		case strings.HasPrefix(payload, "stubborn="):
			took, _ := time.ParseDuration(strings.TrimPrefix(payload, "stubborn="))
			time.Sleep(took)
			return nil
		}
		return emq.Permanent(fmt.Errorf("unknown payload %q", payload))
	}
}

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

// quickToGiveUp returns a client that fails a call to a stopped server in
// about 100ms. With go-redis's defaults each call spends ~1.7s retrying the
// dial, which hides a short outage from the worker entirely.
func quickToGiveUp(t testing.TB, server *testserver.Redis) redis.UniversalClient {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: server.Addr, DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, PoolTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// queueOn connects to rdb and returns the test queue, for tests that need a
// server of their own.
func queueOn(t testing.TB, rdb redis.UniversalClient) (*emq.Queue, redis.UniversalClient) {
	t.Helper()
	client, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	queue := client.Queue("work")
	if err := queue.Declare(context.Background(), "test.job"); err != nil {
		t.Fatalf("declare: %v", err)
	}
	return queue, rdb
}

func TestWorkerRetriesAndBuriesFailedJobs(t *testing.T) {
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

// TestWorkerDrains: cancelling Work lets in-flight jobs finish; those that
// outrun the drain timeout are cancelled and released, claimable at once,
// and Work returns within the drain timeout leaving nothing active.
func TestWorkerDrains(t *testing.T) {
	const drainTimeout = time.Second
	tests := []struct {
		name     string
		payloads []string
		// wantDone are the indexes of payloads that complete; the others are
		// released.
		wantDone []int
		// wantCause is the cancel cause a released job's handler sees; nil
		// for a handler that ignores its context.
		wantCause error
	}{
		{name: "in-flight jobs finish", payloads: repeated("sleep=300ms", 4), wantDone: []int{0, 1, 2, 3}},
		{
			name:      "jobs outrunning the drain timeout are released",
			payloads:  []string{"sleep=200ms", "sleep=1m", "sleep=200ms", "sleep=1m"},
			wantDone:  []int{0, 2},
			wantCause: emq.ErrDrainTimeout,
		},
		{
			name:     "a handler ignoring its context is released all the same",
			payloads: []string{"stubborn=1500ms", "sleep=100ms"},
			wantDone: []int{1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, rdb := newQueue(t)
			ids := admitPayloads(t, queue, "drain", tt.payloads...)
			started := make(chan emq.Claim, len(ids))
			causes := make(chan error, len(ids))
			done := &completions{}
			logger, _ := workerLogger(t)
			worker := startWorker(t, queue, payloadHandler(started, causes), emq.WorkerOptions{
				Concurrency: len(ids), Lease: 5 * time.Second, DrainTimeout: drainTimeout,
				Logger: logger, OnComplete: done.record,
			})
			for range ids {
				select {
				case <-started:
				case <-time.After(5 * time.Second):
					t.Fatal("not every handler started")
				}
			}

			took, err := worker.stop(t)
			if err != nil {
				t.Fatalf("Work = %v, want nil after a drain that released everything", err)
			}
			if limit := drainTimeout + 300*time.Millisecond; took > limit {
				t.Errorf("Work returned %s after cancellation; want within the drain timeout (%s + slack)", took, drainTimeout)
			}
			t.Logf("Work returned %s after cancellation", took)
			if sizes := queueSizes(t, rdb, queue); sizes["active"] != 0 {
				t.Errorf("%d jobs left active after the drain", sizes["active"])
			}
			finishing := make(map[int]bool)
			for _, i := range tt.wantDone {
				finishing[i] = true
			}
			var released []string
			for i, id := range ids {
				info := readJob(t, queue, id)
				switch {
				case finishing[i] && (info.State != emq.StateDone || done.of(id) != 1):
					t.Errorf("%s (%s) is %s with %d completions, want done once", id, tt.payloads[i], info.State, done.of(id))
				case !finishing[i] && info.State != emq.StatePending:
					t.Errorf("%s (%s) is %s, want released to pending", id, tt.payloads[i], info.State)
				case !finishing[i]:
					released = append(released, id)
				}
			}
			if tt.wantCause != nil {
				for range released {
					if cause := <-causes; !errors.Is(cause, tt.wantCause) {
						t.Errorf("released handler's cancel cause = %v, want %v", cause, tt.wantCause)
					}
				}
			}
			// Released means claimable at once, long before the 5s lease would
			// have run out.
			claims, err := queue.Claim(context.Background(), len(ids), time.Minute)
			if err != nil || len(claims) != len(released) {
				t.Fatalf("claimed %d released jobs (%v), want %d", len(claims), err, len(released))
			}
			if len(released) < len(ids) && tt.wantCause == nil {
				// The stubborn handler returns later; its nil must not complete
				// the job someone else holds now.
				time.Sleep(time.Second)
				for _, claim := range claims {
					if n := done.of(claim.ID); n != 0 {
						t.Errorf("%s completed %d times by the stopped worker after its release", claim.ID, n)
					}
				}
			}
		})
	}
}

// TestWorkerBoundsJobsInFlight: never more than Concurrency handlers run,
// whatever the batch size, and every job completes once.
func TestWorkerBoundsJobsInFlight(t *testing.T) {
	tests := []struct {
		name        string
		concurrency int
		batch       int
	}{
		{name: "one at a time", concurrency: 1},
		{name: "batch smaller than concurrency", concurrency: 4, batch: 3},
		{name: "batch equals concurrency", concurrency: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, _ := newQueue(t)
			var ids []string
			for _, group := range []string{"a", "b", "c"} {
				ids = append(ids, admitPayloads(t, queue, group, repeated("ok", 20)...)...)
			}
			var inFlight, most atomic.Int64
			handler := func(ctx context.Context, job emq.Claim) error {
				now := inFlight.Add(1)
				defer inFlight.Add(-1)
				for seen := most.Load(); now > seen && !most.CompareAndSwap(seen, now); seen = most.Load() {
				}
				time.Sleep(3 * time.Millisecond)
				return nil
			}
			done := &completions{}
			registry := prometheus.NewRegistry()
			logger, _ := workerLogger(t)
			startWorker(t, queue, handler, emq.WorkerOptions{
				Concurrency: tt.concurrency, Batch: tt.batch, Logger: logger,
				Metrics: emq.NewMetrics(registry), OnComplete: done.record,
			})
			eventually(t, 15*time.Second, "every job completed", func() bool { return done.total() >= len(ids) })
			if got := most.Load(); got > int64(tt.concurrency) {
				t.Errorf("%d handlers ran at once, want at most %d", got, tt.concurrency)
			}
			if tt.concurrency > 1 && most.Load() < 2 {
				t.Errorf("at most %d handler ran at once; the worker never used its concurrency %d", most.Load(), tt.concurrency)
			}
			for _, id := range ids {
				if n := done.of(id); n != 1 {
					t.Errorf("%s completed %d times", id, n)
				}
			}
			values := gathered(t, registry)
			if values["emq_jobs_claimed_total"] != float64(len(ids)) || values["emq_jobs_completed_total"] != float64(len(ids)) {
				t.Errorf("claimed %v, completed %v; want %d each", values["emq_jobs_claimed_total"], values["emq_jobs_completed_total"], len(ids))
			}
			if values["emq_claim_to_complete_seconds_count"] != float64(len(ids)) {
				t.Errorf("claim-to-complete observations = %v, want %d", values["emq_claim_to_complete_seconds_count"], len(ids))
			}
		})
	}
}

// TestWorkerSamplesQueueDepths: the gauges show the queue as it is, lanes
// included, without inspecting every job.
func TestWorkerSamplesQueueDepths(t *testing.T) {
	queue, _ := newQueue(t)
	blocker := admitPayloads(t, queue, "first", "sleep=1m")[0]
	started := make(chan emq.Claim, 1)
	registry := prometheus.NewRegistry()
	// A second NewMetrics on the same registry shares the first's series.
	emq.NewMetrics(registry)
	logger, _ := workerLogger(t)
	worker := startWorker(t, queue, payloadHandler(started, nil), emq.WorkerOptions{
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
	if _, err := worker.stop(t); err != nil {
		t.Errorf("Work = %v", err)
	}
	if info := readJob(t, queue, blocker); info.State != emq.StatePending {
		t.Errorf("blocking job is %s after the drain, want pending", info.State)
	}
}

// TestWorkerRidesOutAnOutage: while the server is down the loops back off and
// log sparingly; once it is back the worker resumes without help.
func TestWorkerRidesOutAnOutage(t *testing.T) {
	if testserver.ClusterMode() {
		t.Skip("restarts its server, which the shared cluster cannot do")
	}
	server := testserver.StartRedis(t)
	queue, _ := queueOn(t, quickToGiveUp(t, server))
	done := &completions{}
	logger, logs := workerLogger(t)
	worker := startWorker(t, queue, payloadHandler(nil, nil), emq.WorkerOptions{
		Lease: time.Second, Logger: logger, OnComplete: done.record,
	})
	admitPayloads(t, queue, "before", repeated("ok", 3)...)
	eventually(t, 5*time.Second, "jobs done before the outage", func() bool { return done.total() == 3 })

	server.Stop(t)
	time.Sleep(1500 * time.Millisecond)
	server.Restart(t)
	// Without persistence the restarted server is empty: declare again.
	queue, _ = queueOn(t, server.Client(t))
	ids := admitPayloads(t, queue, "after", repeated("ok", 3)...)
	// Backoff is capped near 2s, so the worker is back well within 5s.
	eventually(t, 5*time.Second, "jobs done after the outage", func() bool {
		for _, id := range ids {
			if done.of(id) != 1 {
				return false
			}
		}
		return true
	})
	if _, err := worker.stop(t); err != nil {
		t.Errorf("Work = %v", err)
	}
	failures := strings.Count(logs.String(), `"msg":"queue server call failed; backing off","queue":"work","loop":"claim"`)
	if failures < 1 || failures > 2 {
		t.Errorf("the claim loop logged %d failures during a 1.5s outage; want 1 (rate-limited)", failures)
	}
	if !strings.Contains(logs.String(), `"msg":"queue server answers again"`) {
		t.Error("the recovery was not logged")
	}
}

func TestWorkRefusesBadOptions(t *testing.T) {
	queue, _ := newQueue(t)
	tests := []struct {
		name    string
		handler emq.Handler
		opts    emq.WorkerOptions
		want    string
	}{
		{name: "no handler", opts: emq.WorkerOptions{}, want: "no handler"},
		{name: "lease too short", handler: payloadHandler(nil, nil), opts: emq.WorkerOptions{Lease: time.Millisecond}, want: "under the minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := queue.Work(context.Background(), tt.handler, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Work = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	errDeclined := errors.New("card declined")
	tests := []struct {
		name          string
		err           error
		wantPermanent bool
		wantText      string
	}{
		{name: "marked", err: emq.Permanent(errDeclined), wantPermanent: true, wantText: "card declined"},
		{name: "wrapped after marking", err: fmt.Errorf("settle: %w", emq.Permanent(errDeclined)), wantPermanent: true, wantText: "settle: card declined"},
		{name: "plain", err: errDeclined, wantText: "card declined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, emq.ErrPermanent); got != tt.wantPermanent {
				t.Errorf("errors.Is(err, ErrPermanent) = %v, want %v", got, tt.wantPermanent)
			}
			if !errors.Is(tt.err, errDeclined) {
				t.Error("the marked error no longer wraps its cause")
			}
			if tt.err.Error() != tt.wantText {
				t.Errorf("text = %q, want %q", tt.err.Error(), tt.wantText)
			}
		})
	}
	if emq.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
}

// gathered returns every sample of registry by metric name; a histogram
// contributes its observation count as <name>_count.
func gathered(t testing.TB, registry *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	values := make(map[string]float64)
	for _, family := range families {
		for _, metric := range family.GetMetric() {
			switch {
			case metric.GetCounter() != nil:
				values[family.GetName()] += metric.GetCounter().GetValue()
			case metric.GetGauge() != nil:
				values[family.GetName()] += metric.GetGauge().GetValue()
			case metric.GetHistogram() != nil:
				values[family.GetName()+"_count"] += float64(metric.GetHistogram().GetSampleCount())
			}
		}
	}
	return values
}

// BenchmarkWorkClaimComplete measures the runtime's throughput with a no-op
// handler: claim, run, complete, per job.
func BenchmarkWorkClaimComplete(b *testing.B) {
	queue, rdb := newQueue(b)
	jobs := make([]emq.Job, b.N)
	for i := range jobs {
		jobs[i] = emq.Job{ID: fmt.Sprintf("bench-%07d", i), Kind: "test.job", Group: fmt.Sprintf("g%d", i%50), Payload: []byte("ok")}
	}
	for start := 0; start < len(jobs); start += 1000 {
		_, errs := queue.AdmitMany(context.Background(), jobs[start:min(start+1000, len(jobs))])
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	var completed atomic.Int64
	all := make(chan struct{})
	logger := slog.New(slog.NewJSONHandler(&logbuffer.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b.ResetTimer()
	worker := startWorker(b, queue, func(context.Context, emq.Claim) error { return nil }, emq.WorkerOptions{
		Concurrency: 32, Logger: logger,
		OnComplete: func(emq.Claim) {
			if completed.Add(1) == int64(b.N) {
				close(all)
			}
		},
	})
	<-all
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	worker.stop(b)
	if n, _ := rdb.ZCard(context.Background(), queue.Key("done")).Result(); n != int64(min(b.N, emq.DefaultRetention)) {
		b.Fatalf("done = %d, want %d", n, b.N)
	}
}
