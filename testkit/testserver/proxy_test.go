package testserver_test

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// proxiedClient is a client through proxy to server that never sends a
// command twice, so the tests see each fault as it is.
func proxiedClient(t *testing.T, proxy *testserver.Proxy, server *testserver.Redis, readTimeout time.Duration) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(server.Addr), MaxRetries: -1, ReadTimeout: readTimeout})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func TestProxyForwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, server.Addr)
	if proxy.Addr(server.Addr) == server.Addr || proxy.Addr(server.Addr) == "" {
		t.Fatalf("Addr(%s) = %q, want the proxy's own address", server.Addr, proxy.Addr(server.Addr))
	}
	client := proxiedClient(t, proxy, server, time.Second)
	big := string(make([]byte, 1<<20)) // longer than one read of the proxy
	if err := client.Set(ctx, "k", big, 0).Err(); err != nil {
		t.Fatalf("SET through the proxy: %v", err)
	}
	if got, err := client.Get(ctx, "k").Result(); err != nil || got != big {
		t.Fatalf("GET through the proxy = %d bytes, %v; want %d", len(got), err, len(big))
	}
}

func TestProxyDelaysTheReplyOfTheMatchingCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, server.Addr)
	direct := server.Client(t)

	t.Run("a reply held back longer than the read timeout times out", func(t *testing.T) {
		client := proxiedClient(t, proxy, server, 200*time.Millisecond)
		fault := proxy.DelayReply("late-key", time.Minute)
		err := client.Set(ctx, "late-key", "v", 0).Err()
		var netErr net.Error
		if !errors.As(err, &netErr) || !netErr.Timeout() {
			t.Fatalf("SET = %v, want a timeout", err)
		}
		// The server ran the command all the same.
		if got, err := direct.Get(ctx, "late-key").Result(); err != nil || got != "v" {
			t.Errorf("the server holds %q, %v; want the SET made", got, err)
		}
		if n := fault.Seen(); n != 1 {
			t.Errorf("Seen() = %d, want 1", n)
		}
	})

	t.Run("a reply held back less than the read timeout comes late", func(t *testing.T) {
		client := proxiedClient(t, proxy, server, 5*time.Second)
		fault := proxy.DelayReply("slow-key", 300*time.Millisecond)
		start := time.Now()
		if err := client.Set(ctx, "slow-key", "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		if took := time.Since(start); took < 300*time.Millisecond {
			t.Errorf("the reply came after %s, want at least 300ms", took)
		}
		// The fault acted once; it goes on counting.
		start = time.Now()
		if err := client.Get(ctx, "slow-key").Err(); err != nil {
			t.Fatalf("GET: %v", err)
		}
		if took := time.Since(start); took > 200*time.Millisecond {
			t.Errorf("the second command took %s: the fault acted twice", took)
		}
		if n := fault.Seen(); n != 2 {
			t.Errorf("Seen() = %d, want 2", n)
		}
	})
}

func TestProxyDropsTheReplyOfTheMatchingCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	server := testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, server.Addr)
	client := proxiedClient(t, proxy, server, 5*time.Second)
	fault := proxy.DropReply("lost-key")
	// go-redis may report the reset as the connection's end (EOF).
	err := client.Set(ctx, "lost-key", "v", 0).Err()
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("SET = %v, want the connection reset", err)
	}
	if got, err := server.Client(t).Get(ctx, "lost-key").Result(); err != nil || got != "v" {
		t.Errorf("the server holds %q, %v; want the SET made", got, err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("PING on a new connection: %v", err)
	}
	if n := fault.Seen(); n != 1 {
		t.Errorf("Seen() = %d, want 1", n)
	}
}

func TestProxyDialsTheProxyOfTheTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, second := testserver.StartRedis(t), testserver.StartRedis(t)
	proxy := testserver.StartProxy(t, first.Addr, second.Addr)
	for _, server := range []*testserver.Redis{first, second} {
		// The client names the server; the dialer goes through the proxy.
		client := redis.NewClient(&redis.Options{Addr: server.Addr, Dialer: proxy.Dial, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		fault := proxy.DelayReply("name-"+server.Addr, 0)
		if err := client.Set(ctx, "name-"+server.Addr, "v", 0).Err(); err != nil {
			t.Fatalf("SET: %v", err)
		}
		if n := fault.Seen(); n != 1 {
			t.Errorf("the proxy saw the SET to %s %d times, want once", server.Addr, n)
		}
		if got, _ := server.Client(t).Get(ctx, "name-"+server.Addr).Result(); got != "v" {
			t.Errorf("%s did not get its SET", server.Addr)
		}
	}
	if _, err := proxy.Dial(ctx, "tcp", "127.0.0.1:1"); err == nil {
		t.Error("the proxy dialed an address it does not front")
	}
}

func TestProxyRepointMovesTheListenerToAnotherServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, second := testserver.StartRedis(t), testserver.StartRedis(t)
	for _, server := range []*testserver.Redis{first, second} {
		if err := server.Client(t).Set(ctx, "who", server.Addr, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	proxy := testserver.StartProxy(t, first.Addr)
	listening := proxy.Addr(first.Addr)
	who := func() string {
		t.Helper()
		client := redis.NewClient(&redis.Options{Addr: listening, MaxRetries: -1})
		defer client.Close()
		got, err := client.Get(ctx, "who").Result()
		if err != nil {
			t.Fatalf("GET through the proxy: %v", err)
		}
		return got
	}
	if got := who(); got != first.Addr {
		t.Fatalf("before the repoint the proxy reached %s, want %s", got, first.Addr)
	}

	// A connection open through the listener is cut by the repoint.
	open, err := net.Dial("tcp", listening)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open.Close() })
	if _, err := open.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 64)
	if n, err := open.Read(reply); err != nil || string(reply[:n]) != "+PONG\r\n" {
		t.Fatalf("PING through the proxy = %q, %v", reply[:n], err)
	}

	if err := proxy.Repoint(first.Addr, second.Addr); err != nil {
		t.Fatalf("Repoint: %v", err)
	}
	_ = open.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := open.Read(reply); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("the connection open at the repoint read %q, %v; want it cut", reply[:n], err)
	}
	if got := proxy.Addr(second.Addr); got != listening {
		t.Errorf("Addr(second) = %q, want the listener's %s", got, listening)
	}
	if got := proxy.Addr(first.Addr); got != "" {
		t.Errorf("Addr(first) = %q after the repoint, want none", got)
	}
	if got := who(); got != second.Addr {
		t.Errorf("after the repoint the proxy reached %s, want %s", got, second.Addr)
	}

	if err := proxy.Repoint(first.Addr, second.Addr); err == nil {
		t.Error("repointed a target the proxy no longer fronts")
	}
	if err := proxy.Repoint(second.Addr, second.Addr); err == nil {
		t.Error("repointed a listener to a target a listener fronts already")
	}

	// And back, as a second failover would.
	if err := proxy.Repoint(second.Addr, first.Addr); err != nil {
		t.Fatalf("Repoint back: %v", err)
	}
	if got := who(); got != first.Addr {
		t.Errorf("after repointing back the proxy reached %s, want %s", got, first.Addr)
	}
}
