// Package coherence keeps the caches of PostgreSQL's truth coherent. Every
// Redis name it uses starts with "ecc", for EchoStore cache coherence: it
// follows the seeds' EchoStore, one payload(id, version) with two carriers.
//
// It holds what carries "this changed" from where a table's truth is written
// to the caches that copy it, and what keeps those caches from going back in
// time:
//
//   - the addresses of a table: its job queue (Queue), its broadcast channel
//     (Channel) and its cache keys (CacheKey);
//   - the modes a table may declare (Mode, Modes);
//   - the broadcast mode: Client.Broadcast, and Client.Subscribe, which
//     applies what arrives through a bounded ring that refuses and counts
//     when full, never blocking the reader;
//   - the versioned cache fill (Client.FillIfNewer and its batch forms, run
//     by lua.CacheFill) and its reader, Client.ReadCache.
//
// Each table declares its coherence mode: how its changes reach the caches.
// (emq's lanes are its per-group fair lists; nothing here is a lane.) The
// message is the same in both modes; what a table declares is what losing
// one costs:
//
//   - the job mode is an ordinary emq queue, Queue(table): at-least-once and
//     crash-surviving, for data where a stale read costs money. Its consumer
//     must tolerate duplicates and reordering (it acts only on a version
//     newer than the last it applied).
//   - the broadcast mode is one PUBLISH on Channel(table): at most once, for
//     data where a lost message costs one expiry of staleness.
//
// Channel and cache keys of a table share the hash tag {table}, so on a Redis
// Cluster they live in the table's slot. The key, channel and queue names are
// the protocol: processes of one deployment must agree on them.
package coherence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordergate/ordergate/internal/collectors"
	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Queue is the job mode's queue of table: the name of an ordinary emq queue.
func Queue(table string) string { return "ecc.coh." + table }

// Channel is the broadcast mode's channel of table.
func Channel(table string) string { return "ecc:{" + table + "}:coh" }

// CacheKey is the key of one cached item of table, e.g. one account's
// balances.
func CacheKey(table, id string) string { return "ecc:{" + table + "}:" + id }

// Mode is how a table's changes reach its caches.
type Mode string

// The modes a table may declare.
const (
	// ModeNone: no message; caches rely on their expiry alone.
	ModeNone Mode = "none"
	// ModeBroadcast: a PUBLISH, at most once.
	ModeBroadcast Mode = "broadcast"
	// ModeJob: a job on the table's coherence queue, at least once.
	ModeJob Mode = "job"
)

// ParseMode reads a mode's name.
func ParseMode(name string) (Mode, error) {
	switch mode := Mode(name); mode {
	case ModeNone, ModeBroadcast, ModeJob, ModeTracking:
		return mode, nil
	}
	return "", fmt.Errorf("coherence: unknown coherence mode %q: want none, broadcast, job or tracking", name)
}

// Modes declares the mode of each table. A table not declared has mode none:
// forgetting a table must not make up a promise nobody chose.
type Modes map[string]Mode

// Of is the mode of table.
func (m Modes) Of(table string) Mode {
	if mode, ok := m[table]; ok {
		return mode
	}
	return ModeNone
}

// Validate refuses unknown modes and table names that would break the hash
// tag of their keys.
func (m Modes) Validate() error {
	for table, mode := range m {
		if table == "" || strings.ContainsAny(table, "{} ") {
			return fmt.Errorf("coherence: invalid coherence table name %q", table)
		}
		if _, err := ParseMode(string(mode)); err != nil {
			return fmt.Errorf("coherence: table %s: %w", table, err)
		}
	}
	return nil
}

// Broadcast publishes payload on table's broadcast channel. Nobody acknowledges
// it: a subscriber that is disconnected or full never sees it.
func (c *Client) Broadcast(ctx context.Context, table, payload string) error {
	if err := c.rdb.Publish(ctx, Channel(table), payload).Err(); err != nil {
		return fmt.Errorf("coherence: broadcast on %s: %w", table, err)
	}
	return nil
}

// CacheEntry is one field of a versioned cache hash, stored as
// "<version> <value>".
type CacheEntry struct {
	Field   string
	Version int64
	Value   string
}

