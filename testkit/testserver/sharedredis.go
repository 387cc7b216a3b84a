package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// QueueRedisEnv is the environment variable that QueueRedis and ClusterMode
// read: "cluster" selects the shared Redis Cluster; unset, empty or "single"
// selects a fresh single redis-server per call.
const QueueRedisEnv = "EMQ_TEST_REDIS"

const redisAdminTimeout = 30 * time.Second

var sharedRedisCluster struct {
	once    sync.Once
	cluster *RedisCluster
	dir     string
	err     error

	mu sync.Mutex
	// users counts, per test name, the SharedRedisCluster calls whose test
	// has not finished yet: emptying the cluster under a running test would
	// corrupt it.
	users map[string]int
}

// SharedRedisCluster returns the 3-master cluster shared by every test of the binary, started on first use
// (sync.Once) and stopped by Main. Before returning it empties every master (FLUSHALL on each master, then
// SCRIPT FLUSH too) so each test starts from an empty keyspace; tests that use it must therefore not run in parallel.
//
// A test fails when it calls SharedRedisCluster while an unrelated test (not
// its parent or subtest) that called it is still running, which is what
// t.Parallel would cause. A test calling it again, or its sequential subtest
// calling it, empties the cluster again. Tests must not change the servers'
// configuration (CONFIG SET): the next test would inherit it.
func SharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	requireMain(t, "SharedRedisCluster")
	cluster := startedSharedRedisCluster(t)
	claimSharedRedisCluster(t)
	if err := cluster.empty(); err != nil {
		t.Fatalf("testserver: empty the shared redis cluster: %v", err)
	}
	return cluster
}

func startedSharedRedisCluster(t testing.TB) *RedisCluster {
	t.Helper()
	sharedRedisCluster.once.Do(func() {
		dir, err := os.MkdirTemp("", "ordergate-redis-cluster-")
		if err != nil {
			sharedRedisCluster.err = fmt.Errorf("create temp dir: %w", err)
			return
		}
		cluster := &RedisCluster{}
		if err := cluster.start(dir); err != nil {
			sharedRedisCluster.err = errors.Join(err, cluster.stop(), os.RemoveAll(dir))
			return
		}
		sharedRedisCluster.cluster, sharedRedisCluster.dir = cluster, dir
	})
	if sharedRedisCluster.err != nil {
		t.Fatalf("testserver: start the shared redis cluster: %v", sharedRedisCluster.err)
	}
	return sharedRedisCluster.cluster
}

func claimSharedRedisCluster(t testing.TB) {
	t.Helper()
	name := t.Name()
	shared := &sharedRedisCluster
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for user := range shared.users {
		if !sameTestTree(user, name) {
			t.Fatalf("testserver: %s uses the shared redis cluster while %s still does: "+
				"tests using SharedRedisCluster or QueueRedis in cluster mode must not call t.Parallel", name, user)
		}
	}
	if shared.users == nil {
		shared.users = make(map[string]int)
	}
	shared.users[name]++
	t.Cleanup(func() {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		if shared.users[name]--; shared.users[name] == 0 {
			delete(shared.users, name)
		}
	})
}

// sameTestTree reports whether a and b are the same test or one is a subtest
// of the other: only then can they use the shared cluster without running at
// the same time.
func sameTestTree(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// empty flushes every node; all are masters.
func (c *RedisCluster) empty() error {
	ctx, cancel := context.WithTimeout(context.Background(), redisAdminTimeout)
	defer cancel()
	var errs []error
	for _, address := range c.Addrs {
		client := redis.NewClient(&redis.Options{Addr: address})
		if err := client.FlushAll(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("FLUSHALL on %s: %w", address, err))
		} else if err := client.ScriptFlush(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("SCRIPT FLUSH on %s: %w", address, err))
		}
		_ = client.Close()
	}
	return errors.Join(errs...)
}

func shutDownSharedRedisCluster() error {
	shared := &sharedRedisCluster
	if shared.cluster == nil {
		return nil
	}
	err := shared.cluster.stop()
	if removeErr := os.RemoveAll(shared.dir); removeErr != nil {
		err = errors.Join(err, fmt.Errorf("remove %s: %w", shared.dir, removeErr))
	}
	return err
}

// ClusterMode reports whether EMQ_TEST_REDIS=cluster.
func ClusterMode() bool {
	return os.Getenv(QueueRedisEnv) == "cluster"
}

// RerunEnv is the environment variable make test sets to 1 on the legs
// that run the suites again after the first: the Redis Cluster leg and
// the Valkey leg (RerunLeg).
const RerunEnv = "ORDERGATE_TEST_RERUN"

// RerunLeg reports whether make test marks this run a repeat of its first
// leg (ORDERGATE_TEST_RERUN=1): the cluster or the Valkey leg. A long test
// whose size proves nothing about the Redis under it runs smaller there:
// those legs are for slots, redirects and a server's commands and scripts,
// which a smaller run crosses the same way. Only make test sets it, so a
// developer who points ORDERGATE_REDIS_SERVER or EMQ_TEST_REDIS elsewhere
// still runs every test at its full size.
func RerunLeg() bool {
	return os.Getenv(RerunEnv) == "1"
}

// Parallel runs t in parallel with the package's other parallel tests
// (t.Parallel), except in cluster mode (EMQ_TEST_REDIS=cluster), where the
// tests share one cluster and so run one at a time. It is for tests that
// have servers of their own (a redis-server each, a database each on the
// shared PostgreSQL) and spend most of their time waiting on them, which is
// what made the single-server runs slow. Not for a test that stops the
// shared PostgreSQL (PostgresServer), changes a package variable, or
// asserts how long something took.
func Parallel(t *testing.T) {
	t.Helper()
	if !ClusterMode() {
		t.Parallel()
	}
}

