package placement

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// The order path's Redis keys, spread so that no one slot (and so no one
// Cluster master) serves all of it (docs/scaling.md, Admission and the
// Redis masters):
//
//   - each instrument's orders on their own queue, orders.<SYMBOL>
//     (OrderQueues), with what an admission needs in the same script: the
//     dedup windows and the placement's rate-limit bucket, per account and
//     instrument;
//   - the rate-limit buckets of every other request on PermitShards
//     queues, limits.<n>, by a hash of the bucket's name;
//   - the accounts' logs of events on EventShards queues, events.<n>, by a
//     hash of the account (EventLogs);
//   - the event streams' seats on the streams queue (StreamSeatsQueue).

// PermitShards is how many queues hold the rate-limit buckets that no
// admission takes from; PermitsQueuePrefix and a bucket's shard name one.
const (
	PermitShards       = 16
	PermitsQueuePrefix = "limits."
)

// StreamSeatsQueue holds the event streams' seats: a stream takes a seat
// of its key and one of its address in one script, so both caps are on
// one slot.
const StreamSeatsQueue = "streams"

// OrderQueues are the instruments' order queues of one client, made on
// first use with the same options (the dedup retention), and the symbols
// whose queues orders may be on, for look-ups by id.
type OrderQueues struct {
	client  *emq.Client
	prefix  string
	options []emq.QueueOption
	// symbols lists the instruments whose queues an order may be on (the
	// instrument cache's); nil for those used by this process alone.
	symbols func() []string

	mu       sync.Mutex
	queues   map[string]*emq.Queue
	declared map[string]bool
	permits  []*emq.Queue
}

// OrderQueuesOption configures OrderQueues.
type OrderQueuesOption func(*OrderQueues)

// WithQueueOptions makes every instrument's queue with opts
// (emq.WithDedupRetention: DEDUP_RETENTION in the gateway).
func WithQueueOptions(opts ...emq.QueueOption) OrderQueuesOption {
	return func(q *OrderQueues) { q.options = opts }
}

// WithQueuePrefix names the instruments' queues <prefix><SYMBOL>
// (orders.QueuePrefix otherwise): the bench keeps its backlogs apart.
func WithQueuePrefix(prefix string) OrderQueuesOption {
	return func(q *OrderQueues) { q.prefix = prefix }
}

// WithSymbols names the instruments whose queues a look-up by id searches
// (the instrument cache's symbols); without it, those placed on or
// declared by this process.
func WithSymbols(symbols func() []string) OrderQueuesOption {
	return func(q *OrderQueues) { q.symbols = symbols }
}

// NewOrderQueues are client's instrument queues.
func NewOrderQueues(client *emq.Client, opts ...OrderQueuesOption) *OrderQueues {
	q := &OrderQueues{client: client, prefix: orders.QueuePrefix, queues: map[string]*emq.Queue{}, declared: map[string]bool{}}
	for _, opt := range opts {
		opt(q)
	}
	q.permits = make([]*emq.Queue, PermitShards)
	for i := range q.permits {
		q.permits[i] = client.Queue(PermitsQueuePrefix + strconv.Itoa(i))
	}
	return q
}

// Client is the queues' client.
func (q *OrderQueues) Client() *emq.Client { return q.client }

// Prefix is what the queues' names start with, before the symbol.
func (q *OrderQueues) Prefix() string { return q.prefix }

// For is the queue of the symbol's orders.
func (q *OrderQueues) For(symbol string) *emq.Queue {
	q.mu.Lock()
	defer q.mu.Unlock()
	queue := q.queues[symbol]
	if queue == nil {
		queue = q.client.Queue(q.prefix+symbol, q.options...)
		q.queues[symbol] = queue
	}
	return queue
}

// Declare registers the order and instrument command job kinds (and the
// dedup retention, when the queues have one) on the symbols' queues.
func (q *OrderQueues) Declare(ctx context.Context, symbols ...string) error {
	for _, symbol := range symbols {
		if err := q.declare(ctx, symbol); err != nil {
			return err
		}
	}
	return nil
}

func (q *OrderQueues) declare(ctx context.Context, symbol string) error {
	if err := q.For(symbol).Declare(ctx, orders.KindPlace, orders.KindCommand); err != nil {
		return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	q.mu.Lock()
	q.declared[symbol] = true
	q.mu.Unlock()
	return nil
}

// admit admits the job on the symbol's queue, declaring the queue first
// when it does not accept orders yet (an instrument listed after this
// process started, or a Redis that lost its keys).
func (q *OrderQueues) admit(ctx context.Context, symbol string, job emq.Job) (emq.Admission, error) {
	admission, err := q.For(symbol).Admit(ctx, job)
	if !errors.Is(err, emq.ErrKind) {
		return admission, err
	}
	if err := q.declare(ctx, symbol); err != nil {
		return emq.Admission{}, err
	}
	return q.For(symbol).Admit(ctx, job)
}

// Symbols are the instruments whose queues a look-up by id searches.
func (q *OrderQueues) Symbols() []string {
	var symbols []string
	if q.symbols != nil {
		symbols = q.symbols()
	}
	q.mu.Lock()
	for symbol := range q.queues {
		symbols = append(symbols, symbol)
	}
	q.mu.Unlock()
	slices.Sort(symbols)
	return slices.Compact(symbols)
}

// permitsFor is the queue holding the named rate-limit bucket.
func (q *OrderQueues) permitsFor(bucket string) *emq.Queue {
	h := fnv.New32a()
	_, _ = h.Write([]byte(bucket))
	return q.permits[h.Sum32()%uint32(len(q.permits))]
}
