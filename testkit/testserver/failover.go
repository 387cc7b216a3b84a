package testserver

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// What a failover test needs of a cluster with replicas (WithReplicas): the
// node serving a key and its replicas, a way to crash it, and the moment the
// cluster promoted one of its replicas.

// Kill ends the server with SIGKILL, as a crash would: no SHUTDOWN, nothing
// flushed, connections reset. Like Stop it keeps the port and directory for
// Restart, and does nothing if the server is already stopped.
func (r *Redis) Kill(t testing.TB) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.process == nil {
		return
	}
	if err := r.process.stop(syscall.SIGKILL, redisStopGrace); err != nil {
		t.Fatalf("testserver: kill redis %s: %v", r.Addr, err)
	}
	r.process = nil
}

// Role is the first word of the server's ROLE: "master", "slave" (a replica)
// or "sentinel".
func (r *Redis) Role(ctx context.Context) (string, error) {
	client := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	defer client.Close()
	reply, err := client.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(reply) == 0 {
		return "", fmt.Errorf("ROLE answered nothing")
	}
	role, _ := reply[0].(string)
	return role, nil
}

// Follow makes r a replica of primary and waits until it is in sync (its
// link up, its first synchronization done), so it holds what primary held
// when it began to follow.
func (r *Redis) Follow(t testing.TB, primary *Redis) {
	t.Helper()
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer client.Close()
	if err := client.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatalf("testserver: %s follows %s: %v", r.Addr, primary.Addr, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := client.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testserver: %s never synced with %s: %v %s", r.Addr, primary.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Node returns the node listening on addr; it fails t when there is none.
func (c *RedisCluster) Node(t testing.TB, addr string) *Redis {
	t.Helper()
	for _, node := range c.nodes {
		if node.Addr == addr {
			return node
		}
	}
	t.Fatalf("testserver: no node of the cluster listens on %s (nodes %v)", addr, c.Addrs)
	return nil
}

// MasterOf returns the node serving key's slot and its replicas, as the
// first node that answers CLUSTER SLOTS sees them.
func (c *RedisCluster) MasterOf(t testing.TB, key string) (master *Redis, replicas []*Redis) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), redisAdminTimeout)
	defer cancel()
	var lastErr error
	for _, node := range c.nodes {
		client := redis.NewClient(&redis.Options{Addr: node.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
		slot, err := client.ClusterKeySlot(ctx, key).Result()
		var slots []redis.ClusterSlot
		if err == nil {
			slots, err = client.ClusterSlots(ctx).Result()
		}
		_ = client.Close()
		if err != nil {
			lastErr = err
			continue
		}
		for _, served := range slots {
			if int64(served.Start) <= slot && slot <= int64(served.End) && len(served.Nodes) > 0 {
				master = c.Node(t, served.Nodes[0].Addr)
				for _, replica := range served.Nodes[1:] {
					replicas = append(replicas, c.Node(t, replica.Addr))
				}
				return master, replicas
			}
		}
		t.Fatalf("testserver: no node serves slot %d of %s:\n%v", slot, key, slots)
	}
	t.Fatalf("testserver: no node of the cluster answers CLUSTER SLOTS: %v", lastErr)
	return nil, nil
}

// WaitForPromotion polls the ROLE of candidates (a failed master's
// replicas) every 5 ms until one of them is a master, and returns it with
// the time it was first seen so: the promotion, within 5 ms. It fails t
// when none is promoted within timeout.
func (c *RedisCluster) WaitForPromotion(t testing.TB, candidates []*Redis, timeout time.Duration) (*Redis, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	clients := make([]*redis.Client, len(candidates))
	for i, candidate := range candidates {
		clients[i] = redis.NewClient(&redis.Options{Addr: candidate.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
		defer clients[i].Close()
	}
	var lastErr error
	for {
		for i, client := range clients {
			reply, err := client.Do(ctx, "ROLE").Slice()
			if err != nil {
				lastErr = err
				continue
			}
			if role, _ := reply[0].(string); role == "master" {
				return candidates[i], time.Now()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testserver: none of %d replicas was promoted within %v (last error %v)", len(candidates), timeout, lastErr)
			return nil, time.Time{}
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitForReplicas waits until every replica's link to its master is up, so
// that it holds the master's data and may be promoted (a replica whose link
// never came up is too stale to stand for election), and then until every
// node's CLUSTER SLOTS names every replica, since a cluster client learns
// the replicas from it. A node leaves a replica out while it has heard (by
// gossip) of no replication offset above 0 from it: a FLUSHALL on each
// master moves the offsets at once, where the master's next PING to its
// replicas would take up to repl-ping-replica-period (10 s).
func (c *RedisCluster) waitForReplicas(timeout time.Duration) error {
	want := len(c.nodes) / (1 + c.config.replicas) * c.config.replicas
	if want == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	clients := make([]*redis.Client, len(c.nodes))
	for i, node := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: node.Addr})
		defer clients[i].Close()
	}
	waitFor := func(what string, done func(client *redis.Client) (bool, error)) error {
		for {
			count := 0
			var lastErr error
			for _, client := range clients {
				ok, err := done(client)
				if err != nil {
					lastErr = err
				}
				if ok {
					count++
				}
			}
			if count == len(clients) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redis cluster: %d of %d nodes %s after %s (last error %v)", count, len(clients), what, timeout, lastErr)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// Each node: a master, or a replica whose link is up.
	err := waitFor("are masters or replicas in sync", func(client *redis.Client) (bool, error) {
		info, err := client.Info(ctx, "replication").Result()
		if err != nil {
			return false, err
		}
		return strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up"), nil
	})
	if err != nil {
		return err
	}
	for _, client := range clients {
		if role, err := client.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
			if err := client.FlushAll(ctx).Err(); err != nil {
				return fmt.Errorf("FLUSHALL on %s: %w", client.Options().Addr, err)
			}
		}
	}
	return waitFor(fmt.Sprintf("name %d replicas in CLUSTER SLOTS", want), func(client *redis.Client) (bool, error) {
		slots, err := client.ClusterSlots(ctx).Result()
		if err != nil {
			return false, err
		}
		named := 0
		for _, served := range slots {
			named += max(len(served.Nodes)-1, 0)
		}
		return named == want, nil
	})
}
