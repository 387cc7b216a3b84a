package emq

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The keyspace: every key of queue q starts with keyPrefix(q), whose hash
// tag {q} keeps them in one Redis Cluster slot (docs/protocol.md, the queue
// keyspace). Code outside emq that reads a key directly, as the chaos run
// does on a server it will not connect a queue to, names it by these
// functions, never by spelling it.

// keyPrefix is what every key of the queue starts with: "emq:{<queue>}:".
func keyPrefix(queue string) string { return "emq:{" + queue + "}:" }

// JobsKey is the hash of the queue's unfinished jobs' rows (job id → row).
func JobsKey(queue string) string { return keyPrefix(queue) + "jobs" }

// FinishedKey is the hash of the queue's finished jobs' rows, trimmed to
// the queue's retention.
func FinishedKey(queue string) string { return keyPrefix(queue) + "finished" }

// OwnerKey is the hash of the queue's ownership lease: its holder, the
// token counter, the deadline and since when it is held (ownership.go).
func OwnerKey(queue string) string { return keyPrefix(queue) + "owner" }

// RosterKey is the sorted set of the live workers of a roster (own.go),
// each scored by the end of its membership; rosterHeldKey is the hash of
// the ownerships each says it holds. Both carry the hash tag {emq}: a
// roster spans queues on every slot.
func RosterKey(roster string) string { return "{emq}:roster:" + roster }

func rosterHeldKey(roster string) string { return RosterKey(roster) + ":held" }

// MemoryUsage is what the queue's structures take on the server, in bytes as
// MEMORY USAGE counts them (every nested value sampled).
type MemoryUsage struct {
	// JobRows is the hash of the live jobs' rows, JobRowsEncoding its
	// encoding as OBJECT ENCODING names it.
	JobRows         int64
	JobRowsEncoding string
	// Dedup is the dedup windows.
	Dedup int64
	// LaneLists is the groups' pending lists; LaneIndex the rotation, lane
	// depths, tags and front list kept over them.
	LaneLists int64
	LaneIndex int64
	// Finished is the finished jobs' records, Done their retention index.
	Finished int64
	Done     int64
}

// MemoryUsage measures the queue's structures, for benchmarks: it scans the
// keyspace for the dedup windows and the lanes, so it is no call for a hot
// path.
func (q *Queue) MemoryUsage(ctx context.Context) (MemoryUsage, error) {
	dedup, err := q.scanKeys(ctx, "dedup:*")
	if err != nil {
		return MemoryUsage{}, err
	}
	lanes, err := q.scanKeys(ctx, "lane:*")
	if err != nil {
		return MemoryUsage{}, err
	}
	usage := MemoryUsage{}
	sums := []struct {
		total *int64
		keys  []string
	}{
		{&usage.JobRows, []string{q.jobsKey()}},
		{&usage.Dedup, dedup},
		{&usage.LaneLists, lanes},
		{&usage.LaneIndex, []string{q.rotationKey(), q.lanesKey(), q.tagsKey(), q.frontKey()}},
		{&usage.Finished, []string{q.finishedKey()}},
		{&usage.Done, []string{q.doneKey()}},
	}
	pipe := q.client.rdb.Pipeline()
	type read struct {
		total *int64
		cmd   *redis.IntCmd
	}
	var reads []read
	for _, sum := range sums {
		for _, key := range sum.keys {
			reads = append(reads, read{sum.total, pipe.MemoryUsage(ctx, key, 0)})
		}
	}
	encoding := pipe.ObjectEncoding(ctx, q.jobsKey())
	// Each command's error is read below: a missing key fails only its own.
	_, _ = pipe.Exec(ctx)
	for _, read := range reads {
		// A key that does not exist answers nil: it takes nothing.
		if err := read.cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return MemoryUsage{}, fmt.Errorf("emq: memory usage of %s: %w", q.name, err)
		}
		*read.total += read.cmd.Val()
	}
	if err := encoding.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return MemoryUsage{}, fmt.Errorf("emq: memory usage of %s: %w", q.name, err)
	}
	usage.JobRowsEncoding = encoding.Val()
	return usage, nil
}

// Purge deletes every key of the queue: its jobs in every state, finished
// records, dedup windows, rate-limit buckets, declared kinds and its
// ownership lease, whose token counter starts again from 0. It is for
// benchmarks and tests cleaning up after themselves, not a move: jobs
// admitted or claimed while it runs may survive it in part. The queue stays
// in the registry Client.Queues reads.
func (q *Queue) Purge(ctx context.Context) error {
	keys, err := q.scanKeys(ctx, "*")
	if err != nil {
		return err
	}
	for start := 0; start < len(keys); start += purgeBatch {
		if err := q.client.rdb.Unlink(ctx, keys[start:min(start+purgeBatch, len(keys))]...).Err(); err != nil {
			return fmt.Errorf("emq: purge %s: %w", q.name, err)
		}
	}
	return nil
}

// purgeBatch bounds the keys of one UNLINK.
const purgeBatch = 1000

// scanKeys lists the queue's keys whose suffix matches pattern (a SCAN glob).
// On a cluster it scans the node that serves the queue's hash slot: a SCAN
// sent without a key would go to any node.
func (q *Queue) scanKeys(ctx context.Context, pattern string) ([]string, error) {
	var node redis.Cmdable = q.client.rdb
	if cluster, ok := q.client.rdb.(*redis.ClusterClient); ok {
		master, err := cluster.MasterForKey(ctx, q.jobsKey())
		if err != nil {
			return nil, fmt.Errorf("emq: find the node of %s: %w", q.name, err)
		}
		node = master
	}
	var keys []string
	iter := node.Scan(ctx, 0, globEscaper.Replace(q.key(""))+pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("emq: keys of %s: %w", q.name, err)
	}
	return keys, nil
}

// globEscaper quotes the characters SCAN's MATCH would read as a pattern, so
// a queue named "a*" does not match the keys of queue "ab".
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
