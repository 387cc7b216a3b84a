package testserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func TestRedisAnswersPing(t *testing.T) {
	t.Parallel()
	server := testserver.StartRedis(t)
	if want := "redis://" + server.Addr + "/0"; server.URL() != want {
		t.Errorf("URL() = %q, want %q", server.URL(), want)
	}
	if err := server.Client(t).Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

func TestRedisConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		opts      []testserver.RedisOption
		directive string
		want      string
	}{
		{name: "persistence off by default", directive: "appendonly", want: "no"},
		{name: "no RDB snapshots by default", directive: "save", want: ""},
		{
			name:      "option overrides default",
			opts:      []testserver.RedisOption{testserver.WithRedisConfig("appendonly", "yes")},
			directive: "appendonly", want: "yes",
		},
		{
			name:      "option adds directive",
			opts:      []testserver.RedisOption{testserver.WithRedisConfig("maxmemory-policy", "allkeys-lru")},
			directive: "maxmemory-policy", want: "allkeys-lru",
		},
		{
			name: "last option wins",
			opts: []testserver.RedisOption{
				testserver.WithRedisConfig("maxmemory-policy", "allkeys-lru"),
				testserver.WithRedisConfig("maxmemory-policy", "noeviction"),
			},
			directive: "maxmemory-policy", want: "noeviction",
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			client := testserver.StartRedis(t, test.opts...).Client(t)
			got, err := client.ConfigGet(context.Background(), test.directive).Result()
			if err != nil {
				t.Fatalf("CONFIG GET %s: %v", test.directive, err)
			}
			if got[test.directive] != test.want {
				t.Errorf("CONFIG GET %s = %q, want %q", test.directive, got[test.directive], test.want)
			}
		})
	}
}

func TestRedisRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		opts     []testserver.RedisOption
		wantKept bool
	}{
		{name: "appendonly keeps data", opts: []testserver.RedisOption{testserver.WithRedisConfig("appendonly", "yes")}, wantKept: true},
		{name: "no persistence loses data", wantKept: false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			server := testserver.StartRedis(t, test.opts...)
			client := server.Client(t)
			if err := client.Set(ctx, "order:1", "accepted", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}

			server.Stop(t)
			server.Stop(t) // idempotent
			if err := client.Ping(ctx).Err(); err == nil {
				t.Fatal("PING succeeded while the server was stopped")
			}

			address := server.Addr
			server.Restart(t)
			if server.Addr != address {
				t.Errorf("Addr after Restart = %s, want %s", server.Addr, address)
			}
			got, err := client.Get(ctx, "order:1").Result()
			switch {
			case test.wantKept && (err != nil || got != "accepted"):
				t.Errorf("GET after restart = %q, %v; want \"accepted\"", got, err)
			case !test.wantKept && err == nil:
				t.Errorf("GET after restart = %q, want the key gone", got)
			}
		})
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := testserver.StartRedisCluster(t)
	if len(cluster.Addrs) != 3 {
		t.Fatalf("got %d node addresses, want 3", len(cluster.Addrs))
	}
	client := cluster.Client(t)

	nodes, err := client.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER NODES: %v", err)
	}
	if masters := strings.Count(nodes, "master"); masters != 3 {
		t.Errorf("CLUSTER NODES lists %d masters, want 3:\n%s", masters, nodes)
	}

	// The hash tags put the keys in slots 15495, 3300 and 7365: one per
	// master of an evenly split three-node cluster.
	keys := []string{"{a}:order", "{b}:order", "{c}:order"}
	for _, key := range keys {
		if err := client.Set(ctx, key, "value of "+key, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	for _, key := range keys {
		got, err := client.Get(ctx, key).Result()
		if err != nil || got != "value of "+key {
			t.Errorf("GET %s = %q, %v; want %q", key, got, err, "value of "+key)
		}
	}

	keysPerMaster := make(chan int64, len(cluster.Addrs))
	err = client.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		size, err := master.DBSize(ctx).Result()
		keysPerMaster <- size
		return err
	})
	if err != nil {
		t.Fatalf("DBSIZE on masters: %v", err)
	}
	close(keysPerMaster)
	for size := range keysPerMaster {
		if size != 1 {
			t.Errorf("a master holds %d keys, want 1 (keys spread over all masters)", size)
		}
	}
}