// CacheFill is the outcome of filling one entry.
type CacheFill struct {
	// Wrote is false when the field held the same or a newer version.
	Wrote bool
	// Held is what the field holds after the fill: the entry itself when it
	// was written, the newer one that stayed otherwise.
	Held CacheEntry
	// Absent is set when a refresh (RefreshHashesIfNewer) left the field
	// holding nothing; Held is then zero.
	Absent bool
}

// ErrCacheValue: a cached value is not "<version> <value>".
var ErrCacheValue = errors.New("coherence: malformed cache value")

// ParseCacheValue splits a stored "<version> <value>" of field.
func ParseCacheValue(field, stored string) (CacheEntry, error) {
	version, value, found := strings.Cut(stored, " ")
	if !found {
		return CacheEntry{}, fmt.Errorf("%w: field %q holds %q", ErrCacheValue, field, stored)
	}
	n, err := strconv.ParseInt(version, 10, 64)
	if err != nil || n < 0 {
		return CacheEntry{}, fmt.Errorf("%w: field %q holds version %q", ErrCacheValue, field, version)
	}
	return CacheEntry{Field: field, Version: n, Value: value}, nil
}

// FillIfNewer writes value at version into field of the cache hash key only
// if the field holds no version or an older one, and reports whether it
// wrote. Fillers that read the truth at different moments may finish in any
// order; this is what keeps the cache from going back in time.
func (c *Client) FillIfNewer(ctx context.Context, key, field string, version int64, value string) (bool, error) {
	fills, err := c.FillManyIfNewer(ctx, key, []CacheEntry{{Field: field, Version: version, Value: value}})
	if err != nil {
		return false, err
	}
	return fills[0].Wrote, nil
}

// FillManyIfNewer fills several fields of one cache hash in one atomic step,
// each as by FillIfNewer, and returns per entry what its field holds
// afterwards. Readers never see the hash half filled.
func (c *Client) FillManyIfNewer(ctx context.Context, key string, entries []CacheEntry) ([]CacheFill, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	args, err := fillArgs(key, entries)
	if err != nil {
		return nil, err
	}
	reply, err := cacheFillScript.Run(ctx, c.rdb, []string{key}, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("coherence: fill %s: %w", key, err)
	}
	return parseFills(key, entries, reply)
}

// parseFills reads the cache fill script's reply for entries of the hash key.
func parseFills(key string, entries []CacheEntry, reply []any) ([]CacheFill, error) {
	if len(reply) != 2*len(entries) {
		return nil, fmt.Errorf("coherence: fill %s: unexpected reply of %d values for %d entries", key, len(reply), len(entries))
	}
	fills := make([]CacheFill, len(entries))
	for i, entry := range entries {
		wrote, _ := reply[2*i].(int64)
		if reply[2*i+1] == nil {
			fills[i] = CacheFill{Absent: true}
			continue
		}
		stored, ok := reply[2*i+1].(string)
		if !ok {
			return nil, fmt.Errorf("coherence: fill %s: unexpected reply %T for field %q", key, reply[2*i+1], entry.Field)
		}
		held, err := ParseCacheValue(entry.Field, stored)
		if err != nil {
			return nil, fmt.Errorf("coherence: fill %s: %w", key, err)
		}
		fills[i] = CacheFill{Wrote: wrote == 1, Held: held}
	}
	return fills, nil
}

// fillArgs is the cache fill script's ARGV for entries of the hash key:
// field, version, value per entry.
func fillArgs(key string, entries []CacheEntry) ([]any, error) {
	args := make([]any, 0, 3*len(entries))
	for _, entry := range entries {
		if entry.Version < 0 {
			return nil, fmt.Errorf("coherence: fill %s: field %q: negative version %d", key, entry.Field, entry.Version)
		}
		args = append(args, entry.Field, strconv.FormatInt(entry.Version, 10), entry.Value)
	}
	return args, nil
}

// FillHashesIfNewer fills several cache hashes in one round trip: each hash
// as by FillManyIfNewer, in its own atomic step, and returns by key what each
// entry's field holds afterwards. A fill that finds a newer version keeps it:
// that is the fill working, not failing. The error names every hash whose
// fill failed; the others are filled and answered.
//
// The hashes of one hash tag (one slot: a table's, CacheKey) go in one
// script call, up to fillHashesPerCall of them, where a call per hash made
// the coherence consumer's batch a call per account it touched.
func (c *Client) FillHashesIfNewer(ctx context.Context, fills map[string][]CacheEntry) (map[string][]CacheFill, error) {
	return c.fillHashes(ctx, "fill", fills)
}