// QueueRedis returns a go-redis UniversalClient for queue tests: a fresh single redis-server (StartRedis) by default,
// or the shared cluster, emptied, when the environment variable EMQ_TEST_REDIS=cluster is set. Closed at cleanup.
// It is QueueRedisServer(t, opts...).Client(t); see QueueRedisServer for opts and the rules of cluster mode.
func QueueRedis(t testing.TB, opts ...RedisOption) redis.UniversalClient {
	t.Helper()
	return QueueRedisServer(t, opts...).Client(t)
}

// SingleRedis is StartRedis for a test of the order path that needs a
// server of its own, which the shared cluster cannot be: it stops or
// restarts Redis, makes it a replica, tracks its keys (RESP3 client-side
// caching, which the gateway refuses on a cluster) or configures it. In
// cluster mode (EMQ_TEST_REDIS=cluster) it skips the test, giving why, since
// the single-server leg runs it.
func SingleRedis(t testing.TB, why string, opts ...RedisOption) *Redis {
	t.Helper()
	if ClusterMode() {
		t.Skip("needs a single redis-server of its own (" + why + "); the single-server leg runs it")
	}
	return StartRedis(t, opts...)
}

// QueueServer is the Redis a test of the order path runs on: a single
// server of its own, or the shared cluster (EMQ_TEST_REDIS=cluster). Tests
// that reach it through a client, or hand a process its URL, run unchanged
// on either.
type QueueServer struct {
	single  *Redis
	cluster *RedisCluster
}

// QueueRedisServer returns a fresh single redis-server (StartRedis) by
// default, or the shared cluster, emptied, when EMQ_TEST_REDIS=cluster.
//
// opts apply only to the single server. In cluster mode QueueRedisServer
// fails a test that passes opts, rather than ignore them: a test that needs
// special server configuration skips itself first,
//
//	if testserver.ClusterMode() {
//		t.Skip("needs maxmemory-policy allkeys-lru, which the shared cluster does not have")
//	}
//
// In cluster mode the test must not run in parallel with others using the
// cluster (see SharedRedisCluster). In both modes the package needs
// TestMain to call Main, so that a missing one shows in the ordinary run. Any
// EMQ_TEST_REDIS value other than unset, "", "single" or "cluster" fails the
// test, so that a typo cannot silently run the single-server suite twice.
func QueueRedisServer(t testing.TB, opts ...RedisOption) *QueueServer {
	t.Helper()
	requireMain(t, "QueueRedis")
	switch mode := os.Getenv(QueueRedisEnv); mode {
	case "", "single":
		return &QueueServer{single: StartRedis(t, opts...)}
	case "cluster":
		if len(opts) > 0 {
			t.Fatalf("testserver: QueueRedis got %d RedisOption(s), which cannot apply to the shared cluster (%s=cluster); "+
				"skip the test in cluster mode: if testserver.ClusterMode() { t.Skip(...) }", len(opts), QueueRedisEnv)
		}
		return &QueueServer{cluster: SharedRedisCluster(t)}
	default:
		t.Fatalf(`testserver: %s=%q: want "cluster", "single", "" or unset`, QueueRedisEnv, mode)
		return nil
	}
}

// Client returns a go-redis client for the server, closed at t.Cleanup: a
// *redis.Client or a *redis.ClusterClient.
func (s *QueueServer) Client(t testing.TB) redis.UniversalClient {
	t.Helper()
	if s.cluster != nil {
		return s.cluster.Client(t)
	}
	return s.single.Client(t)
}

// URL is the REDIS_URL the gateway and the worker take for the server (a
// cluster's names every master: see emq.Open).
func (s *QueueServer) URL() string {
	if s.cluster != nil {
		return s.cluster.URL()
	}
	return s.single.URL()
}

// Single returns the single server, for the part of a test that stops,
// restarts or reconfigures it; in cluster mode it skips the test, giving
// why, as SingleRedis does.
func (s *QueueServer) Single(t testing.TB, why string) *Redis {
	t.Helper()
	if s.single == nil {
		t.Skip("needs a single redis-server of its own (" + why + "); the single-server leg runs it")
	}
	return s.single
}

// Cluster returns the shared cluster, or nil on a single server.
func (s *QueueServer) Cluster() *RedisCluster { return s.cluster }

// Keys returns the keys matching pattern, sorted, from every master when rdb
// is a cluster client. rdb.Keys would ask only one node of a cluster and
// miss the keys of the others.
func Keys(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), redisAdminTimeout)
	defer cancel()
	var keys []string
	cluster, ok := rdb.(*redis.ClusterClient)
	if !ok {
		var err error
		if keys, err = rdb.Keys(ctx, pattern).Result(); err != nil {
			t.Fatalf("testserver: KEYS %s: %v", pattern, err)
		}
		slices.Sort(keys)
		return keys
	}
	var mu sync.Mutex
	err := cluster.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		found, err := master.Keys(ctx, pattern).Result()
		mu.Lock()
		keys = append(keys, found...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("testserver: KEYS %s on the cluster's masters: %v", pattern, err)
	}
	slices.Sort(keys)
	return keys
}

// FlushAll empties the server, every master when rdb is a cluster client,
// as a Redis that lost its data would be. rdb.FlushAll would empty only one
// node of a cluster.
func FlushAll(t testing.TB, rdb redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), redisAdminTimeout)
	defer cancel()
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
			return master.FlushAll(ctx).Err()
		})
	} else {
		err = rdb.FlushAll(ctx).Err()
	}
	if err != nil {
		t.Fatalf("testserver: FLUSHALL: %v", err)
	}
}
