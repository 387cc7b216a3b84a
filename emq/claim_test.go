package emq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/logbuffer"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestWorkerBoundsJobsInFlight: never more than Concurrency handlers run,
// whatever the batch size, and every job completes once.
func TestWorkerBoundsJobsInFlight(t *testing.T) {
	testserver.Parallel(t)
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
			if values["emq_claim_wait_seconds_count"] != float64(len(ids)) {
				t.Errorf("claim-wait observations = %v, want %d", values["emq_claim_wait_seconds_count"], len(ids))
			}
		})
	}
}

// TestTheClaimWaitIsAJobsFirstOnly: a job's wait to be claimed counts from
// its admission once; a retried job's second claim is not observed, since
// its admission is not when that wait began.
func TestTheClaimWaitIsAJobsFirstOnly(t *testing.T) {
	testserver.Parallel(t)
	queue, _ := newQueue(t)
	ids := admitPayloads(t, queue, "a", "fail once", "ok")
	var failed atomic.Bool
	handler := func(_ context.Context, job emq.Claim) error {
		if string(job.Payload) == "fail once" && failed.CompareAndSwap(false, true) {
			return errors.New("once")
		}
		return nil
	}
	done := &completions{}
	registry := prometheus.NewRegistry()
	logger, _ := workerLogger(t)
	startWorker(t, queue, handler, emq.WorkerOptions{
		Concurrency: 2, Logger: logger, Metrics: emq.NewMetrics(registry), OnComplete: done.record,
		Retry: emq.RetryPolicy{MaxAttempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond},
	})
	eventually(t, 15*time.Second, "every job completed", func() bool { return done.total() >= len(ids) })
	values := gathered(t, registry)
	if values["emq_jobs_claimed_total"] != 3 || values["emq_claim_wait_seconds_count"] != 2 {
		t.Errorf("claimed %v, claim waits observed %v; want 3 claims, 2 waits", values["emq_jobs_claimed_total"], values["emq_claim_wait_seconds_count"])
	}
}

// TestAnAdmissionWakesAnIdleWorker: a worker that found its queue empty
// (WakeOnAdmission) claims a job admitted next at once, not after its
// idle poll, here far longer than the test waits.
func TestAnAdmissionWakesAnIdleWorker(t *testing.T) {
	const idlePoll = 20 * time.Second
	queue, _ := newQueue(t)
	started := make(chan emq.Claim, 8)
	startWorker(t, queue, payloadHandler(started, nil), emq.WorkerOptions{Concurrency: 4, Lease: 10 * time.Second, IdlePoll: idlePoll, WakeOnAdmission: true})
	for i, group := range []string{"a", "b", "c"} {
		// Let the worker claim the queue empty and block on it.
		time.Sleep(200 * time.Millisecond)
		id := admitPayloads(t, queue, group, "ok")[0]
		select {
		case claim := <-started:
			if claim.ID != id {
				t.Fatalf("admission %d: the worker started %s, want %s", i, claim.ID, id)
			}
		case <-time.After(idlePoll / 4):
			t.Fatalf("admission %d: %s not started within %s of its admission (the idle poll is %s)", i, id, idlePoll/4, idlePoll)
		}
	}
}

