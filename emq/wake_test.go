package emq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestWorkReturnsWithinItsDrainTimeoutWhileItsQueueIsIdle: a worker waiting
// on its empty queue's wake token returns from Work within its drain
// timeout once its context is cancelled, as it did when the wait was a
// sleep: go-redis does not interrupt a blocked read when the call's context
// is cancelled, so the wait must not hold Work until its BLPOP times out.
func TestWorkReturnsWithinItsDrainTimeoutWhileItsQueueIsIdle(t *testing.T) {
	tests := []struct {
		name     string
		idlePoll time.Duration
	}{
		// The client's read timeout is 3s: the wait is capped at 1.5s.
		{name: "idle poll over half the read timeout", idlePoll: 20 * time.Second},
		{name: "idle poll of a second", idlePoll: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const drainTimeout = 200 * time.Millisecond
			queue, _ := newQueue(t)
			worker := startWorker(t, queue, payloadHandler(nil, nil), emq.WorkerOptions{
				Concurrency: 2, Lease: 10 * time.Second, IdlePoll: tt.idlePoll, DrainTimeout: drainTimeout,
			})
			// Let the worker find the queue empty and block on it.
			time.Sleep(300 * time.Millisecond)
			took, err := worker.stop(t)
			if err != nil {
				t.Fatalf("work: %v", err)
			}
			if took > drainTimeout+100*time.Millisecond {
				t.Fatalf("Work returned %s after its context was cancelled; want within the drain timeout %s", took, drainTimeout)
			}
		})
	}
}

// TestIdleWorkersLeaveConnectionsForMoves: workers waiting on their empty
// queues do not take the client's connections from admissions. A worker
// process runs a claim loop per queue on one client (settlement: the 16
// coherence queues and every owned instrument's), whose pool go-redis sizes
// 10 per CPU: waits that hold a connection each would leave an admission
// queueing for one.
func TestIdleWorkersLeaveConnectionsForMoves(t *testing.T) {
	tests := []struct {
		name     string
		poolSize int
		idle     int // queues with an idle worker
	}{
		{name: "twice as many idle workers as connections", poolSize: 4, idle: 8},
		{name: "a pool of one", poolSize: 1, idle: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const claims = 20
			ctx := context.Background()
			server := testserver.QueueRedisServer(t)
			url := server.URL()
			if strings.Contains(url, "?") {
				url += fmt.Sprintf("&pool_size=%d", tt.poolSize)
			} else {
				url += fmt.Sprintf("?pool_size=%d", tt.poolSize)
			}
			client, err := emq.Dial(ctx, url)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			t.Cleanup(func() { _ = client.Close() })
			for i := range tt.idle {
				queue := client.Queue(fmt.Sprintf("idle%d", i))
				if err := queue.Declare(ctx, "test.job"); err != nil {
					t.Fatalf("declare: %v", err)
				}
				startWorker(t, queue, payloadHandler(nil, nil), emq.WorkerOptions{Concurrency: 1, Lease: 10 * time.Second})
			}
			busy := client.Queue("work")
			if err := busy.Declare(ctx, "test.job"); err != nil {
				t.Fatalf("declare: %v", err)
			}
			// Let the idle polls reach their 200ms ceiling.
			time.Sleep(time.Second)
			took := make([]time.Duration, claims)
			for i := range claims {
				// An admission goes by go-redis's pipeline pool; a claim, like
				// a renewal or a completion, by the main pool.
				if _, err := busy.Admit(ctx, job(fmt.Sprintf("J%d", i), "g", "")); err != nil {
					t.Fatalf("admit %d: %v", i, err)
				}
				began := time.Now()
				if got, err := busy.Claim(ctx, 1, time.Minute); err != nil || len(got) != 1 {
					t.Fatalf("claim %d: %d jobs, %v; want 1", i, len(got), err)
				}
				took[i] = time.Since(began)
				time.Sleep(7 * time.Millisecond)
			}
			slices.Sort(took)
			t.Logf("claims: median %s, max %s", took[claims/2], took[claims-1])
			if median := took[claims/2]; median > 20*time.Millisecond {
				t.Fatalf("claims beside %d idle workers on a pool of %d: median %s, max %s; want a median under 20ms",
					tt.idle, tt.poolSize, median, took[claims-1])
			}
		})
	}
}

