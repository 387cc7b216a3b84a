package chaos

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
)

// admitWaitTimeout is the gateway's ADMIT_WAIT_TIMEOUT: far above what a
// replica in sync takes to acknowledge (milliseconds, even under -race on
// two cores), and short, since while no replica follows every admission
// waits this long for its 503.
const admitWaitTimeout = 250 * time.Millisecond

// failover promotes the replica as an orchestrator would, with the old
// primary left behind for a while:
//
//  1. wait until the replica is in sync (an orchestrator promotes no replica
//     that is still loading a full sync: it holds nothing yet);
//  2. REPLICAOF NO ONE on the replica: it stops following and takes writes;
//  3. for behind, the processes still reach the old primary, which has no
//     replica now: what it admits is answered 503 (not replicated), and is
//     lost with it unless a worker settles it first;
//  4. repoint the proxy to the promoted replica, cutting every connection;
//  5. read the orders the old primary holds and the promoted replica does
//     not: the admissions the failover lost (r.lost);
//  6. REPLICAOF the promoted replica on the old primary: a full sync drops
//     what it alone took in step 3, and the next failover can go back.
//
// It runs on the test goroutine, as every fault on the servers does, so the
// primary and the replica swap without a lock.
func (r *run) failover(behind time.Duration) {
	old, promoted := r.primary, r.replica
	if err := waitInSync(promoted.Addr, 30*time.Second); err != nil {
		r.errorf("failover: %v", err)
		return
	}
	if err := replicaOf(promoted.Addr, ""); err != nil {
		r.errorf("failover: promote %s: %v", promoted.Addr, err)
		return
	}
	r.logf("fault: replica %s promoted; the old primary %s takes writes alone for %s", promoted.Addr, old.Addr, behind.Round(time.Millisecond))
	time.Sleep(behind)
	if err := r.proxy.Repoint(old.Addr, promoted.Addr); err != nil {
		r.errorf("failover: %v", err)
		return
	}
	r.primary, r.replica = promoted, old
	lost, err := lostAdmissions(old.Addr, promoted.Addr, jobRowKeys(r.queues))
	if err != nil {
		r.errorf("failover: %v", err)
	}
	for _, id := range lost {
		r.lost[id] = true
	}
	if err := replicaOf(old.Addr, promoted.Addr); err != nil {
		r.errorf("failover: demote %s: %v", old.Addr, err)
		return
	}
	r.logf("fault: the proxy reaches %s; %s, which alone held %d admissions, follows it", promoted.Addr, old.Addr, len(lost))
}

// jobRowKeys are the hashes where the instruments' queues keep their jobs'
// rows (docs/protocol.md, the queue keyspace): unfinished ones in jobs,
// finished ones in finished, trimmed to the last 10,000, so the orders a
// failover lost, which are the newest, are there.
func jobRowKeys(queues []*emq.Queue) []string {
	var keys []string
	for _, queue := range queues {
		keys = append(keys, emq.JobsKey(queue.Name()), emq.FinishedKey(queue.Name()))
	}
	return keys
}

// lostAdmissions returns the orders the old primary holds and the promoted
// replica does not: what the old primary admitted after the replica stopped
// following, lost when it follows the promoted one. The old primary is read
// once its clients are gone (the repoint cut them): a command it had read
// from them runs before it drops the connection.
func lostAdmissions(old, promoted string, jobRowKeys []string) ([]string, error) {
	oldClient := redis.NewClient(&redis.Options{Addr: old})
	defer oldClient.Close()
	promotedClient := redis.NewClient(&redis.Options{Addr: promoted})
	defer promotedClient.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		info, err := oldClient.Info(ctx, "clients").Result()
		if err != nil {
			return nil, fmt.Errorf("the old primary's clients: %w", err)
		}
		if strings.Contains(info, "connected_clients:1\r\n") { // this one
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	held := func(client *redis.Client) (map[string]bool, error) {
		ids := map[string]bool{}
		for _, key := range jobRowKeys {
			keys, err := client.HKeys(ctx, key).Result()
			if err != nil {
				return nil, fmt.Errorf("HKEYS %s on %s: %w", key, client.Options().Addr, err)
			}
			for _, id := range keys {
				ids[id] = true
			}
		}
		return ids, nil
	}
	onOld, err := held(oldClient)
	if err != nil {
		return nil, err
	}
	onPromoted, err := held(promotedClient)
	if err != nil {
		return nil, err
	}
	var lost []string
	for id := range onOld {
		if !onPromoted[id] {
			lost = append(lost, id)
		}
	}
	return lost, nil
}

// replicaOf makes the server at addr follow primary, or, with primary
// empty, stop following (REPLICAOF NO ONE).
func replicaOf(addr, primary string) error {
	host, port := "NO", "ONE"
	if primary != "" {
		var err error
		if host, port, err = net.SplitHostPort(primary); err != nil {
			return err
		}
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return client.ReplicaOf(ctx, host, port).Err()
}

// waitInSync waits until the replica at addr has its link to the primary up
// and no sync in progress, up to within.
func waitInSync(addr string, within time.Duration) error {
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := client.Info(ctx, "replication").Result()
		cancel()
		if err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not in sync after %s (%v):\n%s", addr, within, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