// RefreshHashesIfNewer is FillHashesIfNewer for a filler whose entries may
// be older than what the cache lost: it writes only fields that hold an
// older version, and answers a field holding nothing as Absent, left so,
// for the caller to fill from the truth. An entry carried by a job that
// comes late, after Redis lost the field, would otherwise cache a balance
// behind PostgreSQL until its next change.
func (c *Client) RefreshHashesIfNewer(ctx context.Context, fills map[string][]CacheEntry) (map[string][]CacheFill, error) {
	return c.fillHashes(ctx, "refresh", fills)
}

// fillHashes is FillHashesIfNewer and RefreshHashesIfNewer, by the script's
// mode.
func (c *Client) fillHashes(ctx context.Context, mode string, fills map[string][]CacheEntry) (map[string][]CacheFill, error) {
	byTag := map[string][]string{}
	var tags []string
	for key, entries := range fills {
		if len(entries) == 0 {
			continue
		}
		tag := hashTag(key)
		if _, seen := byTag[tag]; !seen {
			tags = append(tags, tag)
		}
		byTag[tag] = append(byTag[tag], key)
	}
	// What each call fills: the keys of one tag, fillHashesPerCall at most.
	var batches [][]string
	for _, tag := range tags {
		for keys := range slices.Chunk(byTag[tag], fillHashesPerCall) {
			batches = append(batches, keys)
		}
	}
	if len(batches) == 0 {
		return nil, nil
	}
	calls := make([]scriptpipe.Call, len(batches))
	for i, keys := range batches {
		args := []any{mode}
		for _, key := range keys {
			entryArgs, err := fillArgs(key, fills[key])
			if err != nil {
				return nil, err
			}
			args = append(append(args, len(fills[key])), entryArgs...)
		}
		calls[i] = scriptpipe.Call{Keys: keys, Args: args}
	}
	cmds, err := scriptpipe.Run(ctx, c.rdb, cacheFillHashesScript, calls)
	if err != nil {
		return nil, fmt.Errorf("coherence: fill %d cache hashes: %w", len(fills), err)
	}
	filled := make(map[string][]CacheFill, len(fills))
	var errs []error
	for i, cmd := range cmds {
		keys := batches[i]
		replies, err := cmd.Slice()
		if err == nil && len(replies) != len(keys) {
			err = fmt.Errorf("unexpected reply of %d values for %d hashes", len(replies), len(keys))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("coherence: fill %s: %w", strings.Join(keys, ", "), err))
			continue
		}
		for k, key := range keys {
			switch reply := replies[k].(type) {
			case []any:
				if filled[key], err = parseFills(key, fills[key], reply); err != nil {
					errs = append(errs, err)
				}
			case error:
				errs = append(errs, fmt.Errorf("coherence: fill %s: %w", key, reply))
			default:
				errs = append(errs, fmt.Errorf("coherence: fill %s: unexpected reply %T", key, reply))
			}
		}
	}
	return filled, errors.Join(errs...)
}

// fillHashesPerCall bounds the hashes one cache fill call takes, so a heal's
// page of hundreds does not hold Redis in one script for long.
const fillHashesPerCall = 64

// hashTag is the part of key Redis Cluster hashes to its slot: the first
// "{...}" with something inside, or the whole key. Keys of one tag are in
// one slot, so one script may touch them all.
func hashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// ReadCache returns every field of the cache hash key by field name; an
// empty map when there is no such hash. A malformed value is an error
// wrapping ErrCacheValue, so the caller can treat the hash as a miss.
func (c *Client) ReadCache(ctx context.Context, key string) (map[string]CacheEntry, error) {
	fields, err := c.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("coherence: read cache %s: %w", key, err)
	}
	return parseCacheHash(key, fields)
}

// parseCacheHash parses the fields of the cache hash key.
func parseCacheHash(key string, fields map[string]string) (map[string]CacheEntry, error) {
	entries := make(map[string]CacheEntry, len(fields))
	for field, stored := range fields {
		entry, err := ParseCacheValue(field, stored)
		if err != nil {
			return nil, fmt.Errorf("coherence: read cache %s: %w", key, err)
		}
		entries[field] = entry
	}
	return entries, nil
}

