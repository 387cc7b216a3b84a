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
// (emq/log.go), appended by the writers in account_events_append.go; the
// log keeps their hot tail, and their history is in PostgreSQL
// (account_events_archive.go). EventStreams serves them to the account's
// subscribers: each subscription first reads what it missed page by page
// on its own, from the history as long as the log no longer holds its next
// event and then from the log, then joins one tail loop per process, which
// waits on the queue's one change stream (WaitLogChanges) and reads the
// logs of the accounts with a subscriber that changed, handing each new
// event to every subscription of its account. The handoff between the two
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

// EventsExpiredError refuses a position in an account's stream that can no
// longer be resumed from: the events after it are neither in the log nor
// in the history (older than the history's retention), or it is past the
// last event ever given (Redis lost its newest writes).
type EventsExpiredError struct {
	// After is the position asked for, the last sequence the client had.
	After int64
	// First is the first sequence after After the history or the log still
	// holds; Last the last the log gave.
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

// EventHistory is where accounts' events are kept once they leave Redis
// (postgres.EventHistory): a stream that resumes further back than the log
// holds reads them there.
type EventHistory interface {
	// EventsAfter returns the account's events after sequence after, oldest
	// first, at least count when the history holds them; the first is past
	// after+1 when the history lacks after+1, and none when it holds
	// nothing there.
	EventsAfter(ctx context.Context, account string, after int64, count int) ([]orders.Event, error)
	// FirstEventSequence returns the first sequence the history holds, 0
	// when it holds none of the account's.
	FirstEventSequence(ctx context.Context, account string) (int64, error)
}

// EventStreams hands out subscriptions to accounts' event streams; one per
// process. Each shard of the logs (EventLogs) has a tail loop of its own,
// which serves the subscriptions of its accounts.
type EventStreams struct {
	logs   *EventLogs
	shards []*eventShard
}

// eventShard serves the subscriptions of the accounts whose logs are on
// one queue, with one tail loop.
type eventShard struct {
	queue   *emq.Queue
	history EventHistory
	logger  *slog.Logger
	block   time.Duration
	buffer  int
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
type EventStreamsOption func(*eventShard)

// WithEventTailBlock sets how long one read of the tail loop waits
// (DefaultEventTailBlock otherwise).
func WithEventTailBlock(block time.Duration) EventStreamsOption {
	return func(e *eventShard) {
		if block > 0 {
			e.block = block
		}
	}
}

// WithEventBuffer sets how many events a subscription holds for its reader
// (DefaultEventBuffer otherwise).
func WithEventBuffer(events int) EventStreamsOption {
	return func(e *eventShard) {
		if events > 0 {
			e.buffer = events
		}
	}
}

// WithEventHistory makes subscriptions resume from positions the log no
// longer holds, reading history's events before the log's; without it,
// such a position is refused (EventsExpiredError).
func WithEventHistory(history EventHistory) EventStreamsOption {
	return func(e *eventShard) { e.history = history }
}

// WithEventLogger sets where the tail loop reports failed reads;
// slog.Default otherwise.
func WithEventLogger(logger *slog.Logger) EventStreamsOption {
	return func(e *eventShard) { e.logger = logger }
}

// NewEventStreams serves the accounts' logs, one tail loop per shard of
// them with a subscriber (each holds a connection of the pool while it
// waits).
func NewEventStreams(logs *EventLogs, opts ...EventStreamsOption) *EventStreams {
	streams := &EventStreams{logs: logs, shards: make([]*eventShard, len(logs.queues))}
	for i, queue := range logs.queues {
		e := &eventShard{queue: queue, logger: slog.Default(), block: DefaultEventTailBlock, buffer: DefaultEventBuffer,
			followed: map[string]*followedAccount{}}
		for _, opt := range opts {
			opt(e)
		}
		e.stop, e.cease = context.WithCancel(context.Background())
		streams.shards[i] = e
	}
	return streams
}

// Subscribe opens the account's stream after the event with sequence
// after (0: from the first event kept); an *EventsExpiredError when
// neither the log nor the history holds the event after it.
func (e *EventStreams) Subscribe(ctx context.Context, account string, after int64) (*Subscription, error) {
	return e.shards[e.logs.shard(account)].Subscribe(ctx, account, after)
}

// SubscribeNew opens the account's stream after its last event: the
// subscription gets the events that come from now on.
func (e *EventStreams) SubscribeNew(ctx context.Context, account string) (*Subscription, error) {
	return e.shards[e.logs.shard(account)].SubscribeNew(ctx, account)
}

// Close ends every subscription with ErrEventStreamsClosed, refuses new
// ones, and returns once the tail loops have stopped.
func (e *EventStreams) Close() {
	for _, shard := range e.shards {
		shard.Close()
	}
}

// Subscribe opens the account's stream after the event with sequence
// after (0: from the first event kept); an *EventsExpiredError when
// neither the log nor the history holds the event after it.
func (e *eventShard) Subscribe(ctx context.Context, account string, after int64) (*Subscription, error) {
	first, last, err := e.bounds(ctx, account)
	if err != nil {
		return nil, err
	}
	if after > last || (first > after+1 && e.history == nil) {
		return nil, &EventsExpiredError{After: after, First: first, Last: last}
	}
	s := e.subscription(account, after)
	if first > after+1 {
		// The log dropped the next event: the history holds it, unless it
		// is older than the history's retention. Its first page is read
		// now, so the answer is the refusal when it is.
		s.logFirst = first
		if _, err := s.readHistory(ctx, eventPage); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SubscribeNew opens the account's stream after its last event: the
// subscription gets the events that come from now on.
func (e *eventShard) SubscribeNew(ctx context.Context, account string) (*Subscription, error) {
	_, last, err := e.bounds(ctx, account)
	if err != nil {
		return nil, err
	}
	return e.subscription(account, last), nil
}

func (e *eventShard) bounds(ctx context.Context, account string) (first, last int64, err error) {
	if e.isClosed() {
		return 0, 0, ErrEventStreamsClosed
	}
	first, last, err = e.queue.LogBounds(ctx, account)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	return first, last, nil
}

func (e *eventShard) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closed
}

func (e *eventShard) subscription(account string, after int64) *Subscription {
	return &Subscription{streams: e, account: account, last: after, events: make(chan *orders.Event, e.buffer), ended: make(chan struct{})}
}

// Close ends every subscription with ErrEventStreamsClosed, refuses new
// ones, and returns once the tail loop has stopped.
func (e *eventShard) Close() {
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
func (e *eventShard) join(s *Subscription) error {
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
func (e *eventShard) leave(s *Subscription) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.remove(s)
}

// remove takes s out of its account's subscribers, and the account out of
// the followed when it was the last; e.mu is held.
func (e *eventShard) remove(s *Subscription) {
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
func (e *eventShard) tail() {
	defer e.loops.Done()
	retry, checked := time.Duration(0), time.Now()
	position, missed := "", false
	// announced counts the changes the waits gave since the last reconcile;
	// ahead holds those the last read of the logs found after position,
	// taken without a wait (ahead is true when it looked and found some).
	announced := 0
	var next []emq.LogChange
	ahead := false
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
		switch {
		case position == "":
			// Whatever was appended before the position is read from the
			// logs themselves, below.
			position, err = e.queue.LogChangesPosition(e.stop)
			missed = true
			ahead = false
		case ahead:
			// While appends keep coming, the read of the logs brought the
			// next changes: no wait, and one round trip a turn.
			changes, ahead = next, false
		default:
			changes, position, err = e.queue.WaitLogChanges(e.stop, position, e.block, changePage)
		}
		if err != nil {
			if e.stop.Err() != nil {
				continue
			}
			missed = true
			retry = min(max(2*retry, 50*time.Millisecond), 2*time.Second)
			e.logger.Warn("event streams: waiting for the account logs' changes failed; retrying", "retry_in", retry.String(), "err", err)
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
		next, position = e.readChanged(changed, position)
		ahead = len(next) > 0
	}
}

// changed returns the loop's position in the log of each followed account
// the changes announce events after it for.
func (e *eventShard) changed(changes []emq.LogChange) map[string]int64 {
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
// position given for each, page by page, and hands out their events. With
// a position on the change stream, each read also looks at the changes
// announced after it, without waiting: it returns them and the position
// after them (none and position when there are none, or no read was made).
func (e *eventShard) readChanged(changed map[string]int64, position string) ([]emq.LogChange, string) {
	var next []emq.LogChange
	for len(changed) > 0 {
		var read map[string][]emq.LogEvent
		var err error
		if position == "" {
			read, err = e.queue.ReadLogs(e.stop, changed, eventPage)
		} else {
			var found []emq.LogChange
			read, found, position, err = e.queue.ReadLogsAndChanges(e.stop, changed, eventPage, position, changePage)
			next = append(next, found...)
		}
		if err != nil {
			// The next reconcile finds them behind again.
			if e.stop.Err() == nil {
				e.logger.Warn("event streams: reading the account logs failed", "accounts", len(changed), "err", err)
			}
			return next, position
		}
		again := e.hand(read, changed)
		more := map[string]int64{}
		for name, entries := range read {
			if len(entries) == eventPage {
				more[name] = entries[len(entries)-1].Sequence
			}
		}
		maps.Copy(more, again)
		changed = more
	}
	return next, position
}

// reconcile returns the loop's position in the log of each followed
// account whose log holds events after it, and ends the subscriptions of
// the accounts whose log went back below it. Redis that lost its newest
// writes (a failover to a replica that lagged) gives the next events the
// sequences of events already handed out, which the loop, reading after
// its position, would never hand out: their clients' resume is answered
// 410 instead. The loop looks once a second, so a log that grows past its
// old end within that is not caught (docs/api.md).
func (e *eventShard) reconcile() map[string]int64 {
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
		e.logger.Error("event streams: an account's log went back; its streams end", "account", name, "err", err)
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
// from there (the changes that announced those events are spent). A log
// that no longer holds the events right after the loop's position (it
// dropped them, archived, before the loop read them: the loop lagged more
// than the hot tail) is read on from what it holds; each subscription
// reads what it missed from the history itself (Next). A subscription that
// has no room left is ended, so no reader waits for another.
func (e *eventShard) hand(read map[string][]emq.LogEvent, from map[string]int64) (again map[string]int64) {
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
	streams *eventShard
	account string
	// last is the sequence of the last event Next returned (or the
	// position the subscription started after).
	last int64
	// read holds events read from the log (or the history) that Next has
	// not returned yet.
	read []orders.Event
	// logFirst is the first sequence the log held when the subscription
	// last found it had dropped the one it wanted: a log only drops its
	// oldest, so the events before it are read from the history.
	logFirst int64
	// stage is where the subscription is: catching up alone, reading the
	// log to its end once more after joining the tail loop, or following.
	stage subscriptionStage
	// events are what the tail loop hands over, shared by the account's
	// subscriptions; ended is closed, with err set, when the subscription
	// is ended for the reader.
	events chan *orders.Event
	ended  chan struct{}
	err    error
	// timer times Next's waits.
	timer *time.Timer
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
	timing := false
	defer func() {
		if timing {
			s.timer.Stop()
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
			// The events at hand are taken without a timer: a reader
			// sending a batch asks for them one by one. An end comes
			// first, as soon as it is seen.
			select {
			case <-s.ended:
				return orders.Event{}, false, s.err
			default:
			}
			var event *orders.Event
			select {
			case event = <-s.events:
			default:
				if !timing {
					// One timer for the subscription's life, not one per
					// wait (Go 1.23 timers: Reset needs no drain).
					if s.timer == nil {
						s.timer = time.NewTimer(wait)
					} else {
						s.timer.Reset(wait)
					}
					timing = true
				}
				select {
				case event = <-s.events:
				case <-s.ended:
					return orders.Event{}, false, s.err
				case <-ctx.Done():
					return orders.Event{}, false, ctx.Err()
				case <-s.timer.C:
					timing = false
					return orders.Event{}, false, nil
				}
			}
			// Events s read itself while it joined come again from the
			// tail loop: the sequence tells them.
			if event.Sequence <= s.last {
				continue
			}
			if event.Sequence > s.last+1 {
				// The loop read on past events the log had dropped
				// (archived) before it read them: s reads them itself,
				// from the history, and the loop's event follows them.
				if err := s.fill(ctx, event.Sequence-1); err != nil {
					return orders.Event{}, false, err
				}
				if s.readThrough() == event.Sequence-1 {
					s.read = append(s.read, *event)
				}
				continue
			}
			return s.deliver(ctx, *event)
		}
	}
}

// Ready reports whether Next has an event at hand, read and not yet
// returned or handed over by the tail loop, so that it answers without a
// wait: its reader can send the events at hand together. (One handed over
// that Next had read itself already is skipped, and Next then waits.)
func (s *Subscription) Ready() bool {
	return len(s.read) > 0 || (s.stage == following && len(s.events) > 0)
}

// readThrough is the sequence of the last event read: the last in s.read,
// or the last returned.
func (s *Subscription) readThrough() int64 {
	if len(s.read) > 0 {
		return s.read[len(s.read)-1].Sequence
	}
	return s.last
}

// readLog reads up to count events after those read into s.read, and
// reports whether it read count (or more: the history reads whole
// chunks): from the log, or from the history when the log no longer holds
// the next event (it was archived before the log dropped it, so the
// history holds it, unless it is older than the history's retention). The
// log is read first: reading the history first could miss an event
// archived and dropped from the log in between.
func (s *Subscription) readLog(ctx context.Context, count int64) (bool, error) {
	after := s.readThrough()
	history := s.streams.history
	if history != nil && after+1 < s.logFirst {
		return s.readHistory(ctx, count)
	}
	page, err := s.streams.queue.ReadLogPage(ctx, s.account, after, count)
	if err != nil {
		return false, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	switch {
	case history == nil:
	case len(page.Events) > 0 && page.Events[0].Sequence > after+1:
		s.logFirst = page.Events[0].Sequence
		return s.readHistory(ctx, count)
	case len(page.Events) == 0 && page.Last > after:
		s.logFirst = page.Last + 1
		return s.readHistory(ctx, count)
	}
	for _, entry := range page.Events {
		s.read = append(s.read, eventOf(entry))
	}
	return int64(len(page.Events)) == count, nil
}

// readHistory reads at least count events after those read from the
// history into s.read, when it holds them, and reports whether it read
// any; the subscription's end when the history does not hold the next
// event.
func (s *Subscription) readHistory(ctx context.Context, count int64) (bool, error) {
	after := s.readThrough()
	events, err := s.streams.history.EventsAfter(ctx, s.account, after, int(count))
	if err != nil {
		return false, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	if len(events) == 0 || events[0].Sequence != after+1 {
		s.read = nil
		return false, s.gone(ctx)
	}
	s.read = append(s.read, events...)
	return true, nil
}

// fill reads the events after those read through sequence through into
// s.read, from the log or the history; the subscription's end when
// neither holds them.
func (s *Subscription) fill(ctx context.Context, through int64) error {
	for s.readThrough() < through {
		before := s.readThrough()
		if _, err := s.readLog(ctx, max(eventPage, through-before)); err != nil {
			return err
		}
		if s.readThrough() == before {
			return s.gone(ctx)
		}
		if next := s.read[0].Sequence; next != s.last+1 {
			// A hole in the log (only a write Redis lost leaves one).
			s.read = nil
			return s.goneTo(ctx, next)
		}
	}
	return nil
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

// gone is the error of a subscription whose next events neither the log
// nor the history holds.
func (s *Subscription) gone(ctx context.Context) error {
	first, last, err := s.streams.queue.LogBounds(ctx, s.account)
	if err != nil {
		return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	if history := s.streams.history; history != nil {
		held, err := history.FirstEventSequence(ctx, s.account)
		if err != nil {
			return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
		}
		if held > 0 && held < first {
			first = held
		}
	}
	return &EventsExpiredError{After: s.last, First: first, Last: last}
}

// goneTo is gone for a subscription whose log goes on at next after a
// hole.
func (s *Subscription) goneTo(ctx context.Context, next int64) error {
	err := s.gone(ctx)
	var expired *EventsExpiredError
	if errors.As(err, &expired) {
		expired.First = next
	}
	return err
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
