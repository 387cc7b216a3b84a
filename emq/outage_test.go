package emq_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

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