// TestRedisClusterFailsOverToAReplica: with a replica per master and a
// short node timeout, a killed master's replica is promoted within seconds,
// and the cluster serves its slots from the promoted replica.
func TestRedisClusterFailsOverToAReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes seconds")
	}
	t.Parallel()
	ctx := context.Background()
	started := time.Now()
	cluster := testserver.StartRedisCluster(t, testserver.WithReplicas(1), testserver.WithNodeTimeout(time.Second))
	t.Logf("started in %v", time.Since(started).Round(time.Millisecond))
	if len(cluster.Addrs) != 6 {
		t.Fatalf("got %d node addresses, want 6", len(cluster.Addrs))
	}
	masters := map[string]bool{}
	for _, key := range []string{"{a}:order", "{b}:order", "{c}:order"} {
		master, replicas := cluster.MasterOf(t, key)
		masters[master.Addr] = true
		if len(replicas) != 1 || replicas[0].Addr == master.Addr {
			t.Fatalf("%s: master %s, replicas %v; want one other node", key, master.Addr, replicas)
		}
		for node, want := range map[*testserver.Redis]string{master: "master", replicas[0]: "slave"} {
			if role, err := node.Role(ctx); err != nil || role != want {
				t.Errorf("%s: ROLE of %s = %q, %v; want %q", key, node.Addr, role, err, want)
			}
		}
	}
	if len(masters) != 3 {
		t.Fatalf("the keys of three slots are served by %d masters, want 3", len(masters))
	}

	master, replicas := cluster.MasterOf(t, "{a}:order")
	if err := master.Client(t).Set(ctx, "{a}:order", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := master.Client(t).Do(ctx, "WAIT", 1, 1000).Err(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	master.Kill(t)
	master.Kill(t) // idempotent
	promoted, at := cluster.WaitForPromotion(t, replicas, 30*time.Second)
	t.Logf("%s promoted %v after the kill", promoted.Addr, at.Sub(killed).Round(time.Millisecond))
	if promoted != replicas[0] {
		t.Errorf("promoted %s, want the replica %s", promoted.Addr, replicas[0].Addr)
	}
	// The other nodes hear of the promotion by gossip, within moments.
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		now, _ := cluster.MasterOf(t, "{a}:order")
		if now == promoted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2s after the promotion CLUSTER SLOTS still names %s, want %s", now.Addr, promoted.Addr)
		}
	}
	if got, err := promoted.Client(t).Get(ctx, "{a}:order").Result(); err != nil || got != "before" {
		t.Errorf("GET on the promoted replica = %q, %v; want the value written before the kill", got, err)
	}
}

// The tests that set ORDERGATE_REDIS_SERVER or ORDERGATE_REDIS_CLI are not
// parallel: t.Setenv forbids it.

// TestRedisBinariesFromEnvironment puts a wrapper that records each run in
// front of the binaries the harness would otherwise run, and checks that a
// cluster start goes through both: the server three times, the cli once.
func TestRedisBinariesFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	wrap := func(env, fallback string) (log string) {
		t.Helper()
		real := os.Getenv(env)
		if real == "" {
			var err error
			if real, err = exec.LookPath(fallback); err != nil {
				t.Fatalf("look up %s: %v", fallback, err)
			}
		}
		log = filepath.Join(dir, fallback+".runs")
		wrapper := filepath.Join(dir, "wrapped-"+fallback)
		script := fmt.Sprintf("#!/bin/sh\necho run >> '%s'\nexec '%s' \"$@\"\n", log, real)
		if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv(env, wrapper)
		return log
	}
	serverRuns := wrap(testserver.RedisServerEnv, "redis-server")
	cliRuns := wrap(testserver.RedisCLIEnv, "redis-cli")

	cluster := testserver.StartRedisCluster(t)
	if err := cluster.Client(t).Set(context.Background(), "{a}:order", "x", 0).Err(); err != nil {
		t.Fatalf("SET on the cluster: %v", err)
	}
	for log, want := range map[string]int{serverRuns: 3, cliRuns: 1} {
		content, err := os.ReadFile(log)
		if err != nil {
			t.Fatalf("the harness never ran %s's wrapper: %v", filepath.Base(log), err)
		}
		if got := strings.Count(string(content), "run\n"); got != want {
			t.Errorf("%s: %d runs, want %d", filepath.Base(log), got, want)
		}
	}
}

