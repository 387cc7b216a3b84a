package placement_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// archiveFixture is the orders queue on a Redis of its own and the history
// in a PostgreSQL database of its own.
type archiveFixture struct {
	queue   *emq.Queue
	db      *pgxpool.Pool
	history *postgres.EventHistory
}

func newArchiveFixture(t testing.TB) *archiveFixture {
	t.Helper()
	db := migratedPool(t)
	return &archiveFixture{queue: eventsQueue(t), db: db, history: postgres.NewEventHistory(db)}
}

// archiver is an archiver of f's logs into archive (f's history when nil)
// that archives at once and keeps the hot tail hot.
func (f *archiveFixture) archiver(archive placement.EventArchive, hot emq.LogHotTail, opts ...placement.EventArchiverOption) *placement.EventArchiver {
	if archive == nil {
		archive = f.history
	}
	return placement.NewEventArchiver(f.queue, archive, nil,
		append([]placement.EventArchiverOption{placement.WithHotTail(hot), placement.WithArchiveDelay(0)}, opts...)...)
}

// pass runs one pass of the archiver, failing the test on an error.
func pass(t testing.TB, archiver *placement.EventArchiver) {
	t.Helper()
	if err := archiver.Pass(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// historyOf reads the account's whole history, and fails the test unless
// it holds its events 1 to want exactly once each, in order, and no chunk
// overlaps another.
func (f *archiveFixture) historyOf(t testing.TB, account string, want int64) {
	t.Helper()
	events, err := f.history.EventsAfter(context.Background(), account, 0, int(want)+10)
	if err != nil {
		t.Fatal(err)
	}
	for i, event := range events {
		if event.Sequence != int64(i+1) {
			t.Fatalf("%s's history: event %d at %d", account, event.Sequence, i+1)
		}
		if event.ID != "ev" || event.Type != orders.EventBalance {
			t.Fatalf("%s's history: event %d reads %+v", account, event.Sequence, event)
		}
	}
	if int64(len(events)) != want {
		t.Fatalf("%s's history holds %d events, want %d", account, len(events), want)
	}
	var overlaps int
	if err := f.db.QueryRow(context.Background(), `SELECT count(*) FROM account_event_chunks a JOIN account_event_chunks b
		ON a.account_id = b.account_id AND a.last_sequence < b.last_sequence AND b.first_sequence <= a.last_sequence`).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if overlaps != 0 {
		t.Fatalf("%d chunks overlap", overlaps)
	}
}

func logBounds(t testing.TB, queue *emq.Queue, account string) (first, last int64) {
	t.Helper()
	first, last, err := queue.LogBounds(context.Background(), account)
	if err != nil {
		t.Fatal(err)
	}
	return first, last
}

// The archiver copies each account's events to the history once, those
// appended before it started too (no announcement reached it: it
// reconciles), and trims each log to its hot tail once archived: to its
// newest Count as it archives, and to nothing once the tail aged.
func TestTheArchiverKeepsEveryEventOnceAndRedisItsHotTail(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	appendEvents(t, f.queue, "before", 40)
	archiver := f.archiver(nil, emq.LogHotTail{Count: 5, Age: 2 * time.Second})
	pass(t, archiver)
	appendEvents(t, f.queue, "a", 300)
	appendEvents(t, f.queue, "b", 7)
	for range 3 {
		pass(t, archiver)
	}
	f.historyOf(t, "before", 40)
	f.historyOf(t, "a", 300)
	f.historyOf(t, "b", 7)
	for account, want := range map[string][2]int64{"before": {36, 40}, "a": {296, 300}, "b": {3, 7}} {
		if first, last := logBounds(t, f.queue, account); first != want[0] || last != want[1] {
			t.Errorf("%s's log holds %d..%d, want its newest five, %d..%d", account, first, last, want[0], want[1])
		}
	}
	// The tail ages; no more appends: the logs are trimmed all the same.
	time.Sleep(2100 * time.Millisecond)
	pass(t, archiver)
	for account, last := range map[string]int64{"before": 40, "a": 300, "b": 7} {
		if first, got := logBounds(t, f.queue, account); first != last+1 || got != last {
			t.Errorf("%s's log holds %d..%d after its tail aged, want none after %d", account, first, got, last)
		}
	}
	f.historyOf(t, "a", 300)
}

// crashingArchive writes to the history and then fails, as a worker that
// died between the write to PostgreSQL and the mark in Redis.
type crashingArchive struct {
	*postgres.EventHistory
	crashes atomic.Int64
}

func (c *crashingArchive) ArchiveEvents(ctx context.Context, runs map[string][]orders.Event) (map[string]int64, error) {
	if _, err := c.EventHistory.ArchiveEvents(ctx, runs); err != nil {
		return nil, err
	}
	c.crashes.Add(1)
	return nil, errors.New("crashed after the write")
}

// A crash between the write to PostgreSQL and the mark in Redis loses
// nothing and writes nothing twice: the log keeps the events (no mark, no
// trim), and the next archiver's pass finds the history holds them, marks
// them archived and goes on after them.
func TestAnArchiverCrashBetweenWriteAndMarkLosesAndRepeatsNothing(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	hot := emq.LogHotTail{Count: 2, Age: time.Millisecond}
	crashing := &crashingArchive{EventHistory: f.history}
	dying := f.archiver(crashing, hot)
	pass(t, dying)
	appendEvents(t, f.queue, "acct", 20)
	if err := dying.Pass(context.Background(), time.Millisecond); err == nil || crashing.crashes.Load() == 0 {
		t.Fatalf("the dying archiver's pass: %v after %d writes", err, crashing.crashes.Load())
	}
	f.historyOf(t, "acct", 20)
	time.Sleep(5 * time.Millisecond)
	if first, last := logBounds(t, f.queue, "acct"); first != 1 || last != 20 {
		t.Fatalf("the log holds %d..%d after the crash, want every event: none was marked", first, last)
	}

	// Its successor was told of none of it.
	appendEvents(t, f.queue, "acct", 5)
	successor := f.archiver(nil, hot)
	for range 3 {
		pass(t, successor)
	}
	f.historyOf(t, "acct", 25)
	if archived, err := f.queue.LogsArchived(context.Background(), []string{"acct"}); err != nil || archived["acct"] != 25 {
		t.Errorf("archived through %v, %v; want 25", archived, err)
	}
	// Archived and older than the tail's millisecond: all gone.
	if first, last := logBounds(t, f.queue, "acct"); first != 26 || last != 25 {
		t.Errorf("the log holds %d..%d, want none: archived and old", first, last)
	}
}

// failingArchive refuses every write, as a PostgreSQL that is down.
type failingArchive struct{ *postgres.EventHistory }

func (failingArchive) ArchiveEvents(context.Context, map[string][]orders.Event) (map[string]int64, error) {
	return nil, errors.New("postgres is down")
}

// The log never drops an event the history does not hold: while the
// history cannot be written, the log keeps every event, however old and
// however many, and the archiver catches up once it can.
func TestTheLogKeepsWhatTheHistoryDoesNotHoldYet(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	hot := emq.LogHotTail{Count: 3, Age: time.Millisecond}
	down := f.archiver(failingArchive{f.history}, hot)
	pass(t, down)
	for round := range 5 {
		appendEvents(t, f.queue, "acct", 100)
		time.Sleep(5 * time.Millisecond)
		if err := down.Pass(context.Background(), time.Millisecond); err == nil {
			t.Fatal("a pass with the history down succeeded")
		}
		if first, last := logBounds(t, f.queue, "acct"); first != 1 || last != int64(100*(round+1)) {
			t.Fatalf("round %d: the log holds %d..%d; want every event", round, first, last)
		}
	}
	up := f.archiver(nil, hot)
	for range 4 {
		pass(t, up)
	}
	f.historyOf(t, "acct", 500)
	if first, last := logBounds(t, f.queue, "acct"); first != 501 || last != 500 {
		t.Errorf("the log holds %d..%d once archived, want none: archived and old", first, last)
	}
}

// Several archivers at once, while events keep coming, share the work and
// write each event once: the history holds every account's events in
// order, and the logs their hot tail.
func TestArchiversRunningAtOnceWriteEachEventOnce(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	hot := emq.LogHotTail{Count: 10, Age: time.Hour}
	ctx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for range 3 {
		archiver := f.archiver(nil, hot)
		running.Go(func() { archiver.Run(ctx) })
	}
	var appending sync.WaitGroup
	accounts := []string{"a", "b", "c", "d"}
	for i, account := range accounts {
		appending.Go(func() {
			for range 10 {
				appendEvents(t, f.queue, account, 30+i)
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	appending.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for _, account := range accounts {
		for {
			archived, err := f.queue.LogsArchived(context.Background(), []string{account})
			if err != nil {
				t.Fatal(err)
			}
			_, last := logBounds(t, f.queue, account)
			if archived[account] == last || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	stop()
	running.Wait()
	for i, account := range accounts {
		want := int64(10 * (30 + i))
		f.historyOf(t, account, want)
		if first, last := logBounds(t, f.queue, account); first != want-9 || last != want {
			t.Errorf("%s's log holds %d..%d, want its newest ten", account, first, last)
		}
	}
}

// countingArchive counts the chunks offered to the history.
type countingArchive struct {
	*postgres.EventHistory
	offered atomic.Int64
}

func (c *countingArchive) ArchiveEvents(ctx context.Context, runs map[string][]orders.Event) (map[string]int64, error) {
	c.offered.Add(int64(len(runs)))
	return c.EventHistory.ArchiveEvents(ctx, runs)
}

// An account one archiver archives is its own a while: another archiver
// that finds it due leaves it to the holder, reading and offering nothing,
// and takes it once the claim expired; an archiver whose write failed lets
// the others take its accounts at once.
func TestAnArchiverLeavesAnAccountAnotherClaimedToIt(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	hot := emq.LogHotTail{Count: 10, Age: time.Hour}
	holder, other := &countingArchive{EventHistory: f.history}, &countingArchive{EventHistory: f.history}
	first, second := f.archiver(holder, hot), f.archiver(other, hot)
	pass(t, first)
	pass(t, second)
	appendEvents(t, f.queue, "acct", 20)
	pass(t, first)
	appendEvents(t, f.queue, "acct", 20)
	pass(t, second)
	pass(t, second)
	if got := other.offered.Load(); got != 0 {
		t.Fatalf("the second archiver offered %d chunks of an account the first claimed", got)
	}
	f.historyOf(t, "acct", 20)
	time.Sleep(placement.ArchiveClaim)
	pass(t, second)
	f.historyOf(t, "acct", 40)
	if got, want := [2]int64{holder.offered.Load(), other.offered.Load()}, [2]int64{1, 1}; got != want {
		t.Errorf("the archivers offered %v chunks, want %v", got, want)
	}

	down := f.archiver(failingArchive{f.history}, hot)
	pass(t, down)
	appendEvents(t, f.queue, "fails", 5)
	if err := down.Pass(context.Background(), time.Millisecond); err == nil {
		t.Fatal("a pass with the history down succeeded")
	}
	// A new archiver (told of nothing, it reconciles) need not wait.
	pass(t, f.archiver(nil, hot))
	f.historyOf(t, "fails", 5)
}

// Prune deletes the history archived longer than the retention ago, in
// batches of 1,000 chunks, and keeps the rest.
func TestPruneDeletesTheHistoryPastItsRetention(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	ctx := context.Background()
	const chunks = 2500
	for start := 0; start < chunks; start += 500 {
		runs := map[string][]orders.Event{}
		for i := start; i < start+500; i++ {
			runs[fmt.Sprintf("acct-%04d", i)] = []orders.Event{{Sequence: 1, ID: "ev", Type: orders.EventBalance, Data: []byte(`{}`)}}
		}
		if _, err := f.history.ArchiveEvents(ctx, runs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.db.Exec(ctx, `UPDATE account_event_chunks SET archived_at = now() - interval '2 hours' WHERE account_id < 'acct-2100'`); err != nil {
		t.Fatal(err)
	}
	archiver := f.archiver(nil, emq.DefaultLogHotTail, placement.WithEventsRetention(time.Hour))
	pruned, err := archiver.Prune(ctx, time.Now())
	if err != nil || pruned != 2100 {
		t.Fatalf("pruned %d, %v; want 2100", pruned, err)
	}
	var left int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM account_event_chunks`).Scan(&left); err != nil || left != 400 {
		t.Errorf("%d chunks left, %v; want 400", left, err)
	}
}

// An archiver whose queue client waits for replicas archives nothing the
// replicas do not hold: a failover could lose it, and its sequence go to
// another event. Once a replica holds it, it is archived.
func TestAnArchiverKeepsNothingItsReplicasLack(t *testing.T) {
	testserver.Parallel(t)
	f := newArchiveFixture(t)
	primary := testserver.SingleRedis(t, "a replica of it is started later")
	rdb := primary.Client(t)
	appender, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := emq.Connect(context.Background(), rdb, emq.WithAdmitReplicas(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	f.queue = waiting.Queue(placement.EventsQueuePrefix + "0")
	archiver := f.archiver(nil, emq.LogHotTail{})
	pass(t, archiver)
	appendEvents(t, appender.Queue(placement.EventsQueuePrefix+"0"), "acct", 5)
	for range 2 {
		err := archiver.Pass(context.Background(), time.Millisecond)
		var notReplicated *emq.NotReplicatedError
		if !errors.As(err, &notReplicated) {
			t.Fatalf("a pass without the replica: %v", err)
		}
	}
	if first, err := f.history.FirstEventSequence(context.Background(), "acct"); err != nil || first != 0 {
		t.Errorf("the history holds events from %d, %v; want none", first, err)
	}
	if first, last := logBounds(t, f.queue, "acct"); first != 1 || last != 5 {
		t.Errorf("the log holds %d..%d, want every event", first, last)
	}
	testserver.StartRedis(t).Follow(t, primary)
	// On a busy machine the replica may take longer than the wait at first.
	for attempt := 1; ; attempt++ {
		err := archiver.Pass(context.Background(), time.Millisecond)
		if err == nil {
			break
		}
		if attempt == 20 {
			t.Fatalf("a pass with the replica: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.historyOf(t, "acct", 5)
}

// A pass archives up to archiveRounds chunks of an account; an account
// with more is left due, and the pass says so (Run then goes on at once
// rather than at its pace, or a busy account's log would outgrow it in
// Redis), until a next pass has archived it. An account of exactly that
// many is not left due.
func TestAPassThatLeavesAnAccountDueSaysSo(t *testing.T) {
	testserver.Parallel(t)
	const rounds, chunk = placement.ArchiveRounds, placement.EventChunk
	type afterPass struct {
		archived int64
		backlog  bool
	}
	tests := []struct {
		name   string
		events int
		passes []afterPass
	}{
		{
			name:   "more than its rounds",
			events: rounds*chunk + 300,
			// An account that filled its last chunk is due again at once.
			passes: []afterPass{{rounds * chunk, true}, {rounds*chunk + 300, false}, {rounds*chunk + 300, false}},
		},
		{name: "exactly its rounds", events: rounds * chunk, passes: []afterPass{{rounds * chunk, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newArchiveFixture(t)
			appendEvents(t, f.queue, "busy", tt.events)
			appendEvents(t, f.queue, "calm", 5)
			// A long delay: only a chunk's worth is due at once.
			archiver := f.archiver(nil, emq.LogHotTail{Count: 5, Age: time.Hour}, placement.WithArchiveDelay(time.Hour))
			for i, want := range tt.passes {
				pass(t, archiver)
				archived, err := f.queue.LogsArchived(context.Background(), []string{"busy", "calm"})
				if err != nil {
					t.Fatal(err)
				}
				if archived["busy"] != want.archived || archived["calm"] != 0 {
					t.Errorf("pass %d: archived busy %d, calm %d; want %d, 0", i+1, archived["busy"], archived["calm"], want.archived)
				}
				if got := placement.ArchiveBacklog(archiver); got != want.backlog {
					t.Errorf("pass %d: backlog %v, want %v", i+1, got, want.backlog)
				}
			}
			f.historyOf(t, "busy", int64(tt.events))
		})
	}
}
