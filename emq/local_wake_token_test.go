package emq_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestALocalWakeLeavesNoWaitToTakeTheNextToken: a WakeOnAdmission worker
// whose wait a local wake ends (a promote by its own client, which pushes
// no token) waits on that same BLPOP next. Were it left behind, the next
// wait would queue after it, and the token of the next admission by
// another process would go to the abandoned BLPOP (Redis serves blocked
// clients oldest first): that admission would wait the whole idle poll.
func TestALocalWakeLeavesNoWaitToTakeTheNextToken(t *testing.T) {
	server := testserver.StartRedis(t)
	// A read timeout that lets the wait last the idle poll.
	rdb := redis.NewClient(&redis.Options{Addr: server.Addr, ReadTimeout: 6 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	queue, _ := queueOn(t, rdb)
	other, _ := queueOn(t, server.Client(t))

	const idlePoll = 2 * time.Second
	started := make(chan emq.Claim, 8)
	var failed atomic.Bool
	handler := func(ctx context.Context, job emq.Claim) error {
		started <- job
		if string(job.Payload) == "fail-once" && failed.CompareAndSwap(false, true) {
			return errors.New("first attempt fails")
		}
		return nil
	}
	logger, _ := workerLogger(t)
	startWorker(t, queue, handler, emq.WorkerOptions{
		Logger: logger, Concurrency: 4, Lease: 10 * time.Second, IdlePoll: idlePoll, WakeOnAdmission: true,
		PromoteInterval: 50 * time.Millisecond, ReapInterval: time.Second,
		Retry: emq.RetryPolicy{MaxAttempts: 5, BaseDelay: 300 * time.Millisecond, MaxDelay: 300 * time.Millisecond},
	})
	time.Sleep(300 * time.Millisecond)
	next := func(what string) {
		t.Helper()
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s not started", what)
		}
	}
	admitPayloads(t, other, "g", "fail-once")
	next("the first attempt")
	// The retry is promoted by this worker's promoter: the local wake ends
	// the loop's wait, whose BLPOP goes on.
	next("the retry")
	time.Sleep(200 * time.Millisecond)
	admitted := time.Now()
	admitPayloads(t, other, "h", "ok")
	next("the admission")
	took := time.Since(admitted)
	t.Logf("another process's admission started after %s (idle poll %s)", took, idlePoll)
	if took > 500*time.Millisecond {
		t.Errorf("another process's admission started after %s; want at once (the wake token)", took)
	}
}