// TestAClaimThatSawWorkDueStillWakesOnAdmission: a claim that finds nothing
// to claim but a lease run out (or a retry due) kicks the reaper (promoter)
// and polls again after the idle poll; with WakeOnAdmission that poll is a
// wait on the wake token, so an order admitted meanwhile is claimed at once,
// not after a deaf sleep of the idle poll. On the order queues the claims
// see every due retry and expired lease first (the loops keep quiet), so each
// made every worker deaf to admissions for up to the idle poll.
func TestAClaimThatSawWorkDueStillWakesOnAdmission(t *testing.T) {
	const idlePoll = time.Second
	ctx := context.Background()
	queue, _ := newQueue(t)
	// A lease of another worker, run out by the time the idle worker's
	// first wait ends.
	deadID := admitPayloads(t, queue, "dead", "ok")[0]
	if dead, err := queue.Claim(ctx, 1, 300*time.Millisecond); err != nil || len(dead) != 1 {
		t.Fatalf("the doomed claim took %d jobs, %v", len(dead), err)
	}
	started := make(chan emq.Claim, 8)
	startWorker(t, queue, payloadHandler(started, nil), emq.WorkerOptions{
		Concurrency: 4, Lease: 10 * time.Second, IdlePoll: idlePoll, ReapInterval: time.Minute, WakeOnAdmission: true,
	})
	// The worker's claim after its first wait sees the lease run out and
	// kicks the reaper, which puts the job back to pending and wakes the
	// worker to claim it.
	select {
	case claim := <-started:
		if claim.ID != deadID {
			t.Fatalf("the worker started %s, want the reaped %s", claim.ID, deadID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the expired lease's job not started within 5s")
	}
	admittedAt := time.Now()
	id := admitPayloads(t, queue, "order", "ok")[0]
	deadline := time.After(idlePoll / 2)
	for {
		select {
		case claim := <-started:
			if claim.ID != id {
				t.Fatalf("the worker started %s, want %s", claim.ID, id)
			}
			t.Logf("admitted after a claim saw a lease run out: started %s later", time.Since(admittedAt))
			return
		case <-deadline:
			t.Fatalf("%s not started within %s of its admission (idle poll %s): the worker slept instead of waiting on the wake token",
				id, idlePoll/2, idlePoll)
		}
	}
}

// TestTheWakeTokenIsOneAndGoesWithAnEmptyClaim: an admission leaves one
// token however many jobs wait, and a claim that finds nothing pending takes
// a leftover token away, so the next wait blocks until an admission.
func TestTheWakeTokenIsOneAndGoesWithAnEmptyClaim(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, rdb := newQueue(t)
	tokens := func() int64 {
		t.Helper()
		n, err := rdb.LLen(ctx, queue.Key("wake")).Result()
		if err != nil {
			t.Fatalf("LLEN wake: %v", err)
		}
		return n
	}
	admitPayloads(t, queue, "a", "ok", "ok", "ok")
	if n := tokens(); n != 1 {
		t.Fatalf("after three admissions: %d wake tokens, want 1", n)
	}
	// The token names the group, whose lane the woken claimer names.
	if token, err := rdb.LIndex(ctx, queue.Key("wake"), 0).Result(); err != nil || token != "a" {
		t.Fatalf("wake token %q, %v; want the admitted group %q", token, err, "a")
	}
	claims, err := queue.Claim(ctx, 3, time.Minute)
	if err != nil || len(claims) != 3 {
		t.Fatalf("claim: %d jobs, %v; want 3", len(claims), err)
	}
	if n := tokens(); n != 1 {
		t.Fatalf("after a claim that took every job: %d wake tokens, want the one left", n)
	}
	claims, err = queue.Claim(ctx, 3, time.Minute)
	if err != nil || len(claims) != 0 {
		t.Fatalf("claim of an empty queue: %d jobs, %v", len(claims), err)
	}
	if n := tokens(); n != 0 {
		t.Fatalf("after a claim that found nothing: %d wake tokens, want 0", n)
	}
}

// TestAWokenWorkerClaimsTheAdmittedJobInOneRun: a worker woken on its empty
// queue by an admission names the lane of the admitted job's group, which
// the wake token (another client's admission) or the local wake (its own
// client's) carries, so one claim script run takes the job. Without the
// group the claim knew no lane at the head of the rotation (the queue had
// run empty) and spent a run to learn it: two runs a job for an idle
// queue, the owners' order queues at 20 orders/s every time, and the
// coherence shards the relay admits to.
func TestAWokenWorkerClaimsTheAdmittedJobInOneRun(t *testing.T) {
	tests := []struct {
		name string
		// own: admitted by the worker's own client (a local wake), else by
		// another, as the gateways admit orders (the wake token).
		own, wakeOnAdmission bool
		// many admits with AdmitMany.
		many bool
	}{
		{name: "another client's admission, wake token", wakeOnAdmission: true},
		{name: "its own client's admission, local wake", own: true},
		{name: "its own client's admissions together, local wake", own: true, many: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := testserver.QueueRedis(t)
			claims := &claimLog{}
			rdb.AddHook(claims)
			queue, _ := queueOn(t, rdb)
			claims.jobsKey = queue.Key("jobs")
			started := make(chan emq.Claim, 8)
			handler := func(_ context.Context, claim emq.Claim) error {
				started <- claim
				return nil
			}
			const idlePoll = 20 * time.Second
			startWorker(t, queue, handler, emq.WorkerOptions{
				Concurrency: 4, Lease: 10 * time.Second, IdlePoll: idlePoll, WakeOnAdmission: tt.wakeOnAdmission,
			})
			admitter := queue
			if !tt.own {
				admitter, _ = queueOn(t, rdb)
			}
			for _, group := range []string{"a", "b", "c"} {
				// Let the worker claim the queue empty and wait.
				time.Sleep(200 * time.Millisecond)
				before := claims.runs()
				var ids []string
				if tt.many {
					jobs := []emq.Job{
						{ID: group + "-1", Kind: "test.job", Group: group, Payload: []byte("ok")},
						{ID: group + "-2", Kind: "test.job", Group: group + "2", Payload: []byte("ok")},
					}
					if _, errs := admitter.AdmitMany(context.Background(), jobs); errors.Join(errs...) != nil {
						t.Fatalf("admit: %v", errors.Join(errs...))
					}
					ids = []string{jobs[0].ID, jobs[1].ID}
				} else {
					ids = admitPayloads(t, admitter, group, "ok")
				}
				for range ids {
					select {
					case claim := <-started:
						if !slices.Contains(ids, claim.ID) {
							t.Fatalf("group %s: the worker started %s, want one of %v", group, claim.ID, ids)
						}
					case <-time.After(5 * time.Second):
						t.Fatalf("group %s: %v not started within 5s of their admission", group, ids)
					}
				}
				if runs := claims.runs() - before; runs != 1 {
					t.Errorf("group %s: %d claim script runs took the %d admitted jobs, want 1", group, runs, len(ids))
				}
			}
		})
	}
}

// claimLog records when each claim script run of a queue was sent and how
// many jobs it took.
type claimLog struct {
	jobsKey string
	mu      sync.Mutex
	sent    []time.Time
	took    []int64
}

func (c *claimLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *claimLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		args := cmd.Args()
		if len(args) < 4 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") || fmt.Sprint(args[3]) != c.jobsKey {
			return err
		}
		// Claims go out wrapped, so ask for the reply by its method.
		reply, ok := cmd.(interface{ Slice() ([]any, error) })
		if !ok {
			return err
		}
		if values, _ := reply.Slice(); len(values) > 1 {
			took, _ := values[1].(int64)
			c.mu.Lock()
			c.sent, c.took = append(c.sent, sent), append(c.took, took)
			c.mu.Unlock()
		}
		return err
	}
}

