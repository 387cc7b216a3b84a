package scriptpipe_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// counter counts its runs in KEYS[1].
const counter = "return redis.call('INCR', KEYS[1])"

// TestOnlyARepeatableScriptIsSentAgain: when the reply of a run is lost
// with its connection, go-redis sends a Repeatable script again (with its
// default retries, on a Client and on a ClusterClient alike) and never a
// Once one, whether run alone or in a pipeline.
func TestOnlyARepeatableScriptIsSentAgain(t *testing.T) {
	clients := []struct {
		name    string
		connect func(t *testing.T) (through redis.UniversalClient, proxy *testserver.Proxy, direct redis.UniversalClient)
	}{
		{"client", func(t *testing.T) (redis.UniversalClient, *testserver.Proxy, redis.UniversalClient) {
			server := testserver.StartRedis(t)
			proxy := testserver.StartProxy(t, server.Addr)
			through := redis.NewClient(&redis.Options{Addr: proxy.Addr(server.Addr)})
			t.Cleanup(func() { _ = through.Close() })
			return through, proxy, server.Client(t)
		}},
		{"cluster client", func(t *testing.T) (redis.UniversalClient, *testserver.Proxy, redis.UniversalClient) {
			cluster := testserver.SharedRedisCluster(t)
			proxy := testserver.StartProxy(t, cluster.Addrs...)
			through := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs, Dialer: proxy.Dial})
			t.Cleanup(func() { _ = through.Close() })
			return through, proxy, cluster.Client(t)
		}},
	}
	scripts := []struct {
		name     string
		script   *scriptpipe.Script
		wantRuns int64
	}{
		{"repeatable", scriptpipe.Repeatable(counter), 2},
		{"once", scriptpipe.Once(counter), 1},
	}
	ways := []struct {
		name string
		run  func(ctx context.Context, rdb redis.UniversalClient, script *scriptpipe.Script, key string) error
	}{
		{"alone", func(ctx context.Context, rdb redis.UniversalClient, script *scriptpipe.Script, key string) error {
			return script.Run(ctx, rdb, []string{key}).Err()
		}},
		{"in a pipeline", func(ctx context.Context, rdb redis.UniversalClient, script *scriptpipe.Script, key string) error {
			cmds, err := scriptpipe.Run(ctx, rdb, script, []scriptpipe.Call{{Keys: []string{key}}})
			if err != nil {
				return err
			}
			return cmds[0].Err()
		}},
	}
	for _, client := range clients {
		t.Run(client.name, func(t *testing.T) {
			ctx := context.Background()
			through, proxy, direct := client.connect(t)
			if err := direct.ScriptLoad(ctx, counter).Err(); err != nil {
				t.Fatal(err)
			}
			for _, s := range scripts {
				for _, way := range ways {
					key := "runs:" + s.name + ":" + way.name
					fault := proxy.DropReply(key)
					err := way.run(ctx, through, s.script, key)
					runs, _ := direct.Get(ctx, key).Int64()
					if runs != s.wantRuns || int64(fault.Seen()) != s.wantRuns {
						t.Errorf("%s %s: ran %d times, sent %d; want %d", s.name, way.name, runs, fault.Seen(), s.wantRuns)
					}
					if lost := s.wantRuns == 1; lost != (err != nil) {
						t.Errorf("%s %s: error %v, want one only when the reply is lost for good", s.name, way.name, err)
					}
				}
			}
		})
	}
}
