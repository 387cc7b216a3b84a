package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// An account's events are the orders queue's log of the account's group
// (emq/log.go), appended by the writers in account_events_append.go.
// EventStreams serves them to the account's subscribers:
// each subscription first reads what it missed page by page on its own,
// then joins one tail loop per process, which waits on the queue's one
// change stream (WaitLogChanges) and reads the logs of the accounts with a
// subscriber that changed, handing each new event to every subscription of
// its account. The handoff between the two
// and the rest are in docs/api.md (The event stream).

// The defaults of EventStreams.
const (
	// DefaultEventTailBlock is how long the tail loop waits on the change
	// stream at once before it looks again.
	DefaultEventTailBlock = 500 * time.Millisecond
	// DefaultEventBuffer is how many events a subscription holds for its
	// reader; past that it is ended (ErrSlowSubscriber).
	DefaultEventBuffer = 1024
	// eventPage is how many events a subscription reads from its log at
	// once while it catches up, and the tail loop from each log.
	eventPage = 256
	// changePage is how many announcements of appends the tail loop takes
	// from the change stream at once.
	changePage = 4096
	// lossCheckInterval is how often the tail loop compares its positions
	// with the logs' ends (reconcile).
	lossCheckInterval = time.Second
)

// ErrSlowSubscriber ends a subscription whose reader fell a whole buffer
// behind the account's events: holding more for it would cost memory
// without bound, and waiting for it would delay everyone else.
var ErrSlowSubscriber = errors.New("placement: subscriber too slow, its events buffer is full")

// ErrEventStreamsClosed ends the subscriptions of a process that stops,
// and refuses new ones.
var ErrEventStreamsClosed = errors.New("placement: event streams closed")

// EventsExpiredError refuses a position in an account's stream the log
// cannot resume from: events after it were dropped by the log's retention,
// or it is past the last event ever given (Redis lost its newest writes).
type EventsExpiredError struct {
	// After is the position asked for, the last sequence the client had.
	After int64
	// First is the first sequence the log still holds; Last the last it gave.
	First, Last int64
}

func (e *EventsExpiredError) Error() string {
	if e.After > e.Last {
		return fmt.Sprintf("placement: events after %d: the stream's last event is %d", e.After, e.Last)
	}
	return fmt.Sprintf("placement: events after %d: the stream holds %d to %d only", e.After, e.First, e.Last)
}

// Ahead reports whether the position is past the stream's last event.
func (e *EventsExpiredError) Ahead() bool { return e.After > e.Last }

// EventStreams hands out subscriptions to accounts' event streams; one per
// process, whose tail loop serves all of them.
type EventStreams struct {
	queue  *emq.Queue
	log    *slog.Logger
	block  time.Duration
	buffer int
	// stop ends the tail loop's reads; loops counts the loops running.
	stop  context.Context
	cease context.CancelFunc
	loops sync.WaitGroup

	mu sync.Mutex
	// followed holds the accounts with subscribers, each with the tail
	// loop's position in its log.
	followed map[string]*followedAccount
	// tailing is true while a tail loop runs; it stops when no account is
	// followed, and the next subscriber starts another.
	tailing bool
	closed  bool
}

// followedAccount is one account's log as the tail loop follows it.
type followedAccount struct {
	// last is the sequence of the last event the tail loop handed out.
	last          int64
	subscriptions map[*Subscription]struct{}
}

// EventStreamsOption configures EventStreams.
type EventStreamsOption func(*EventStreams)

// WithEventTailBlock sets how long one read of the tail loop waits
// (DefaultEventTailBlock otherwise).
func WithEventTailBlock(block time.Duration) EventStreamsOption {
	return func(e *EventStreams) {
		if block > 0 {
			e.block = block
		}
	}
}

// WithEventBuffer sets how many events a subscription holds for its reader
// (DefaultEventBuffer otherwise).
func WithEventBuffer(events int) EventStreamsOption {
	return func(e *EventStreams) {
		if events > 0 {
			e.buffer = events
		}
	}
}

// WithEventLogger sets where the tail loop reports failed reads;
// slog.Default otherwise.
func WithEventLogger(log *slog.Logger) EventStreamsOption {
	return func(e *EventStreams) { e.log = log }
}

// NewEventStreams serves the account logs of the orders queue.
func NewEventStreams(queue *emq.Queue, opts ...EventStreamsOption) *EventStreams {
	e := &EventStreams{queue: queue, log: slog.Default(), block: DefaultEventTailBlock, buffer: DefaultEventBuffer,
		followed: map[string]*followedAccount{}}
	for _, opt := range opts {
		opt(e)
	}
	e.stop, e.cease = context.WithCancel(context.Background())
	return e
}

