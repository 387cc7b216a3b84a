package testserver_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/testserver"
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