func TestRedisBinariesFromEnvironmentRefuseBadValues(t *testing.T) {
	tests := []struct {
		name, env, value string
		start            func(testing.TB)
		want             string
	}{
		{
			name: "relative server path", env: testserver.RedisServerEnv, value: "../shared/valkey/valkey-server",
			start: func(tb testing.TB) { testserver.StartRedis(tb) },
			want:  `ORDERGATE_REDIS_SERVER="../shared/valkey/valkey-server": want an absolute path`,
		},
		{
			name: "server not on PATH", env: testserver.RedisServerEnv, value: "no-such-redis-server",
			start: func(tb testing.TB) { testserver.StartRedis(tb) },
			want:  `ORDERGATE_REDIS_SERVER="no-such-redis-server"`,
		},
		{
			name: "missing cli", env: testserver.RedisCLIEnv, value: "/nonexistent/valkey-cli",
			start: func(tb testing.TB) { testserver.StartRedisCluster(tb) },
			want:  `ORDERGATE_REDIS_CLI="/nonexistent/valkey-cli"`,
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			t.Setenv(test.env, test.value)
			if msg := fatalOf(t, t.Name(), test.start); !strings.Contains(msg, test.want) {
				t.Errorf("fatal = %q, want it to contain %q", msg, test.want)
			}
		})
	}
}

// The Postgres tests are not parallel: TestPostgresServerStopStart takes the
// shared server down, which would break any test running alongside it.

func TestPostgresGivesEachCallItsOwnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	first, second := testserver.Postgres(t), testserver.Postgres(t)
	if first.Name == second.Name || first.URL == second.URL {
		t.Fatalf("two calls returned the same database %q (%s)", first.Name, first.URL)
	}
	for _, database := range []*testserver.PostgresDatabase{first, second} {
		pool := database.Pool(t)
		var current string
		if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&current); err != nil {
			t.Fatalf("%s: current_database: %v", database.Name, err)
		}
		if current != database.Name {
			t.Errorf("URL %s connects to %q, want %q", database.URL, current, database.Name)
		}
		var tables int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'").Scan(&tables)
		if err != nil {
			t.Fatalf("%s: count tables: %v", database.Name, err)
		}
		if tables != 0 {
			t.Errorf("%s has %d tables, want an empty database", database.Name, tables)
		}
		if _, err := pool.Exec(ctx, "CREATE TABLE orders (id bigint PRIMARY KEY)"); err != nil {
			t.Errorf("%s: CREATE TABLE: %v", database.Name, err)
		}
	}
}

// MigratedPostgres copies one migrated template: each copy must be at the
// newest schema and a database of its own.
func TestMigratedPostgresGivesEachCallItsOwnNewestSchema(t *testing.T) {
	ctx := context.Background()
	fresh := testserver.Postgres(t)
	if err := migrations.Up(fresh.URL); err != nil {
		t.Fatal(err)
	}
	newest, _, err := migrations.Version(fresh.URL)
	if err != nil {
		t.Fatal(err)
	}
	first, second := testserver.MigratedPostgres(t), testserver.MigratedPostgres(t)
	if first.Name == second.Name {
		t.Fatalf("two calls returned the same database %q", first.Name)
	}
	for _, database := range []*testserver.PostgresDatabase{first, second} {
		version, dirty, err := migrations.Version(database.URL)
		if err != nil || dirty || version != newest {
			t.Errorf("%s is at version %d (dirty %v, %v), want %d", database.Name, version, dirty, err, newest)
		}
	}
	if _, err := first.Pool(t).Exec(ctx, "CREATE TABLE only_in_first (id bigint)"); err != nil {
		t.Fatal(err)
	}
	var found bool
	if err := second.Pool(t).QueryRow(ctx, "SELECT to_regclass('only_in_first') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Errorf("a table created in %s shows in %s", first.Name, second.Name)
	}
}