// BroadcastStats counts what one subscription did.
type BroadcastStats struct {
	// Received is every message read off the channel.
	Received uint64
	// Dropped is the messages the ring refused because it was full.
	Dropped uint64
	// Applied is the messages handed to apply (and returned from it).
	Applied uint64
	// Held is how many messages the ring holds now, the one apply is
	// working on included: the backpressure gauge.
	Held int
}

// broadcastMetrics are the series every subscription of a process shares;
// each carries the table as label "table".
type broadcastMetrics struct {
	received *prometheus.CounterVec
	dropped  *prometheus.CounterVec
}

func newBroadcastMetrics(registerer prometheus.Registerer) broadcastMetrics {
	table := []string{"table"}
	return broadcastMetrics{
		received: collectors.Register(registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emq_coherence_broadcast_received_total",
			Help: "Broadcast coherence messages read off the channel, whether kept or dropped.",
		}, table)),
		dropped: collectors.Register(registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "emq_coherence_broadcast_dropped_total",
			Help: "Broadcast coherence messages refused because the subscriber's ring was full.",
		}, table)),
	}
}

// SubscribeOption configures Subscribe.
type SubscribeOption func(*subscribeConfig)

type subscribeConfig struct {
	registerer    prometheus.Registerer
	healthTimeout time.Duration
}

// WithBroadcastMetrics registers the subscription's counters with registerer;
// several subscriptions may share one registry.
func WithBroadcastMetrics(registerer prometheus.Registerer) SubscribeOption {
	return func(c *subscribeConfig) { c.registerer = registerer }
}

// WithHealthCheck sets how long the subscription may hear nothing before it
// pings the server to find out whether the connection still stands (default
// 30s). A connection that died without a word would otherwise wait forever.
func WithHealthCheck(idle time.Duration) SubscribeOption {
	return func(c *subscribeConfig) {
		if idle > 0 {
			c.healthTimeout = idle
		}
	}
}

const defaultHealthTimeout = 30 * time.Second

// Subscription is a running subscription to one table's broadcast channel.
type Subscription struct {
	table  string
	logger *slog.Logger
	pubsub *redis.PubSub
	ring   *ring
	apply  func(payload string)

	receivedMetric, droppedMetric prometheus.Counter
	received, dropped, applied    atomic.Uint64

	done chan struct{}
}

// Subscribe listens on table's broadcast channel and hands each message to
// apply, one at a time, on a goroutine of its own, until ctx is cancelled.
//
// Between the two sits a ring of capacity slots: the reader only ever offers
// a message to it, and a full ring refuses the message and counts the drop.
// The reader therefore never waits for apply, so the server's output buffer
// for this connection never backs up (Redis would disconnect a subscriber
// that falls too far behind), and a slow apply costs messages, counted, not
// memory. The message apply is working on keeps its slot until apply
// returns, so at most capacity messages are held, that one included.
//
// Subscribe returns once the server confirmed the subscription: a message
// published after that reaches apply unless it is dropped. A lost connection
// is re-established on its own; what was published meanwhile is lost, as the
// broadcast mode promises. Done is closed when both goroutines have ended.
func (c *Client) Subscribe(ctx context.Context, table string, capacity int, apply func(payload string), opts ...SubscribeOption) (*Subscription, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("coherence: subscribe to %s: capacity %d, want at least 1", table, capacity)
	}
	if apply == nil {
		return nil, fmt.Errorf("coherence: subscribe to %s: no apply function", table)
	}
	config := subscribeConfig{healthTimeout: defaultHealthTimeout}
	for _, opt := range opts {
		opt(&config)
	}
	pubsub := c.rdb.Subscribe(ctx, Channel(table))
	if _, err := pubsub.Receive(ctx); err != nil {
		_ = pubsub.Close()
		return nil, fmt.Errorf("coherence: subscribe to %s: %w", Channel(table), err)
	}
	metrics := newBroadcastMetrics(config.registerer)
	s := &Subscription{
		table:          table,
		logger:         c.logger.With("coherence_table", table),
		pubsub:         pubsub,
		ring:           newRing(capacity),
		apply:          apply,
		receivedMetric: metrics.received.WithLabelValues(table),
		droppedMetric:  metrics.dropped.WithLabelValues(table),
		done:           make(chan struct{}),
	}
	var loops sync.WaitGroup
	loops.Go(func() { s.read(ctx, config.healthTimeout) })
	loops.Go(func() { s.applyLoop(ctx) })
	go func() {
		// A blocking read does not watch the context; closing the
		// subscription is what ends it.
		<-ctx.Done()
		_ = pubsub.Close()
	}()
	go func() {
		loops.Wait()
		close(s.done)
	}()
	return s, nil
}

