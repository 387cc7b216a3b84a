package placement_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
	"github.com/redis/go-redis/v9"
)

// eventsQueue is the orders queue on a Redis of its own.
func eventsQueue(t testing.TB) *emq.Queue {
	t.Helper()
	client, err := emq.Connect(context.Background(), testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	return client.Queue(placement.EventsQueuePrefix + "0")
}

func newEventStreams(t testing.TB, queue *emq.Queue, opts ...placement.EventStreamsOption) *placement.EventStreams {
	t.Helper()
	streams := placement.NewEventStreams(placement.SingleEventLog(queue), append([]placement.EventStreamsOption{placement.WithEventTailBlock(100 * time.Millisecond)}, opts...)...)
	t.Cleanup(streams.Close)
	return streams
}

// appendEvents appends count events to the account's log, one per append.
func appendEvents(t testing.TB, queue *emq.Queue, account string, count int) {
	t.Helper()
	appendEventsBy(t, queue, account, count, 1)
}

// appendEventsBy appends count balance events to account's log, per of
// them a call.
func appendEventsBy(t testing.TB, queue *emq.Queue, account string, count, per int) {
	t.Helper()
	entry := emq.LogEntry{ID: "ev", Type: string(orders.EventBalance), Data: []byte(`{"asset":"USD"}`)}
	for done := 0; done < count; done += per {
		entries := slices.Repeat([]emq.LogEntry{entry}, min(per, count-done))
		if _, err := queue.AppendLog(context.Background(), account, emq.LogSource{}, entries); err != nil {
			t.Error(err)
			return
		}
	}
}

// readUntil reads the subscription until the event with sequence last,
// and fails unless each event is the one after the one before.
func readUntil(t testing.TB, subscription *placement.Subscription, last int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	want := subscription.Position() + 1
	for want <= last {
		event, ok, err := subscription.Next(ctx, time.Second)
		if err != nil {
			t.Errorf("after %d: %v", want-1, err)
			return
		}
		if !ok {
			continue
		}
		if event.Sequence != want {
			t.Errorf("got event %d, want %d", event.Sequence, want)
			return
		}
		want++
	}
}

// Subscriptions that join while events are appended, from the first event,
// from one in the middle and from the end, each get every event after
// their position once and in order: the catch-up hands over to the tail
// loop without a gap or a repeat, also when several share an account.
func TestEventSubscriptionsJoinTheTailWithoutGapOrRepeat(t *testing.T) {
	testserver.Parallel(t)
	queue := eventsQueue(t)
	streams := newEventStreams(t, queue)
	const total = 1500
	appendEvents(t, queue, "acct", 300)
	appending := make(chan struct{})
	go func() {
		defer close(appending)
		appendEvents(t, queue, "acct", total-300)
	}()
	var readers sync.WaitGroup
	for i, after := range []int64{0, 0, 150, 299, -1, -1} {
		readers.Add(1)
		go func() {
			defer readers.Done()
			time.Sleep(time.Duration(i) * 20 * time.Millisecond)
			var subscription *placement.Subscription
			var err error
			if after < 0 {
				subscription, err = streams.SubscribeNew(context.Background(), "acct")
			} else {
				subscription, err = streams.Subscribe(context.Background(), "acct", after)
			}
			if err != nil {
				t.Error(err)
				return
			}
			defer subscription.Close()
			readUntil(t, subscription, total)
		}()
	}
	readers.Wait()
	<-appending
}

// A position the log cannot resume from is refused: one whose next event
// the retention dropped, and one past the last event given.
func TestEventSubscribeRefusesPositionsTheLogNoLongerHolds(t *testing.T) {
	testserver.Parallel(t)
	queue := eventsQueue(t)
	streams := newEventStreams(t, queue)
	appendEvents(t, queue, "acct", 10)
	// Archived, the log keeps its newest 3; these streams read no history.
	if _, err := queue.MarkLogsArchived(context.Background(), []emq.LogMark{{Group: "acct", Archived: 10}}, emq.LogHotTail{Count: 3, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	first, last, err := queue.LogBounds(context.Background(), "acct")
	if err != nil || first < 3 || last != 10 {
		t.Fatalf("log holds %d to %d, %v; want some of the first five dropped", first, last, err)
	}
	for _, tt := range []struct {
		after   int64
		expired bool
	}{
		{after: 0, expired: true},
		{after: first - 2, expired: true},
		{after: first - 1},
		{after: last},
		{after: last + 1, expired: true},
	} {
		t.Run("after "+strconv.FormatInt(tt.after, 10), func(t *testing.T) {
			subscription, err := streams.Subscribe(context.Background(), "acct", tt.after)
			var expired *placement.EventsExpiredError
			if tt.expired != errors.As(err, &expired) {
				t.Fatalf("subscribe: %v; want expired: %v", err, tt.expired)
			}
			if tt.expired {
				if expired.First != first || expired.Last != last || expired.Ahead() != (tt.after > last) {
					t.Errorf("%+v", expired)
				}
				return
			}
			defer subscription.Close()
			readUntil(t, subscription, last)
		})
	}
}

// A subscription whose reader stops reading is ended once its buffer is
// full, and the account's other subscription gets every event meanwhile.
func TestASlowSubscriptionIsEndedAndTheOthersGoOn(t *testing.T) {
	testserver.Parallel(t)
	queue := eventsQueue(t)
	streams := newEventStreams(t, queue, placement.WithEventBuffer(16))
	ctx := context.Background()
	slow, err := streams.SubscribeNew(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// The first Next joins the tail loop; then the reader stalls.
	if _, ok, err := slow.Next(ctx, 10*time.Millisecond); ok || err != nil {
		t.Fatalf("an empty stream's Next: %v, %v", ok, err)
	}
	fast, err := streams.SubscribeNew(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	// A few at a time, which the fast reader keeps up with. The test waits
	// for the appender: the fast reader can get the last event before the
	// append that wrote it has its answer, and the client closes at cleanup.
	appending := make(chan struct{})
	go func() {
		defer close(appending)
		for range 100 {
			appendEvents(t, queue, "acct", 1)
			time.Sleep(time.Millisecond)
		}
	}()
	readUntil(t, fast, 100)
	<-appending
	for range 17 {
		if _, _, err = slow.Next(ctx, time.Second); err != nil {
			break
		}
	}
	if !errors.Is(err, placement.ErrSlowSubscriber) {
		t.Errorf("the slow subscription ended with %v, want ErrSlowSubscriber", err)
	}
}

// Close ends the subscriptions and refuses new ones.
func TestClosingEventStreamsEndsTheirSubscriptions(t *testing.T) {
	testserver.Parallel(t)
	queue := eventsQueue(t)
	streams := newEventStreams(t, queue)
	ctx := context.Background()
	subscription, err := streams.SubscribeNew(ctx, "acct")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := subscription.Next(ctx, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	streams.Close()
	if _, _, err := subscription.Next(ctx, time.Second); !errors.Is(err, placement.ErrEventStreamsClosed) {
		t.Errorf("a subscription after Close: %v", err)
	}
	if _, err := streams.SubscribeNew(ctx, "acct"); !errors.Is(err, placement.ErrEventStreamsClosed) {
		t.Errorf("a subscribe after Close: %v", err)
	}
}

// When Redis loses its newest writes (a failover to a replica that lagged)
// the log goes back below what subscriptions got, and the events appended
// next reuse those sequences: the subscriptions end as expired, rather
// than wait past events that will never come.
func TestEventSubscriptionsEndWhenTheLogLosesEvents(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue(placement.EventsQueuePrefix + "0")
	streams := newEventStreams(t, queue)
	appendEvents(t, queue, "acct", 5)
	subscription, err := streams.Subscribe(ctx, "acct", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer subscription.Close()
	readUntil(t, subscription, 5)
	// The log as a replica that missed the last three appends holds it:
	// written anew with its first two entries (Valkey refuses to set a
	// stream's last id below one it deleted).
	kept, err := rdb.XRangeN(ctx, "emq:{events.0}:log:acct", "-", "+", 2).Result()
	if err != nil || len(kept) != 2 {
		t.Fatalf("the log's first entries: %v, %v", kept, err)
	}
	if err := rdb.Del(ctx, "emq:{events.0}:log:acct").Err(); err != nil {
		t.Fatal(err)
	}
	for _, entry := range kept {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "emq:{events.0}:log:acct", ID: entry.ID, Values: entry.Values}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.HSet(ctx, "emq:{events.0}:logseq", "acct", 2).Err(); err != nil {
		t.Fatal(err)
	}
	// The failover cuts the tail loop's connection.
	if err := rdb.ClientKillByFilter(ctx, "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	appendEvents(t, queue, "acct", 1)
	_, ok, err := subscription.Next(ctx, 5*time.Second)
	var expired *placement.EventsExpiredError
	if !errors.As(err, &expired) || !expired.Ahead() || expired.After != 5 || expired.Last != 3 {
		t.Errorf("after the loss: %v, %v; want expired after 5 with last 3", ok, err)
	}
}

// TestEventSubscriptionsEndWhenTheLogLacksTheirNextEvent: the log holds
// events after a subscription's position but not the one right after it
// (deleted under the loop); the loop ends the account's subscriptions
// instead of reading the same gap at every turn.
func TestEventSubscriptionsEndWhenTheLogLacksTheirNextEvent(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue(placement.EventsQueuePrefix + "0")
	streams := newEventStreams(t, queue)
	appendEvents(t, queue, "acct", 2)
	subscription, err := streams.Subscribe(ctx, "acct", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer subscription.Close()
	readUntil(t, subscription, 2)
	// Past its own reads: the subscription follows the loop.
	if _, ok, err := subscription.Next(ctx, 100*time.Millisecond); ok || err != nil {
		t.Fatalf("an idle stream answered %v, %v", ok, err)
	}
	// Event 4 lands, 3 never did.
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "emq:{events.0}:log:acct", ID: "4-0",
		Values: []string{"id", "ev", "type", string(orders.EventBalance), "at", "0", "data", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, "emq:{events.0}:logseq", "acct", 4).Err(); err != nil {
		t.Fatal(err)
	}
	_, ok, err := subscription.Next(ctx, 5*time.Second)
	var expired *placement.EventsExpiredError
	if !errors.As(err, &expired) || expired.After != 2 || expired.First != 4 {
		t.Errorf("after the gap: %v, %v; want expired after 2, the log going on at 4", ok, err)
	}
}

// historyStreams is event streams that read f's history, and an archiver
// of f's logs running until the test ends, with a hot tail of hot.
func historyStreams(t testing.TB, f *archiveFixture, hot emq.LogHotTail) *placement.EventStreams {
	t.Helper()
	archiver := f.archiver(nil, hot)
	ctx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	running.Go(func() { archiver.Run(ctx) })
	t.Cleanup(func() { stop(); running.Wait() })
	return newEventStreams(t, f.queue, placement.WithEventHistory(f.history))
}

// Subscriptions that resume further back than the log holds, while events
// keep coming and the archiver keeps moving them from the log to the
// history, get every event after their position once and in order: from
// the history, then the log, then the tail loop, across each boundary
// without a gap or a repeat, however far the log moved meanwhile.
func TestSubscriptionsResumeFromTheHistoryThenJoinTheLiveTail(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	streams := historyStreams(t, f, emq.LogHotTail{Count: 20, Age: 20 * time.Millisecond})
	const total = 3000
	appendEvents(t, f.queue, "acct", 1000)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if first, _ := logBounds(t, f.queue, "acct"); first > 900 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the archiver did not trim the log")
		}
		time.Sleep(10 * time.Millisecond)
	}
	appending := make(chan struct{})
	go func() {
		defer close(appending)
		for range (total - 1000) / 50 {
			appendEvents(t, f.queue, "acct", 50)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var readers sync.WaitGroup
	for i, after := range []int64{0, 0, 1, 499, 900, 999, -1} {
		readers.Go(func() {
			time.Sleep(time.Duration(i) * 30 * time.Millisecond)
			var subscription *placement.Subscription
			var err error
			if after < 0 {
				// Further back than the log holds by the time it reads.
				_, last := logBounds(t, f.queue, "acct")
				after = last - 500
			}
			subscription, err = streams.Subscribe(context.Background(), "acct", after)
			if err != nil {
				t.Errorf("subscribe after %d: %v", after, err)
				return
			}
			defer subscription.Close()
			readUntil(t, subscription, total)
		})
	}
	readers.Wait()
	<-appending
	if first, _ := logBounds(t, f.queue, "acct"); first <= 1000 {
		t.Errorf("the log still holds %d: the readers may not have crossed into it from the history", first)
	}
}

// A position is refused (410) only when the history no longer holds the
// event after it, being older than the retention: one in the history but
// not in the log is resumed from.
func TestOnlyAPositionPastTheHistorysRetentionIsRefused(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	ctx := context.Background()
	hot := emq.LogHotTail{Count: 10, Age: time.Hour}
	archiver := f.archiver(nil, hot, placement.WithEventsRetention(time.Hour))
	pass(t, archiver)
	for range 4 {
		appendEvents(t, f.queue, "acct", 25)
		pass(t, archiver)
	}
	if first, last := logBounds(t, f.queue, "acct"); first != 91 || last != 100 {
		t.Fatalf("the log holds %d..%d, want its newest ten", first, last)
	}
	// The chunks up to 50 were archived two hours ago: past the retention.
	if _, err := f.db.Exec(ctx, `UPDATE account_event_chunks SET archived_at = now() - interval '2 hours' WHERE last_sequence <= 50`); err != nil {
		t.Fatal(err)
	}
	if pruned, err := archiver.Prune(ctx, time.Now()); err != nil || pruned != 2 {
		t.Fatalf("pruned %d chunks, %v; want the two up to 50", pruned, err)
	}
	streams := newEventStreams(t, f.queue, placement.WithEventHistory(f.history))
	for _, tt := range []struct {
		after   int64
		expired bool
	}{
		{after: 0, expired: true},
		{after: 49, expired: true},
		{after: 50},
		{after: 75},
		{after: 89},
		{after: 90},
		{after: 100},
		{after: 101, expired: true},
	} {
		t.Run("after "+strconv.FormatInt(tt.after, 10), func(t *testing.T) {
			subscription, err := streams.Subscribe(ctx, "acct", tt.after)
			var expired *placement.EventsExpiredError
			if tt.expired != errors.As(err, &expired) {
				t.Fatalf("subscribe: %v; want expired: %v", err, tt.expired)
			}
			if tt.expired {
				if expired.Last != 100 || expired.Ahead() != (tt.after > 100) || (!expired.Ahead() && expired.First != 51) {
					t.Errorf("%+v, want the history from 51 and the log to 100", expired)
				}
				return
			}
			defer subscription.Close()
			readUntil(t, subscription, 100)
		})
	}
}

// Ready tells the events Next answers at once: those read while catching
// up, and those the tail loop handed over, so a reader sends them
// together; Next(ctx, 0) takes them, and without them answers nothing.
func TestSubscriptionReadyTellsTheEventsAtHand(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue := eventsQueue(t)
	streams := newEventStreams(t, queue)
	appendEvents(t, queue, "acct", 3)
	subscription, err := streams.Subscribe(ctx, "acct", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer subscription.Close()
	readUntil(t, subscription, 1)
	// Caught up: the first page holds the other two.
	for _, want := range []int64{2, 3} {
		if !subscription.Ready() {
			t.Fatalf("before event %d: not ready", want)
		}
		if event, ok, err := subscription.Next(ctx, 0); err != nil || !ok || event.Sequence != want {
			t.Fatalf("Next(0) = %d, %v, %v; want event %d", event.Sequence, ok, err, want)
		}
	}
	if _, ok, err := subscription.Next(ctx, 0); ok || err != nil {
		t.Fatalf("Next(0) with nothing at hand = %v, %v; want nothing", ok, err)
	}
	// Following: a batch appended at once is handed over together.
	entries := make([]emq.LogEntry, 3)
	for i := range entries {
		entries[i] = emq.LogEntry{ID: "ev", Type: string(orders.EventBalance), Data: []byte(`{"asset":"USD"}`)}
	}
	if _, err := queue.AppendLog(ctx, "acct", emq.LogSource{}, entries); err != nil {
		t.Fatal(err)
	}
	if event, ok, err := subscription.Next(ctx, 5*time.Second); err != nil || !ok || event.Sequence != 4 {
		t.Fatalf("Next = %d, %v, %v; want event 4", event.Sequence, ok, err)
	}
	for _, want := range []int64{5, 6} {
		// The tail loop hands the batch's events over one by one: the
		// reader may take the first before the next is in.
		for deadline := time.Now().Add(time.Second); !subscription.Ready() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if !subscription.Ready() {
			t.Fatalf("before event %d: not ready", want)
		}
		if event, ok, err := subscription.Next(ctx, 0); err != nil || !ok || event.Sequence != want {
			t.Fatalf("Next(0) = %d, %v, %v; want event %d", event.Sequence, ok, err, want)
		}
	}
	if subscription.Ready() {
		t.Error("ready with nothing at hand")
	}
}