func TestPostgresDatabaseIsDroppedAtCleanup(t *testing.T) {
	ctx := context.Background()
	var dropped string
	t.Run("owner", func(t *testing.T) {
		database := testserver.Postgres(t)
		dropped = database.Name
		// A connection left open must not prevent the drop.
		_ = database.Pool(t)
	})
	pool := testserver.Postgres(t).Pool(t)
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", dropped).Scan(&exists); err != nil {
		t.Fatalf("look up database: %v", err)
	}
	if exists {
		t.Errorf("database %s still exists after its test ended", dropped)
	}
}

func TestPostgresServerStopStart(t *testing.T) {
	ctx := context.Background()
	pool := testserver.Postgres(t).Pool(t)
	server := testserver.PostgresServer(t)

	server.Stop(t)
	server.Stop(t) // idempotent
	if err := pool.Ping(ctx); err == nil {
		t.Fatal("ping succeeded while the server was stopped")
	}

	server.Start(t)
	// The pool replaces connections the outage broke.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := pool.Ping(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping after restart: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The shared-cluster and QueueRedis tests are not parallel: SharedRedisCluster
// empties the cluster for each caller, and t.Setenv forbids t.Parallel.

func TestSharedRedisClusterIsEmptiedForEachCall(t *testing.T) {
	ctx := context.Background()
	first := testserver.SharedRedisCluster(t)
	if len(first.Addrs) != 3 {
		t.Fatalf("got %d node addresses, want 3", len(first.Addrs))
	}
	client := first.Client(t)
	// The hash tags put the keys in slots 15495, 3300 and 7365: one per
	// master of an evenly split three-node cluster.
	for _, key := range []string{"{a}:order", "{b}:order", "{c}:order"} {
		if err := client.Set(ctx, key, "x", 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
	}
	sha, err := client.ScriptLoad(ctx, "return 1").Result() // loads on every master
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
	if sizes := keysPerMaster(t, client); !slices.Equal(sizes, []int64{1, 1, 1}) {
		t.Errorf("keys per master = %v, want [1 1 1]: keys with different hash tags on different masters", sizes)
	}

	second := testserver.SharedRedisCluster(t)
	if !slices.Equal(second.Addrs, first.Addrs) {
		t.Errorf("second call returned cluster %v, want the shared %v", second.Addrs, first.Addrs)
	}
	if sizes := keysPerMaster(t, client); !slices.Equal(sizes, []int64{0, 0, 0}) {
		t.Errorf("keys per master after the second call = %v, want an empty keyspace", sizes)
	}
	err = client.ForEachMaster(ctx, func(ctx context.Context, master *redis.Client) error {
		exists, err := master.ScriptExists(ctx, sha).Result()
		if err != nil {
			return err
		}
		if exists[0] {
			t.Errorf("master %s still has script %s after the second call", master.Options().Addr, sha)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("SCRIPT EXISTS on masters: %v", err)
	}
}

// keysPerMaster returns the DBSIZE of every master, sorted.
func keysPerMaster(t *testing.T, client *redis.ClusterClient) []int64 {
	t.Helper()
	var mu sync.Mutex
	var sizes []int64
	err := client.ForEachMaster(context.Background(), func(ctx context.Context, master *redis.Client) error {
		size, err := master.DBSize(ctx).Result()
		mu.Lock()
		sizes = append(sizes, size)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("DBSIZE on masters: %v", err)
	}
	slices.Sort(sizes)
	return sizes
}

func TestSharedRedisClusterRunsScriptsOnOneHashTag(t *testing.T) {
	ctx := context.Background()
	client := testserver.SharedRedisCluster(t).Client(t)
	script := redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[1])
return redis.call('MGET', KEYS[1], KEYS[2])`)

	got, err := script.Eval(ctx, client, []string{"emq:{q}:one", "emq:{q}:two"}, "v").StringSlice()
	if err != nil || !slices.Equal(got, []string{"v", "v"}) {
		t.Fatalf("EVAL with two keys of hash tag {q} = %v, %v; want [v v]", got, err)
	}
	// The cluster is real: keys of different slots in one script are refused.
	err = script.Eval(ctx, client, []string{"emq:{a}:one", "emq:{b}:two"}, "v").Err()
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("EVAL with keys of hash tags {a} and {b}: err = %v, want CROSSSLOT", err)
	}
}

func TestSharedRedisClusterRefusesUnrelatedConcurrentUse(t *testing.T) {
	testserver.SharedRedisCluster(t)
	// A subtest running while its parent holds the cluster is allowed.
	if msg := fatalOf(t, "TestSharedRedisClusterRefusesUnrelatedConcurrentUse/sub", func(tb testing.TB) {
		testserver.SharedRedisCluster(tb)
	}); msg != "" {
		t.Errorf("subtest of the holder failed: %s", msg)
	}
	// Another test at the same time is what t.Parallel would cause.
	msg := fatalOf(t, "TestOther", func(tb testing.TB) { testserver.SharedRedisCluster(tb) })
	if !strings.Contains(msg, "t.Parallel") {
		t.Errorf("concurrent use by another test: fatal = %q, want a failure naming t.Parallel", msg)
	}
}

func TestClusterMode(t *testing.T) {
	for value, want := range map[string]bool{"": false, "single": false, "cluster": true} {
		t.Setenv("EMQ_TEST_REDIS", value)
		if got := testserver.ClusterMode(); got != want {
			t.Errorf("EMQ_TEST_REDIS=%q: ClusterMode() = %v, want %v", value, got, want)
		}
	}
}

func TestRerunLeg(t *testing.T) {
	for _, tc := range []struct {
		rerun, queue, server string
		want                 bool
	}{
		{"", "", "", false},
		{"1", "", "", true},
		{"0", "", "", false},
		{"1", "cluster", "/opt/valkey/valkey-server", true},
		// The Redis under the tests alone does not shrink them: only make
		// test's repeat legs say so.
		{"", "cluster", "", false},
		{"", "", "/opt/valkey/valkey-server", false},
	} {
		t.Setenv(testserver.RerunEnv, tc.rerun)
		t.Setenv(testserver.QueueRedisEnv, tc.queue)
		t.Setenv(testserver.RedisServerEnv, tc.server)
		if got := testserver.RerunLeg(); got != tc.want {
			t.Errorf("%s=%q %s=%q %s=%q: RerunLeg() = %v, want %v", testserver.RerunEnv, tc.rerun,
				testserver.QueueRedisEnv, tc.queue, testserver.RedisServerEnv, tc.server, got, tc.want)
		}
	}
}

func TestQueueRedisSingleServerByDefault(t *testing.T) {
	ctx := context.Background()
	for _, value := range []string{"", "single"} {
		t.Run("EMQ_TEST_REDIS="+value, func(t *testing.T) {
			t.Setenv("EMQ_TEST_REDIS", value)
			rdb := testserver.QueueRedis(t, testserver.WithRedisConfig("maxmemory-policy", "allkeys-lru"))
			if _, ok := rdb.(*redis.Client); !ok {
				t.Fatalf("QueueRedis returned %T, want *redis.Client", rdb)
			}
			if info := rdb.Info(ctx, "cluster").Val(); !strings.Contains(info, "cluster_enabled:0") {
				t.Errorf("INFO cluster = %q, want a server outside cluster mode", info)
			}
			if got := rdb.ConfigGet(ctx, "maxmemory-policy").Val()["maxmemory-policy"]; got != "allkeys-lru" {
				t.Errorf("maxmemory-policy = %q, want the option's allkeys-lru", got)
			}
			if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatalf("SET: %v", err)
			}
			if n := testserver.QueueRedis(t).DBSize(ctx).Val(); n != 0 {
				t.Errorf("a second QueueRedis has %d keys, want a fresh server", n)
			}
		})
	}
}

func TestQueueRedisClusterMode(t *testing.T) {
	ctx := context.Background()
	t.Setenv("EMQ_TEST_REDIS", "cluster")
	rdb := testserver.QueueRedis(t)
	cluster, ok := rdb.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("QueueRedis returned %T, want *redis.ClusterClient", rdb)
	}
	if nodes := cluster.ClusterNodes(ctx).Val(); strings.Count(nodes, "master") != 3 {
		t.Errorf("CLUSTER NODES = %q, want 3 masters", nodes)
	}
	if err := rdb.Set(ctx, "{a}:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if sizes := keysPerMaster(t, testserver.QueueRedis(t).(*redis.ClusterClient)); !slices.Equal(sizes, []int64{0, 0, 0}) {
		t.Errorf("keys per master after a second QueueRedis = %v, want the cluster emptied", sizes)
	}
}

func TestKeysListsEveryNode(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("EMQ_TEST_REDIS", mode)
			rdb := testserver.QueueRedis(t)
			for _, key := range []string{"{c}:order", "{a}:order", "{b}:order", "{a}:other"} {
				if err := rdb.Set(ctx, key, "x", 0).Err(); err != nil {
					t.Fatalf("SET %s: %v", key, err)
				}
			}
			if got, want := testserver.Keys(t, rdb, "*:order"), []string{"{a}:order", "{b}:order", "{c}:order"}; !slices.Equal(got, want) {
				t.Errorf("Keys(*:order) = %v, want %v", got, want)
			}
		})
	}
}

func TestQueueRedisRefusesMisuse(t *testing.T) {
	t.Run("options in cluster mode", func(t *testing.T) {
		t.Setenv("EMQ_TEST_REDIS", "cluster")
		msg := fatalOf(t, t.Name(), func(tb testing.TB) {
			testserver.QueueRedis(tb, testserver.WithRedisConfig("appendonly", "yes"))
		})
		if !strings.Contains(msg, "t.Skip") {
			t.Errorf("fatal = %q, want a failure telling to skip in cluster mode", msg)
		}
	})
	t.Run("unknown mode", func(t *testing.T) {
		t.Setenv("EMQ_TEST_REDIS", "clsuter")
		if msg := fatalOf(t, t.Name(), func(tb testing.TB) { testserver.QueueRedis(tb) }); !strings.Contains(msg, `"clsuter"`) {
			t.Errorf("fatal = %q, want a failure naming the value", msg)
		}
	})
}

// fatalOf runs use with a testing.TB named name that records Fatalf instead
// of failing t, and returns the message ("" when use did not fail). Cleanups
// go to t.
func fatalOf(t *testing.T, name string, use func(testing.TB)) string {
	t.Helper()
	recorder := &fatalRecorder{TB: t, name: name}
	done := make(chan struct{})
	go func() {
		defer close(done)
		use(recorder)
	}()
	<-done
	return recorder.fatal
}

type fatalRecorder struct {
	testing.TB
	name  string
	fatal string
}

func (r *fatalRecorder) Name() string { return r.name }

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *fatalRecorder) Fatal(args ...any) {
	r.fatal = fmt.Sprint(args...)
	runtime.Goexit()
}

func TestQueueRedisServer(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("EMQ_TEST_REDIS", mode)
			server := testserver.QueueRedisServer(t)
			if mode == "cluster" {
				opts, err := redis.ParseClusterURL(server.URL())
				if err != nil || len(opts.Addrs) != 3 || !slices.Equal(opts.Addrs, server.Cluster().Addrs) {
					t.Errorf("URL %q: %v, %v; want the cluster's three nodes", server.URL(), opts, err)
				}
			} else if _, err := redis.ParseURL(server.URL()); err != nil || server.Cluster() != nil {
				t.Errorf("URL %q: %v, cluster %v; want one server", server.URL(), err, server.Cluster())
			}
			rdb := server.Client(t)
			for _, key := range []string{"{a}:k", "{b}:k", "{c}:k"} {
				if err := rdb.Set(ctx, key, "v", 0).Err(); err != nil {
					t.Fatalf("SET %s: %v", key, err)
				}
			}
			testserver.FlushAll(t, rdb)
			if keys := testserver.Keys(t, rdb, "*"); len(keys) != 0 {
				t.Errorf("after FlushAll: %v, want no key on any node", keys)
			}
			// Single and SingleRedis skip in cluster mode, and only there.
			for name, single := range map[string]func(testing.TB){
				"Single":      func(tb testing.TB) { server.Single(tb, "test") },
				"SingleRedis": func(tb testing.TB) { testserver.SingleRedis(tb, "test") },
			} {
				reached := false
				t.Run(name, func(t *testing.T) { single(t); reached = true })
				if reached == (mode == "cluster") {
					t.Errorf("%s in mode %s: the test went on %v", name, mode, reached)
				}
			}
		})
	}
}
