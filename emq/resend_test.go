package emq_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/lua"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// proxiedReadTimeout is the read timeout of the clients behind the proxy: a
// reply held back longer times out.
const proxiedReadTimeout = 500 * time.Millisecond

// proxiedQueue returns the test queue on a client whose every connection
// passes through a proxy, the proxy, and a client that goes around it. On a
// single server the client is emq.Dial's own (go-redis retries by default);
// on the shared cluster it is a caller's ClusterClient handed to Connect
// (its retries are counted by MaxRedirects). Every script is loaded first,
// so each move is one EVALSHA carrying its script's SHA1.
func proxiedQueue(t *testing.T) (*emq.Queue, *testserver.Proxy, redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	var client *emq.Client
	var proxy *testserver.Proxy
	var direct redis.UniversalClient
	var err error
	if testserver.ClusterMode() {
		cluster := testserver.SharedRedisCluster(t)
		direct = cluster.Client(t)
		proxy = testserver.StartProxy(t, cluster.Addrs...)
		client, err = emq.Connect(ctx, redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: cluster.Addrs, Dialer: proxy.Dial, ReadTimeout: proxiedReadTimeout,
		}))
	} else {
		server := testserver.StartRedis(t)
		direct = server.Client(t)
		proxy = testserver.StartProxy(t, server.Addr)
		client, err = emq.Dial(ctx, "redis://"+proxy.Addr(server.Addr)+"/0?read_timeout="+proxiedReadTimeout.String())
	}
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	for _, script := range []string{lua.Admit, lua.Claim, lua.Extend, lua.Complete, lua.Retry, lua.Release,
		lua.Promote, lua.Reap, lua.Cancel, lua.Requeue, lua.RateLimit} {
		if err := direct.ScriptLoad(ctx, script).Err(); err != nil {
			t.Fatalf("load a script: %v", err)
		}
	}
	queue := client.Queue("work")
	if err := queue.Declare(ctx, "test.job"); err != nil {
		t.Fatalf("declare: %v", err)
	}
	return queue, proxy, direct
}

func sha(script string) string {
	sum := sha1.Sum([]byte(script))
	return hex.EncodeToString(sum[:])
}

// TestUnsafeMovesAreNotSentAgain: a move whose second run would do harm or
// answer wrongly (see docs/protocol.md) is sent once even when its reply is
// held back past the read timeout or lost with its connection. The caller
// gets an error that is not a refusal, and the job shows that the move ran
// exactly once.
func TestUnsafeMovesAreNotSentAgain(t *testing.T) {
	testserver.Parallel(t)
	type move struct {
		name string
		// setup prepares the job(s) and returns what the fault matches.
		setup func(t *testing.T, queue *emq.Queue) string
		run   func(ctx context.Context, queue *emq.Queue) error
		check func(t *testing.T, queue *emq.Queue)
	}
	moves := []move{{
		name: "claim",
		setup: func(t *testing.T, queue *emq.Queue) string {
			admitN(t, queue, "g", 2)
			// A claim's first call only learns the lanes at the head of
			// the rotation; the call naming lane g is the one that claims.
			return queue.Key("lane:g")
		},
		run: func(ctx context.Context, queue *emq.Queue) error {
			claims, err := queue.Claim(ctx, 1, time.Minute)
			if err == nil {
				t.Errorf("the claim answered %d jobs", len(claims))
			}
			return err
		},
		check: func(t *testing.T, queue *emq.Queue) {
			// One run leased the first job to nobody; a second would have
			// leased the other too.
			if got, want := []string{state(t, queue, "g-00000"), state(t, queue, "g-00001")}, []string{emq.StateActive, emq.StatePending}; got[0] != want[0] || got[1] != want[1] {
				t.Errorf("states = %v, want %v", got, want)
			}
		},
	}, {
		name: "cancel",
		setup: func(t *testing.T, queue *emq.Queue) string {
			admitN(t, queue, "cancel", 1)
			// Cancel's first call only learns the job's lane; the call
			// naming the lane is the one that cancels.
			return queue.Key("lane:cancel")
		},
		run: func(ctx context.Context, queue *emq.Queue) error { return queue.Cancel(ctx, "cancel-00000") },
		check: func(t *testing.T, queue *emq.Queue) {
			if got := state(t, queue, "cancel-00000"); got != emq.StateCanceled {
				t.Errorf("state = %s, want canceled", got)
			}
		},
	}, {
		name:  "admit",
		setup: func(t *testing.T, queue *emq.Queue) string { return "fp-J-admit" },
		run: func(ctx context.Context, queue *emq.Queue) error {
			admission, err := queue.Admit(ctx, job("J-admit", "g", "dedup-admit"))
			if err == nil {
				t.Errorf("the admission answered %+v", admission)
			}
			return err
		},
		check: func(t *testing.T, queue *emq.Queue) {
			if got := state(t, queue, "J-admit"); got != emq.StatePending {
				t.Errorf("state = %s, want pending", got)
			}
		},
	}, {
		name: "complete",
		setup: func(t *testing.T, queue *emq.Queue) string {
			admitN(t, queue, "complete", 1)
			claimOne(t, queue, time.Minute)
			return sha(lua.Complete)
		},
		run: func(ctx context.Context, queue *emq.Queue) error { return queue.Complete(ctx, "complete-00000", 1) },
		check: func(t *testing.T, queue *emq.Queue) {
			if got := state(t, queue, "complete-00000"); got != emq.StateDone {
				t.Errorf("state = %s, want done", got)
			}
		},
	}}
	faults := []struct {
		name string
		arm  func(proxy *testserver.Proxy, match string) *testserver.Fault
	}{
		{"reply delayed past the read timeout", func(proxy *testserver.Proxy, match string) *testserver.Fault {
			return proxy.DelayReply(match, 10*time.Second)
		}},
		{"reply dropped with its connection", func(proxy *testserver.Proxy, match string) *testserver.Fault {
			return proxy.DropReply(match)
		}},
	}
	for _, m := range moves {
		for _, f := range faults {
			t.Run(m.name+"/"+f.name, func(t *testing.T) {
				queue, proxy, _ := proxiedQueue(t)
				fault := f.arm(proxy, m.setup(t, queue))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := m.run(ctx, queue)
				t.Logf("%s: %v", m.name, err)
				var refusal *emq.ScriptError
				switch {
				case err == nil:
					t.Errorf("%s succeeded; want the lost reply's error", m.name)
				case errors.As(err, &refusal):
					t.Errorf("%s = %v; want the lost reply's error, not a refusal", m.name, err)
				}
				if n := fault.Seen(); n != 1 {
					t.Errorf("%s was sent %d times; want once", m.name, n)
				}
				m.check(t, queue)
			})
		}
	}
}

