package placement

import (
	"context"
	"hash/fnv"
	"strconv"

	"github.com/ordergate/ordergate/emq"
)

// EventShards is how many queues the accounts' logs are spread over, each
// on a Redis Cluster slot of its own (its queue's hash tag): an account's
// log, its sequence and the change stream the tail loops wait on are on
// its shard's queue, so no one slot serves every account's events.
const EventShards = 16

// EventsQueuePrefix and an account's shard name the queue of its log:
// "events.<n>", n from 0 to EventShards-1.
const EventsQueuePrefix = "events."

// EventsQueue is the name of the queue holding the account's log.
func EventsQueue(account string) string {
	return EventsQueuePrefix + strconv.Itoa(shardOf(account, EventShards))
}

// shardOf is the shard of an account among n: FNV-1a of its id, which
// every process computes alike.
func shardOf(account string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(account))
	return int(h.Sum32() % uint32(n))
}

// EventLogs are the queues holding the accounts' logs of events, one per
// shard; an account's log is on the queue of its shard (EventsQueue).
type EventLogs struct {
	queues []*emq.Queue
}

// NewEventLogs is the accounts' logs on client's EventShards queues.
func NewEventLogs(client *emq.Client, opts ...emq.QueueOption) *EventLogs {
	queues := make([]*emq.Queue, EventShards)
	for i := range queues {
		queues[i] = client.Queue(EventsQueuePrefix+strconv.Itoa(i), opts...)
	}
	return &EventLogs{queues: queues}
}

// SingleEventLog keeps every account's log on queue: for tests and
// benchmarks that watch one queue.
func SingleEventLog(queue *emq.Queue) *EventLogs { return &EventLogs{queues: []*emq.Queue{queue}} }

// Queues are the shards' queues, in shard order.
func (l *EventLogs) Queues() []*emq.Queue { return l.queues }

// For is the queue holding the account's log.
func (l *EventLogs) For(account string) *emq.Queue { return l.queues[l.shard(account)] }

func (l *EventLogs) shard(account string) int { return shardOf(account, len(l.queues)) }

// AppendLogs appends to the accounts' logs, every shard's appends in one
// round trip (emq.AppendLogsAcross: a round trip a shard cost each relay
// and balance announce two or three at a rate's common batches), and
// answers each append's outcome in the order given. A failed round trip
// is each append's Err, and the error.
func (l *EventLogs) AppendLogs(ctx context.Context, appends []emq.LogAppend) ([]emq.LogAppended, error) {
	if len(l.queues) == 1 {
		return l.queues[0].AppendLogs(ctx, appends)
	}
	slot := make(map[int]int) // shard -> its place in queues
	var (
		queues  []*emq.Queue
		parts   [][]emq.LogAppend
		indexes [][]int
	)
	for i, a := range appends {
		shard := l.shard(a.Group)
		at, ok := slot[shard]
		if !ok {
			at = len(queues)
			slot[shard] = at
			queues, parts, indexes = append(queues, l.queues[shard]), append(parts, nil), append(indexes, nil)
		}
		parts[at] = append(parts[at], a)
		indexes[at] = append(indexes[at], i)
	}
	out := make([]emq.LogAppended, len(appends))
	appended, err := emq.AppendLogsAcross(ctx, queues, parts)
	for at, part := range indexes {
		for j, i := range part {
			if appended != nil && j < len(appended[at]) {
				out[i] = appended[at][j]
			} else if err != nil {
				out[i] = emq.LogAppended{Err: err}
			}
		}
	}
	return out, err
}