// Subscribe opens the account's stream after the event with sequence
// after (0: from the first event the log holds); an *EventsExpiredError
// when the log cannot resume there.
func (e *EventStreams) Subscribe(ctx context.Context, account string, after int64) (*Subscription, error) {
	first, last, err := e.bounds(ctx, account)
	if err != nil {
		return nil, err
	}
	if after > last || first > after+1 {
		return nil, &EventsExpiredError{After: after, First: first, Last: last}
	}
	return e.subscription(account, after), nil
}

// SubscribeNew opens the account's stream after its last event: the
// subscription gets the events that come from now on.
func (e *EventStreams) SubscribeNew(ctx context.Context, account string) (*Subscription, error) {
	_, last, err := e.bounds(ctx, account)
	if err != nil {
		return nil, err
	}
	return e.subscription(account, last), nil
}

func (e *EventStreams) bounds(ctx context.Context, account string) (first, last int64, err error) {
	if e.isClosed() {
		return 0, 0, ErrEventStreamsClosed
	}
	first, last, err = e.queue.LogBounds(ctx, account)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	return first, last, nil
}

func (e *EventStreams) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *EventStreams) subscription(account string, after int64) *Subscription {
	return &Subscription{streams: e, account: account, last: after, events: make(chan *orders.Event, e.buffer), ended: make(chan struct{})}
}

// Close ends every subscription with ErrEventStreamsClosed, refuses new
// ones, and returns once the tail loop has stopped.
func (e *EventStreams) Close() {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		for _, account := range e.followed {
			for subscription := range account.subscriptions {
				subscription.end(ErrEventStreamsClosed)
			}
		}
		clear(e.followed)
		e.cease()
	}
	e.mu.Unlock()
	e.loops.Wait()
}

// join makes the tail loop hand the account's new events to s: those
// after the loop's position in the account's log.
func (e *EventStreams) join(s *Subscription) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrEventStreamsClosed
	}
	account := e.followed[s.account]
	if account == nil {
		// A log no one follows is followed from where s is.
		account = &followedAccount{last: s.last, subscriptions: map[*Subscription]struct{}{}}
		e.followed[s.account] = account
	}
	account.subscriptions[s] = struct{}{}
	if !e.tailing {
		e.tailing = true
		e.loops.Add(1)
		go e.tail()
	}
	return nil
}

// leave stops handing events to s.
func (e *EventStreams) leave(s *Subscription) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.remove(s)
}

// remove takes s out of its account's subscribers, and the account out of
// the followed when it was the last; e.mu is held.
func (e *EventStreams) remove(s *Subscription) {
	account := e.followed[s.account]
	if account == nil {
		return
	}
	delete(account.subscriptions, s)
	if len(account.subscriptions) == 0 {
		delete(e.followed, s.account)
	}
}

