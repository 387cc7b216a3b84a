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

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// failoverBound is how long after a replica's promotion the queue's clients
// may go on failing: the gateway and the workers must reach the promoted
// replica within it.
const failoverBound = 2 * time.Second

// clusterURL is the redis:// URL of a cluster, as the gateway and the
// workers are given it (emq.Dial).
func clusterURL(cluster *testserver.RedisCluster) string {
	return "redis://" + cluster.Addrs[0] + "?addr=" + strings.Join(cluster.Addrs[1:], "&addr=")
}

// outcomes records when each call of a loop ended and whether it failed.
type outcomes struct {
	mu    sync.Mutex
	calls []outcome
}

type outcome struct {
	at  time.Time
	err error
}

func (o *outcomes) add(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, outcome{time.Now(), err})
}

// window reports, of the calls that ended after from, when the first one
// succeeded and when the last one failed (zero when none did), and how many
// failed in all.
func (o *outcomes) window(from time.Time) (firstSuccess, lastError time.Time, errs int, lastErr error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, call := range o.calls {
		if call.err != nil {
			errs++
			lastError, lastErr = call.at, call.err
			continue
		}
		if firstSuccess.IsZero() && call.at.After(from) {
			firstSuccess = call.at
		}
	}
	return firstSuccess, lastError, errs, lastErr
}

// TestFailoverReachesThePromotedReplica: a master of a 3-master cluster is
// killed under load (admissions as the gateway makes them, claims as a
// worker makes them); the cluster promotes its replica, and within
// failoverBound of the promotion every loop succeeds again and fails no
// more. go-redis alone reloads its map of the cluster every 60 s, and
// never after a connection error: the loops would fail for up to a minute.
//
// The waiting admissions (ADMIT_WAIT_REPLICAS=1) go to the master on a
// connection of their own (the WAIT must follow the writes on it), and
// need a replica left to acknowledge them after the failover: two per
// master.
func TestFailoverReachesThePromotedReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a cluster master and waits for its replica's promotion")
	}
	if testserver.ClusterMode() {
		t.Skip("starts a cluster of its own; the single-server leg runs it")
	}
	tests := []struct {
		name     string
		replicas int
		opts     []emq.Option
	}{
		{"admissions not waiting", 1, nil},
		{"admissions waiting for a replica", 2, []emq.Option{emq.WithAdmitReplicas(1, 100*time.Millisecond)}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			testFailover(t, test.replicas, test.opts...)
		})
	}
}