// TestASubMillisecondIdlePollStillPolls: an idle poll under a millisecond
// is still a poll. BLPOP's timeout is in seconds, and one that rounds to 0
// blocks until an admission, so a job that turns pending otherwise (here a
// retry whose delay ended) would wait for the next admission, or for the
// client's read timeout to break the connection.
func TestASubMillisecondIdlePollStillPolls(t *testing.T) {
	queue, _ := newQueue(t)
	var mu sync.Mutex
	var attempts []time.Time
	handler := func(_ context.Context, claim emq.Claim) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if claim.Token == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}
	startWorker(t, queue, handler, emq.WorkerOptions{
		Concurrency: 1, Lease: 10 * time.Second, IdlePoll: 100 * time.Microsecond, PromoteInterval: 10 * time.Millisecond,
		Retry: emq.RetryPolicy{MaxAttempts: 3, BaseDelay: 20 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
	})
	// Let the worker find the queue empty before the admission.
	time.Sleep(50 * time.Millisecond)
	admitPayloads(t, queue, "g", "ok")
	eventually(t, 10*time.Second, "the retry runs", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	if gap := attempts[1].Sub(attempts[0]); gap > time.Second {
		t.Fatalf("the retry ran %s after the first attempt; its delay is 20ms and the idle poll 100µs", gap)
	}
}

// TestAShortReadTimeoutBreaksNoConnections: Redis ends a BLPOP on its
// timeout only at its next tick (hz 10: 100 ms, measured 100-320 ms for
// timeouts of 1-200 ms), so a wait sized to half a short read timeout
// answers after the client gave up on the connection. An idle worker on a
// client with a short read timeout must poll without breaking (and
// redialling) a connection each time.
func TestAShortReadTimeoutBreaksNoConnections(t *testing.T) {
	tests := []struct {
		name        string
		readTimeout time.Duration
	}{
		{name: "100ms", readTimeout: 100 * time.Millisecond},
		{name: "250ms", readTimeout: 250 * time.Millisecond},
		{name: "400ms", readTimeout: 400 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case idles on a server of its own for 2.5 s: side by
			// side, they wait once.
			t.Parallel()
			ctx := context.Background()
			server := testserver.SingleRedis(t, "counts the connections its server received")
			direct := server.Client(t)
			rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ReadTimeout: tt.readTimeout})
			t.Cleanup(func() { _ = rdb.Close() })
			queue, _ := queueOn(t, rdb)
			received := func() int64 {
				t.Helper()
				info, err := direct.Info(ctx, "stats").Result()
				if err != nil {
					t.Fatalf("INFO stats: %v", err)
				}
				for line := range strings.Lines(info) {
					if value, found := strings.CutPrefix(strings.TrimSpace(line), "total_connections_received:"); found {
						n, err := strconv.ParseInt(value, 10, 64)
						if err != nil {
							t.Fatalf("total_connections_received %q: %v", value, err)
						}
						return n
					}
				}
				t.Fatal("INFO stats lists no total_connections_received")
				return 0
			}
			worker := startWorker(t, queue, payloadHandler(nil, nil), emq.WorkerOptions{Concurrency: 2, Lease: 10 * time.Second})
			time.Sleep(500 * time.Millisecond)
			before := received()
			time.Sleep(2 * time.Second)
			dialled := received() - before
			if _, err := worker.stop(t); err != nil {
				t.Fatalf("work: %v", err)
			}
			if dialled > 2 {
				t.Fatalf("an idle worker with a read timeout of %s dialled %d connections in 2s; want none", tt.readTimeout, dialled)
			}
		})
	}
}