// tail is the tail loop: it waits on the queue's change stream, which
// announces every append to any account's log, and reads the logs of the
// followed accounts that changed after the loop's position in them, whose
// events go to the account's subscriptions. Once a second, and after a
// failed wait, it compares its positions with the logs' ends, for changes
// it missed (the stream keeps the newest announcements only). It returns
// when no account is followed.
func (e *EventStreams) tail() {
	defer e.loops.Done()
	retry, checked := time.Duration(0), time.Now()
	position, missed := "", false
	// announced counts the changes the waits gave since the last reconcile.
	announced := 0
	for {
		e.mu.Lock()
		if e.closed || len(e.followed) == 0 {
			e.tailing = false
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()

		var changes []emq.LogChange
		var err error
		if position == "" {
			// Whatever was appended before the position is read from the
			// logs themselves, below.
			position, err = e.queue.LogChangesPosition(e.stop)
			missed = true
		} else {
			changes, position, err = e.queue.WaitLogChanges(e.stop, position, e.block, changePage)
		}
		if err != nil {
			if e.stop.Err() != nil {
				continue
			}
			missed = true
			retry = min(max(2*retry, 50*time.Millisecond), 2*time.Second)
			e.log.Warn("event streams: waiting for the account logs' changes failed; retrying", "retry_in", retry.String(), "err", err)
			select {
			case <-time.After(retry):
			case <-e.stop.Done():
			}
			continue
		}
		retry = 0
		announced += len(changes)
		changed := e.changed(changes)
		if missed || time.Since(checked) >= lossCheckInterval {
			waited := !missed
			behind := e.reconcile()
			for name, position := range behind {
				changed[name] = position
			}
			if waited && len(behind) > 0 && announced == 0 {
				// Logs grew while the loop waited a whole interval and the
				// stream announced none of it: its IDs may have gone back
				// below the position (a new primary whose clock is behind
				// the old one's). Start again from its end; a false alarm
				// costs one read of the end and a reconcile.
				position = ""
			}
			checked, missed, announced = time.Now(), false, 0
		}
		e.readChanged(changed)
	}
}

// changed returns the loop's position in the log of each followed account
// the changes announce events after it for.
func (e *EventStreams) changed(changes []emq.LogChange) map[string]int64 {
	changed := map[string]int64{}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, change := range changes {
		if account := e.followed[change.Group]; account != nil && change.Sequence > account.last {
			changed[change.Group] = account.last
		}
	}
	return changed
}

// readChanged reads the logs of the accounts changed names, after the
// position given for each, page by page, and hands out their events.
func (e *EventStreams) readChanged(changed map[string]int64) {
	for len(changed) > 0 {
		read, err := e.queue.ReadLogs(e.stop, changed, eventPage)
		if err != nil {
			// The next reconcile finds them behind again.
			if e.stop.Err() == nil {
				e.log.Warn("event streams: reading the account logs failed", "accounts", len(changed), "err", err)
			}
			return
		}
		again := e.hand(read, changed)
		next := map[string]int64{}
		for name, entries := range read {
			if len(entries) == eventPage {
				next[name] = entries[len(entries)-1].Sequence
			}
		}
		maps.Copy(next, again)
		changed = next
	}
}

// reconcile returns the loop's position in the log of each followed
// account whose log holds events after it, and ends the subscriptions of
// the accounts whose log went back below it. Redis that lost its newest
// writes (a failover to a replica that lagged) gives the next events the
// sequences of events already handed out, which the loop, reading after
// its position, would never hand out: their clients' resume is answered
// 410 instead. The loop looks once a second, so a log that grows past its
// old end within that is not caught (docs/api.md).
func (e *EventStreams) reconcile() map[string]int64 {
	e.mu.Lock()
	positions := make(map[string]int64, len(e.followed))
	for name, account := range e.followed {
		positions[name] = account.last
	}
	e.mu.Unlock()
	accounts := make([]string, 0, len(positions))
	for account := range positions {
		accounts = append(accounts, account)
	}
	behind := map[string]int64{}
	lasts, err := e.queue.LastLogSequences(e.stop, accounts)
	if err != nil {
		return behind
	}
	firsts := map[string]int64{}
	for name, last := range lasts {
		switch {
		case last > positions[name]:
			behind[name] = positions[name]
		case last < positions[name]:
			if firsts[name], _, err = e.queue.LogBounds(e.stop, name); err != nil {
				return behind
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, first := range firsts {
		account := e.followed[name]
		if account == nil || account.last <= lasts[name] {
			continue
		}
		err := &EventsExpiredError{After: account.last, First: first, Last: lasts[name]}
		e.log.Error("event streams: an account's log went back; its streams end", "account", name, "err", err)
		for subscription := range account.subscriptions {
			subscription.end(err)
		}
		delete(e.followed, name)
	}
	return behind
}

// hand gives the events read, each log's after the position from gives
// it, to the subscriptions of their accounts. An account whose position
// moved since the read began (all its subscribers left and a new one came)
// takes only the events that follow its position, and none when that is
// behind the read's: it is returned, with its position, to be read again
// from there (the changes that announced those events are spent). A
// subscription that has no room left is ended, so no reader waits for
// another.
func (e *EventStreams) hand(read map[string][]emq.LogEvent, from map[string]int64) (again map[string]int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	again = map[string]int64{}
	for name, entries := range read {
		account := e.followed[name]
		if account != nil && account.last < from[name] {
			again[name] = account.last
			continue
		}
		for _, entry := range entries {
			if account == nil {
				break
			}
			if entry.Sequence > account.last+1 {
				// The log no longer holds the events in between (the
				// retention dropped them while the loop lagged, or Redis lost
				// them): reading on would find the same gap at every turn.
				err := &EventsExpiredError{After: account.last, First: entry.Sequence, Last: entries[len(entries)-1].Sequence}
				e.log.Error("event streams: an account's log lacks events after the loop's position; its streams end", "account", name, "err", err)
				for subscription := range account.subscriptions {
					subscription.end(err)
				}
				delete(e.followed, name)
				break
			}
			if entry.Sequence <= account.last {
				continue
			}
			account.last = entry.Sequence
			event := eventOf(entry)
			shared := &event
			for subscription := range account.subscriptions {
				select {
				case subscription.events <- shared:
				default:
					subscription.end(ErrSlowSubscriber)
					e.remove(subscription)
				}
			}
		}
	}
	return again
}

func eventOf(entry emq.LogEvent) orders.Event {
	return orders.Event{Sequence: entry.Sequence, ID: entry.ID, Type: orders.EventType(entry.Type), Time: entry.At, Data: entry.Data}
}

// Subscription is one reader's stream of an account's events. Its methods
// are for one goroutine at a time.
type Subscription struct {
	streams *EventStreams
	account string
	// last is the sequence of the last event Next returned (or the
	// position the subscription started after).
	last int64
	// read holds events read from the log that Next has not returned yet.
	read []orders.Event
	// stage is where the subscription is: catching up alone, reading the
	// log to its end once more after joining the tail loop, or following.
	stage subscriptionStage
	// events are what the tail loop hands over, shared by the account's
	// subscriptions; ended is closed, with err set, when the subscription
	// is ended for the reader.
	events chan *orders.Event
	ended  chan struct{}
	err    error
}

type subscriptionStage int

const (
	catchingUp subscriptionStage = iota
	joining
	filling
	following
)

// Position is the sequence of the last event Next returned, or, before
// the first, the one the subscription started after.
func (s *Subscription) Position() int64 { return s.last }

// Next returns the account's next event. It returns false, and no error,
// when none came within wait while the subscription follows the tail. An
// error ends the subscription: ErrSlowSubscriber, ErrEventStreamsClosed,
// the context's, an *EventsExpiredError when the log dropped events before
// they were read, or orders.ErrUnavailable.
func (s *Subscription) Next(ctx context.Context, wait time.Duration) (orders.Event, bool, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if len(s.read) > 0 {
			event := s.read[0]
			s.read = s.read[1:]
			return s.deliver(ctx, event)
		}
		switch s.stage {
		case catchingUp:
			if s.streams.stop.Err() != nil {
				return orders.Event{}, false, ErrEventStreamsClosed
			}
			// A page that is not full reached the end of the log; the
			// events since then come from the tail loop, or from filling.
			full, err := s.readLog(ctx, eventPage)
			if err != nil {
				return orders.Event{}, false, err
			}
			if !full {
				s.stage = joining
			}
		case joining:
			if err := s.streams.join(s); err != nil {
				return orders.Event{}, false, err
			}
			s.stage = filling
		case filling:
			// The tail loop hands s the events after its position in the
			// log when s joined, which may be ahead of s (other subscribers
			// follow the account) or behind the log's end (events came
			// while s joined); s reads the log to its end once more, and
			// then the loop's events follow on.
			full, err := s.readLog(ctx, eventPage)
			if err != nil {
				return orders.Event{}, false, err
			}
			if !full {
				s.stage = following
			}
		case following:
			if timer == nil {
				timer = time.NewTimer(wait)
			}
			select {
			case event := <-s.events:
				// Events s read itself while it joined come again from the
				// tail loop: the sequence tells them.
				if event.Sequence <= s.last {
					continue
				}
				return s.deliver(ctx, *event)
			case <-s.ended:
				return orders.Event{}, false, s.err
			case <-ctx.Done():
				return orders.Event{}, false, ctx.Err()
			case <-timer.C:
				return orders.Event{}, false, nil
			}
		}
	}
}

// readLog reads up to count events after s.last into s.read, and reports
// whether it read count.
func (s *Subscription) readLog(ctx context.Context, count int64) (bool, error) {
	entries, err := s.streams.queue.ReadLog(ctx, s.account, s.last, count)
	if err != nil {
		return false, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	for _, entry := range entries {
		s.read = append(s.read, eventOf(entry))
	}
	return int64(len(entries)) == count, nil
}

// deliver returns event if it is the one after the last returned: the log
// has no gaps, so another means events were dropped before s read them.
func (s *Subscription) deliver(ctx context.Context, event orders.Event) (orders.Event, bool, error) {
	if event.Sequence != s.last+1 {
		s.read = nil
		return orders.Event{}, false, s.gone(ctx)
	}
	s.last = event.Sequence
	return event, true, nil
}

// gone is the error of a subscription whose next events the log no longer
// holds.
func (s *Subscription) gone(ctx context.Context) error {
	first, last, err := s.streams.queue.LogBounds(ctx, s.account)
	if err != nil {
		return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	return &EventsExpiredError{After: s.last, First: first, Last: last}
}

// end ends s for its reader with err; the streams' mu is held.
func (s *Subscription) end(err error) {
	select {
	case <-s.ended:
	default:
		s.err = err
		close(s.ended)
	}
}

// Close stops the subscription; its reader gets no more events.
func (s *Subscription) Close() {
	s.streams.leave(s)
}