func testFailover(t *testing.T, replicas int, opts ...emq.Option) {
	ctx := context.Background()
	cluster := testserver.StartRedisCluster(t, testserver.WithReplicas(replicas), testserver.WithNodeTimeout(time.Second))
	// The gateway and the worker are processes of their own: each has its
	// own client, and must find the promoted replica on its own.
	dial := func(opts ...emq.Option) *emq.Queue {
		client, err := emq.Dial(ctx, clusterURL(cluster), append(opts, emq.WithLogger(slog.New(slog.DiscardHandler)))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		queue := client.Queue("failover")
		if err := queue.Declare(ctx, "test.job"); err != nil {
			t.Fatal(err)
		}
		return queue
	}
	gateway, worker := dial(opts...), dial()
	master, standby := cluster.MasterOf(t, gateway.Key("jobs"))

	// The loops: 4 admitting, as many requests of a gateway, and one
	// claiming, as a worker. A failed call is tried again after a short
	// pause, so the window measured is the client's, not a backoff's.
	const pause = 10 * time.Millisecond
	var admissions, claims outcomes
	var admitted atomic.Int64
	loops, stop := context.WithCancel(ctx)
	var running sync.WaitGroup
	for g := range 4 {
		running.Go(func() {
			for n := 0; loops.Err() == nil; n++ {
				call, cancel := context.WithTimeout(loops, time.Second)
				_, err := gateway.Admit(call, job(fmt.Sprintf("J%d-%d", g, n), fmt.Sprintf("g%d", g), ""))
				cancel()
				if loops.Err() != nil {
					return
				}
				admissions.add(err)
				if err == nil {
					admitted.Add(1)
				}
				time.Sleep(pause)
			}
		})
	}
	running.Go(func() {
		for loops.Err() == nil {
			call, cancel := context.WithTimeout(loops, time.Second)
			_, err := worker.Claim(call, 8, time.Minute)
			cancel()
			if loops.Err() != nil {
				return
			}
			claims.add(err)
			time.Sleep(pause)
		}
	})
	t.Cleanup(func() { stop(); running.Wait() })

	eventually(t, 5*time.Second, "admissions before the kill", func() bool { return admitted.Load() >= 100 })
	killed := time.Now()
	master.Kill(t)
	promoted, promotedAt := cluster.WaitForPromotion(t, standby, 30*time.Second)
	// Watch the loops for the bound and a second more, so an error after
	// the bound shows.
	time.Sleep(time.Until(promotedAt.Add(failoverBound + time.Second)))
	stop()
	running.Wait()

	t.Logf("%s promoted %v after the kill", promoted.Addr, promotedAt.Sub(killed).Round(time.Millisecond))
	for _, loop := range []struct {
		name  string
		calls *outcomes
	}{{"admissions", &admissions}, {"claims", &claims}} {
		firstSuccess, lastError, errs, lastErr := loop.calls.window(promotedAt)
		switch {
		case firstSuccess.IsZero():
			t.Errorf("%s: no success in %v after the promotion (%d errors, the last %v)", loop.name, failoverBound+time.Second, errs, lastErr)
			continue
		case lastError.After(promotedAt.Add(failoverBound)):
			t.Errorf("%s: the last error came %v after the promotion, want at most %v: %v",
				loop.name, lastError.Sub(promotedAt).Round(time.Millisecond), failoverBound, lastErr)
		}
		t.Logf("%s: first success %v after the promotion, last error %v after it (%d errors in all, the last %v)",
			loop.name, firstSuccess.Sub(promotedAt).Round(time.Millisecond), lastError.Sub(promotedAt).Round(time.Millisecond), errs, lastErr)
	}
}

// TestWaitingAdmissionsFollowAPlannedFailover: after a planned failover
// (CLUSTER FAILOVER on the replica) the node the admissions (and a
// worker's appends to a log) waiting for replicas were sent to answers
// MOVED, which says the script did not run; the call follows the redirect,
// as every other call does, instead of failing.
func TestWaitingAdmissionsFollowAPlannedFailover(t *testing.T) {
	testserver.Parallel(t)
	if testing.Short() {
		t.Skip("starts a cluster with replicas and fails a master over")
	}
	if testserver.ClusterMode() {
		t.Skip("starts a cluster of its own; the single-server leg runs it")
	}
	ctx := context.Background()
	cluster := testserver.StartRedisCluster(t, testserver.WithReplicas(1))
	// A gateway admitting and a worker appending to a log, each with its
	// map of the cluster loaded before the failover.
	dial := func() *emq.Queue {
		client, err := emq.Dial(ctx, clusterURL(cluster), emq.WithLogger(slog.New(slog.DiscardHandler)), emq.WithAdmitReplicas(1, 500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Close() })
		queue := client.Queue("planned")
		if err := queue.Declare(ctx, "test.job"); err != nil {
			t.Fatal(err)
		}
		return queue
	}
	queue, worker := dial(), dial()
	if _, err := queue.Admit(ctx, job("J1", "g", "")); err != nil {
		t.Fatalf("admit before the failover: %v", err)
	}
	entry := []emq.LogEntry{{ID: "E", Type: "test.event", Data: []byte("e")}}
	if _, err := worker.AppendLog(ctx, "g", emq.LogSource{}, entry); err != nil {
		t.Fatalf("append before the failover: %v", err)
	}

	old, replicas := cluster.MasterOf(t, queue.Key("jobs"))
	if err := replicas[0].Client(t).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	promoted, _ := cluster.WaitForPromotion(t, replicas, 10*time.Second)
	oldClient := old.Client(t)
	eventually(t, 10*time.Second, "the old master follows the promoted replica", func() bool {
		info, err := oldClient.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})

	if _, err := worker.AppendLog(ctx, "g", emq.LogSource{}, entry); err != nil {
		t.Errorf("append after the failover: %v; want it sent where the slot moved", err)
	}
	for i := 2; i <= 4; i++ {
		id := fmt.Sprintf("J%d", i)
		if _, err := queue.Admit(ctx, job(id, "g", "")); err != nil {
			var notReplicated *emq.NotReplicatedError
			if errors.As(err, &notReplicated) {
				t.Errorf("admit %s after the failover: %v (not held by a replica, though the old master follows the new one)", id, err)
				continue
			}
			t.Errorf("admit %s after the failover: %v; want it sent where the slot moved", id, err)
			continue
		}
		if held, err := promoted.Client(t).HExists(ctx, queue.Key("jobs"), id).Result(); err != nil || !held {
			t.Errorf("%s admitted, but the promoted replica holds no row of it (%v)", id, err)
		}
	}
}
