package main

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// orderTrack follows one open-loop load's orders from their scheduled send
// to their accounts' event streams. Order i's client order id is prefix-i;
// the senders note when each was scheduled and whether it was accepted,
// the stream readers when its first state event came (order.open,
// .partially_filled, .filled, .canceled or .rejected: the outbox relay
// renders them from the settlement batch that decided the order, so the
// first is its decision reaching the client) and that event's own time
// (its append to the account's log). Every time is the
// machine's wall clock in Unix nanoseconds: the bench, the gateway, Redis
// and PostgreSQL run on one machine, so one clock.
type orderTrack struct {
	prefix    string
	scheduled []int64
	accepted  []bool
	// seen and appended are written by the stream readers, read after.
	seen     []atomic.Int64
	appended []atomic.Int64

	mu sync.Mutex
	// every is every event the streams received while this load was the
	// current one, from its append to the client.
	every  histogram
	events int64
	// filled are the order.filled events of this load's orders.
	filled []filledEvent
}

func newOrderTrack(prefix string, n int) *orderTrack {
	return &orderTrack{prefix: prefix + "-", scheduled: make([]int64, n), accepted: make([]bool, n),
		seen: make([]atomic.Int64, n), appended: make([]atomic.Int64, n)}
}

// clientOrderID is order i's client order id.
func (t *orderTrack) clientOrderID(i int) string { return t.prefix + strconv.Itoa(i) }

// sent notes order i, scheduled at scheduled, and whether the gateway
// accepted it. Each i is sent by one sender.
func (t *orderTrack) sent(i int, scheduled time.Time, accepted bool) {
	t.scheduled[i], t.accepted[i] = scheduled.UnixNano(), accepted
}

// index is the order number of a client order id of this load; false for
// another load's.
func (t *orderTrack) index(clientOrderID string) (int, bool) {
	rest, ok := strings.CutPrefix(clientOrderID, t.prefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || i >= len(t.seen) {
		return 0, false
	}
	return i, true
}

// orderEvent notes an event of order i received at received, appended at
// appended; only the order's first one counts.
func (t *orderTrack) orderEvent(i int, appended, received time.Time) {
	if t.seen[i].CompareAndSwap(0, received.UnixNano()) {
		t.appended[i].Store(appended.UnixNano())
	}
}

// event notes any event received while this load is the current one.
func (t *orderTrack) event(appended, received time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.every.record(received.Sub(appended))
	t.events++
}

// orderFilled notes an order.filled event of one of this load's orders.
func (t *orderTrack) orderFilled(event filledEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.filled = append(t.filled, event)
}

// decided is, over the accepted orders whose first state event came, the time
// from their scheduled send to that event at the client (toClient) and to
// its append to the account's log (toLog), and how many accepted orders
// had no event.
func (t *orderTrack) decided() (toClient, toLog histogram, missing int) {
	for i, scheduled := range t.scheduled {
		if !t.accepted[i] {
			continue
		}
		seen := t.seen[i].Load()
		if seen == 0 {
			missing++
			continue
		}
		toClient.record(time.Duration(seen - scheduled))
		toLog.record(time.Duration(t.appended[i].Load() - scheduled))
	}
	return toClient, toLog, missing
}

// latency is a distribution's summary in milliseconds.
type latency struct {
	Samples int64   `json:"samples"`
	P50Ms   float64 `json:"p50_ms"`
	P90Ms   float64 `json:"p90_ms"`
	P99Ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms"`
}

func summarize(h *histogram) latency {
	return latency{Samples: h.total, P50Ms: ms(h.quantile(0.5)), P90Ms: ms(h.quantile(0.9)),
		P99Ms: ms(h.quantile(0.99)), MaxMs: ms(h.quantile(1))}
}