func (c *claimLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// runs is how many claim script runs answered so far.
func (c *claimLog) runs() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sent)
}

// afterTaking returns how long after the first claim that took a job the
// next claim was sent.
func (c *claimLog) afterTaking(t testing.TB) time.Duration {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, took := range c.took {
		if took > 0 && i+1 < len(c.sent) {
			return c.sent[i+1].Sub(c.sent[i])
		}
	}
	t.Fatalf("no claim after one that took a job, among %d claims", len(c.took))
	return 0
}

// TestAClaimThatRanTheQueueEmptyWaitsThePoll: a claim that took fewer jobs
// than it asked for left the queue empty, so the worker waits the shortest
// idle poll (or, with WakeOnAdmission, for an admission) before claiming
// again, rather than sending at once a claim sure to find nothing.
func TestAClaimThatRanTheQueueEmptyWaitsThePoll(t *testing.T) {
	for _, wake := range []bool{false, true} {
		t.Run(fmt.Sprintf("wake on admission %t", wake), func(t *testing.T) {
			rdb := testserver.QueueRedis(t)
			claims := &claimLog{}
			rdb.AddHook(claims)
			queue, _ := queueOn(t, rdb)
			claims.jobsKey = queue.Key("jobs")
			logger, _ := workerLogger(t)
			done := &completions{}
			const idlePoll = 100 * time.Millisecond
			admitPayloads(t, queue, "g", "ok")
			startWorker(t, queue, func(context.Context, emq.Claim) error { return nil },
				emq.WorkerOptions{IdlePoll: idlePoll, WakeOnAdmission: wake, Logger: logger, OnComplete: done.record})
			eventually(t, 5*time.Second, "the job completed", func() bool { return done.total() == 1 })
			time.Sleep(2 * idlePoll)
			// The poll, less a loaded machine's early timer.
			if after := claims.afterTaking(t); after < idlePoll*8/10 {
				t.Errorf("the next claim went %s after the one that ran the queue empty; want the idle poll, %s", after, idlePoll)
			}
		})
	}
}