// Stats reports the subscription's counts so far.
func (s *Subscription) Stats() BroadcastStats {
	return BroadcastStats{
		Received: s.received.Load(), Dropped: s.dropped.Load(), Applied: s.applied.Load(),
		Held: s.ring.occupancy(),
	}
}

// Done is closed when the subscription has stopped.
func (s *Subscription) Done() <-chan struct{} { return s.done }

func (s *Subscription) read(ctx context.Context, healthTimeout time.Duration) {
	trouble := outage.Tracker{Loop: "broadcast subscription"}
	for ctx.Err() == nil {
		message, err := s.pubsub.ReceiveTimeout(ctx, healthTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				// Quiet for a while: a ping either comes back as a pong or
				// fails, and a failure makes the next receive reconnect.
				pingCtx, cancel := context.WithTimeout(ctx, healthTimeout)
				err = s.pubsub.Ping(pingCtx)
				cancel()
				if err == nil {
					continue
				}
			}
			trouble.Fail(s.logger, err)
			outage.Sleep(ctx, trouble.Backoff(0))
			continue
		}
		trouble.Recover(s.logger)
		if m, ok := message.(*redis.Message); ok {
			s.offer(m.Payload)
		}
	}
}

func (s *Subscription) offer(payload string) {
	s.received.Add(1)
	s.receivedMetric.Inc()
	if !s.ring.offer(payload) {
		s.dropped.Add(1)
		s.droppedMetric.Inc()
	}
}

func (s *Subscription) applyLoop(ctx context.Context) {
	for {
		payload, ok := s.ring.next(ctx)
		if !ok {
			return
		}
		s.applyOne(payload)
		s.ring.release()
		s.applied.Add(1)
	}
}

// applyOne keeps one bad message from ending the applier.
func (s *Subscription) applyOne(payload string) {
	defer func() {
		if recovered := recover(); recovered != nil {
			s.logger.Error("coherence apply panicked; the message is skipped", "panic", fmt.Sprint(recovered))
		}
	}()
	s.apply(payload)
}

// ring is a bounded single-producer single-consumer queue. A full ring
// refuses instead of waiting or overwriting: the producer (the subscription
// reader) must never block, and an overwritten slot would lose a message
// without counting it. The consumer frees a slot only after it is done with
// the message in it, so occupancy (tail - head) counts the message in hand.
type ring struct {
	slots []string
	// head is the next slot to consume, tail the next to fill; both only grow.
	head, tail atomic.Uint64
	// wake has room for one signal: the producer never waits on it, and one
	// pending signal is enough to make the consumer look again.
	wake chan struct{}
}

func newRing(capacity int) *ring {
	return &ring{slots: make([]string, capacity), wake: make(chan struct{}, 1)}
}

// offer is called by the producer only.
func (r *ring) offer(item string) bool {
	tail := r.tail.Load()
	if tail-r.head.Load() >= uint64(len(r.slots)) {
		return false
	}
	r.slots[tail%uint64(len(r.slots))] = item
	r.tail.Store(tail + 1)
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return true
}

// next waits for the oldest item, which keeps its slot until release; false
// once ctx is cancelled. Called by the consumer only.
func (r *ring) next(ctx context.Context) (string, bool) {
	for {
		if ctx.Err() != nil {
			return "", false
		}
		head := r.head.Load()
		if head != r.tail.Load() {
			return r.slots[head%uint64(len(r.slots))], true
		}
		select {
		case <-r.wake:
		case <-ctx.Done():
			return "", false
		}
	}
}

// release frees the slot of the item next returned. Called by the consumer only.
func (r *ring) release() {
	head := r.head.Load()
	r.slots[head%uint64(len(r.slots))] = "" // let the payload be collected
	r.head.Store(head + 1)
}

// occupancy is how many items the ring holds, the one in hand included.
func (r *ring) occupancy() int { return int(r.tail.Load() - r.head.Load()) }