// TestWorkerRecoversFromALostReply: the worker is the caller of claim and
// complete, and what the queue does about a lost reply makes it right. A
// claim's jobs, leased to nobody, run once their lease runs out and the
// reaper takes them back (the lost lease counts as an attempt); a lost
// completion is sent again by the worker itself, whose second send is
// refused as stale and then found to be its own.
func TestWorkerRecoversFromALostReply(t *testing.T) {
	tests := []struct {
		name string
		jobs int
		// arm arms the fault and returns what it should have seen.
		arm          func(proxy *testserver.Proxy, queue *emq.Queue) (*testserver.Fault, int)
		wantAttempts int64
	}{
		{
			name: "claim",
			jobs: 3,
			arm: func(proxy *testserver.Proxy, queue *emq.Queue) (*testserver.Fault, int) {
				// Later claims name lane g too: the count says nothing.
				return proxy.DropReply(queue.Key("lane:g")), 0
			},
			wantAttempts: 2,
		},
		{
			name: "complete",
			jobs: 1,
			arm: func(proxy *testserver.Proxy, queue *emq.Queue) (*testserver.Fault, int) {
				// The lost send, then the worker's own.
				return proxy.DelayReply(sha(lua.Complete), 10*time.Second), 2
			},
			wantAttempts: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, proxy, _ := proxiedQueue(t)
			ids := admitPayloads(t, queue, "g", repeated("ok", tt.jobs)...)
			fault, wantSeen := tt.arm(proxy, queue)
			done := &completions{}
			logger, logs := workerLogger(t)
			startWorker(t, queue, payloadHandler(nil, nil), emq.WorkerOptions{
				Lease: time.Second, Logger: logger, OnComplete: done.record,
			})
			eventually(t, 10*time.Second, "every job done", func() bool { return done.total() >= tt.jobs })
			for _, id := range ids {
				if n := done.of(id); n != 1 {
					t.Errorf("%s completed %d times, want once", id, n)
				}
				if info := readJob(t, queue, id); info.State != emq.StateDone || info.Attempts != tt.wantAttempts {
					t.Errorf("%s is %s after %d attempts, want done after %d", id, info.State, info.Attempts, tt.wantAttempts)
				}
			}
			if n := fault.Seen(); wantSeen > 0 && n != wantSeen {
				t.Errorf("the proxy saw %d sends, want %d", n, wantSeen)
			}
			if strings.Contains(logs.String(), "the queue refused the move") {
				t.Error("the worker took its own lost move for another worker's")
			}
		})
	}
}