// BenchmarkWokenClaim measures an idle worker's cycle, the owners' at a low
// rate: a job admitted to its empty queue by another client (the gateway),
// in a group of its own, wakes the worker, which claims, runs and
// completes it before the next is admitted.
func BenchmarkWokenClaim(b *testing.B) {
	rdb := testserver.QueueRedis(b)
	claims := &claimLog{}
	rdb.AddHook(claims)
	queue, _ := queueOn(b, rdb)
	claims.jobsKey = queue.Key("jobs")
	logger := slog.New(slog.NewJSONHandler(&logbuffer.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	completed := make(chan struct{}, 1)
	startWorker(b, queue, func(context.Context, emq.Claim) error { return nil }, emq.WorkerOptions{
		Concurrency: 8, Lease: 10 * time.Second, IdlePoll: 20 * time.Second, WakeOnAdmission: true, Logger: logger,
		OnComplete: func(emq.Claim) { completed <- struct{}{} },
	})
	gateway, _ := queueOn(b, rdb)
	// Let the worker claim the queue empty and wait.
	time.Sleep(200 * time.Millisecond)
	runs, redisCPU := claims.runs(), serverCPU(b, rdb)
	b.ResetTimer()
	for i := range b.N {
		if _, err := gateway.Admit(context.Background(), emq.Job{ID: fmt.Sprintf("woken-%07d", i), Kind: "test.job",
			Group: fmt.Sprintf("g%d", i), Payload: []byte("ok")}); err != nil {
			b.Fatal(err)
		}
		<-completed
	}
	b.StopTimer()
	b.ReportMetric(float64(claims.runs()-runs)/float64(b.N), "claims/job")
	if cpu := serverCPU(b, rdb); cpu > 0 {
		b.ReportMetric((cpu-redisCPU)*1e6/float64(b.N), "redis-µs/job")
	}
}

// TestTheClaimWaitIsTheTimePendingInSeconds: the wait observed is the
// time pending, in seconds, the lease taken off: a job left pending 400 ms
// reads about 0.4 s under a 7 s lease, not 7.4 s nor 400 s.
func TestTheClaimWaitIsTheTimePendingInSeconds(t *testing.T) {
	queue, _ := newQueue(t)
	admitPayloads(t, queue, "a", "one")
	time.Sleep(400 * time.Millisecond)
	done := &completions{}
	registry := prometheus.NewRegistry()
	logger, _ := workerLogger(t)
	startWorker(t, queue, func(context.Context, emq.Claim) error { return nil }, emq.WorkerOptions{
		Concurrency: 1, Logger: logger, Metrics: emq.NewMetrics(registry), OnComplete: done.record, Lease: 7 * time.Second,
	})
	eventually(t, 15*time.Second, "the job completed", func() bool { return done.total() >= 1 })
	values := gathered(t, registry)
	count, sum := values["emq_claim_wait_seconds_count"], values["emq_claim_wait_seconds_sum"]
	if count != 1 || sum < 0.39 || sum > 3 {
		t.Fatalf("claim wait: %v observations summing %v s; want one of about 0.4 s", count, sum)
	}
}

// TestAClaimPassesOverLanesAdmittedSinceItsHeads: a lane admitted after
// the last claim listed the rotation's heads joins it at the tag of the
// lanes due now; the next claim takes the lanes it named of that tag in
// the same run and leaves the new lanes at the head, before any lane of a
// later tag: under a backlog a run no longer ends at each lane admitted
// during the round trip before it. A run passes over at most 64 such
// lanes; a 65th ends it, and the next run names the lanes passed over.
func TestAClaimPassesOverLanesAdmittedSinceItsHeads(t *testing.T) {
	tests := []struct {
		name string
		// groups are admitted two jobs each before the first claim lists
		// the heads, admitted groups one job each after it.
		groups, admitted int
		// n is the claim after the admissions to the new lanes a00….
		n int
		// want is what that claim takes, next what the claim after it takes.
		want, next []string
		runs       int
	}{
		{
			name: "lanes of its tag follow it", groups: 9, admitted: 1, n: 8,
			want: []string{"g2-00000", "g3-00000", "g4-00000", "g5-00000", "g6-00000", "g7-00000", "g8-00000", "g9-00000"},
			next: []string{"a00-00000"},
			runs: 1,
		},
		{
			name: "a lane of a later tag waits for it", groups: 9, admitted: 1, n: 10,
			want: []string{"g2-00000", "g3-00000", "g4-00000", "g5-00000", "g6-00000", "g7-00000", "g8-00000", "g9-00000",
				"a00-00000", "g1-00001"},
			next: []string{"g2-00001"},
			runs: 2,
		},
		{
			name: "33 passed", groups: 5, admitted: 33, n: 4,
			want: []string{"g2-00000", "g3-00000", "g4-00000", "g5-00000"},
			next: []string{"a00-00000"},
			runs: 1,
		},
		{
			name: "64 passed", groups: 5, admitted: 64, n: 4,
			want: []string{"g2-00000", "g3-00000", "g4-00000", "g5-00000"},
			next: []string{"a00-00000"},
			runs: 1,
		},
		{
			name: "the 65th ends the run", groups: 5, admitted: 65, n: 4,
			want: []string{"a00-00000", "a01-00000", "a02-00000", "a03-00000"},
			next: []string{"a04-00000"},
			runs: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rdb := testserver.QueueRedis(t)
			claims := &claimLog{}
			rdb.AddHook(claims)
			queue, _ := queueOn(t, rdb)
			claims.jobsKey = queue.Key("jobs")
			for g := 1; g <= tt.groups; g++ {
				admitN(t, queue, fmt.Sprintf("g%d", g), 2)
			}
			// Lists the heads: g1 goes back a tag later, the others stay due.
			if got := claimIDs(t, queue, 1); !slices.Equal(got, []string{"g1-00000"}) {
				t.Fatalf("first claim = %v", got)
			}
			// Their names sort before g2…, so they come first among lanes of their tag.
			for a := range tt.admitted {
				admitN(t, queue, fmt.Sprintf("a%02d", a), 1)
			}
			before := claims.runs()
			if got := claimIDs(t, queue, tt.n); !slices.Equal(got, tt.want) {
				t.Errorf("claim of %d = %v, want %v", tt.n, got, tt.want)
			}
			if runs := claims.runs() - before; runs != tt.runs {
				t.Errorf("the claim of %d took %d script runs, want %d", tt.n, runs, tt.runs)
			}
			if got := claimIDs(t, queue, len(tt.next)); !slices.Equal(got, tt.next) {
				t.Errorf("next claim = %v, want %v", got, tt.next)
			}
		})
	}
}

// claimIDs claims up to n jobs and returns their ids in the order taken.
func claimIDs(t testing.TB, queue *emq.Queue, n int) []string {
	t.Helper()
	claims, err := queue.Claim(context.Background(), n, time.Minute)
	if err != nil {
		t.Fatalf("claim %d: %v", n, err)
	}
	ids := make([]string, len(claims))
	for i, claim := range claims {
		ids[i] = claim.ID
	}
	return ids
}
