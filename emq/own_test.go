package emq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// ownSpan is one run of an ownership handler: from its start until its
// context ended, the time its worker acted as the queue's owner.
type ownSpan struct {
	queue, worker string
	token         int64
	start, end    time.Time
	cause         error
}

// ownTracker records the handlers of every worker in a test, and every
// moment two of them owned one queue at once.
type ownTracker struct {
	mu       sync.Mutex
	active   map[string]*ownSpan // queue → the handler running for it
	spans    []*ownSpan
	lastSeen map[string]int64 // queue → the last token a handler got
	overlaps []string
}

func newOwnTracker(t testing.TB) *ownTracker {
	t.Helper()
	tracker := &ownTracker{active: make(map[string]*ownSpan), lastSeen: make(map[string]int64)}
	t.Cleanup(func() {
		tracker.mu.Lock()
		defer tracker.mu.Unlock()
		for _, overlap := range tracker.overlaps {
			t.Error(overlap)
		}
	})
	return tracker
}

// handler acts as the owner until its context ends.
func (tr *ownTracker) handler(worker string) emq.OwnHandler {
	return func(ctx context.Context, owned emq.Owned) error {
		span := &ownSpan{queue: owned.Queue.Name(), worker: worker, token: owned.Token, start: time.Now()}
		tr.mu.Lock()
		if other := tr.active[span.queue]; other != nil {
			tr.overlaps = append(tr.overlaps, fmt.Sprintf("%s owned by %s (token %d) while %s (token %d) still did",
				span.queue, worker, span.token, other.worker, other.token))
		}
		if span.token <= tr.lastSeen[span.queue] {
			tr.overlaps = append(tr.overlaps, fmt.Sprintf("%s: token %d after %d", span.queue, span.token, tr.lastSeen[span.queue]))
		}
		tr.lastSeen[span.queue] = span.token
		tr.active[span.queue] = span
		tr.spans = append(tr.spans, span)
		tr.mu.Unlock()

		<-ctx.Done()

		tr.mu.Lock()
		span.end, span.cause = time.Now(), context.Cause(ctx)
		if tr.active[span.queue] == span {
			delete(tr.active, span.queue)
		}
		tr.mu.Unlock()
		return nil
	}
}

// owners says who owns each queue now.
func (tr *ownTracker) owners() map[string]string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	owners := make(map[string]string, len(tr.active))
	for queue, span := range tr.active {
		owners[queue] = span.worker
	}
	return owners
}

// holdings counts the queues each worker owns now.
func (tr *ownTracker) holdings() map[string]int {
	counts := make(map[string]int)
	for _, worker := range tr.owners() {
		counts[worker]++
	}
	return counts
}

// ended lists the worker's spans that ended after a moment, with their
// causes.
func (tr *ownTracker) ended(worker string, after time.Time) []*ownSpan {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var spans []*ownSpan
	for _, span := range tr.spans {
		if span.worker == worker && span.end.After(after) {
			spans = append(spans, span)
		}
	}
	return spans
}

// firstStart is when the worker's first span after a moment started; zero
// when none did.
func (tr *ownTracker) firstStart(worker string, after time.Time) time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, span := range tr.spans {
		if span.worker == worker && span.start.After(after) {
			return span.start
		}
	}
	return time.Time{}
}

// sample compares, until the test ends, what Redis holds with what the
// handlers believe: a handler that ran from before a read of a queue's
// lease until after it must be the holder the read found, under its token.
func (tr *ownTracker) sample(t testing.TB, rdb redis.UniversalClient, queues []string) {
	t.Helper()
	client, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	samples := 0
	t.Cleanup(func() {
		cancel()
		<-done
		t.Logf("%d samples of the leases", samples)
	})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			for _, name := range queues {
				tr.mu.Lock()
				before := tr.active[name]
				tr.mu.Unlock()
				state, err := client.Queue(name).Ownership().Owner(ctx)
				if err != nil {
					continue // the test ended
				}
				tr.mu.Lock()
				if after := tr.active[name]; before != nil && after == before &&
					(!state.Held || state.Token != before.token || !strings.HasPrefix(state.Holder, before.worker+"/")) {
					tr.overlaps = append(tr.overlaps, fmt.Sprintf("%s: %s acts as the owner under token %d, but Redis holds %+v",
						name, before.worker, before.token, state))
				}
				tr.mu.Unlock()
			}
			samples++
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

func (tr *ownTracker) started() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.spans)
}

// ownWorker is a Client.Own running on a Redis client of its own, so that a
// test can cut it off as a dead process would be.
type ownWorker struct {
	name   string
	rdb    redis.UniversalClient
	cancel context.CancelFunc
	result chan error
}

// ownQueueNames are the queues the spreading tests own.
func ownQueueNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("instrument-%d", i)
	}
	return names
}

// startOwnWorker runs Own as the worker name, on a new client to base's
// server, until the test ends.
func startOwnWorker(t testing.TB, base redis.UniversalClient, name string, queues []string, tracker *ownTracker, opts emq.OwnOptions) *ownWorker {
	t.Helper()
	var rdb redis.UniversalClient
	switch base := base.(type) {
	case *redis.ClusterClient:
		options := *base.Options()
		rdb = redis.NewClusterClient(&options)
	case *redis.Client:
		options := *base.Options()
		rdb = redis.NewClient(&options)
	default:
		t.Fatalf("unexpected client %T", base)
	}
	client, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	owned := make([]*emq.Queue, len(queues))
	for i, queue := range queues {
		owned[i] = client.Queue(queue)
	}
	logger, _ := workerLogger(t)
	opts.Worker, opts.Logger = name, logger.With("test_worker", name)
	ctx, cancel := context.WithCancel(context.Background())
	worker := &ownWorker{name: name, rdb: rdb, cancel: cancel, result: make(chan error, 1)}
	go func() { worker.result <- client.Own(ctx, owned, tracker.handler(name), opts) }()
	t.Cleanup(func() {
		worker.stop(t)
		_ = rdb.Close()
	})
	return worker
}

// stop ends the worker's Own as a shutdown does.
func (w *ownWorker) stop(t testing.TB) {
	t.Helper()
	w.cancel()
	select {
	case err, ok := <-w.result:
		if ok && err != nil {
			t.Errorf("%s: Own = %v", w.name, err)
		}
		if ok {
			close(w.result)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s: Own did not return", w.name)
	}
}

// kill cuts the worker off from Redis, as a dead process is: it neither
// extends nor releases its leases, nor beats in the roster.
func (w *ownWorker) kill() { _ = w.rdb.Close() }

// settled waits until the holdings are want (worker → queues owned) and
// stay so for a while.
func settled(t testing.TB, tracker *ownTracker, within, stable time.Duration, what string, want func(map[string]int) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		eventually(t, time.Until(deadline), what, func() bool { return want(tracker.holdings()) })
		started := tracker.started()
		time.Sleep(stable)
		if want(tracker.holdings()) && tracker.started() == started {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within %v: %s; holdings %v", within, what, tracker.holdings())
		}
	}
}

func evenly(workers []string, queues int) func(map[string]int) bool {
	return func(holdings map[string]int) bool {
		total := 0
		for _, worker := range workers {
			n := holdings[worker]
			if n < queues/len(workers) || n > (queues+len(workers)-1)/len(workers) {
				return false
			}
			total += n
		}
		return total == queues
	}
}

const (
	ownLease = time.Second
	ownGrace = 500 * time.Millisecond
)

// TestOwnSpreadsQueuesOverWorkers: three workers over six queues end with
// two each, and stay so.
func TestOwnSpreadsQueuesOverWorkers(t *testing.T) {
	_, rdb := newQueue(t)
	tracker := newOwnTracker(t)
	queues := ownQueueNames(6)
	tracker.sample(t, rdb, queues)
	workers := []string{"a", "b", "c"}
	for _, name := range workers {
		startOwnWorker(t, rdb, name, queues, tracker, emq.OwnOptions{Lease: ownLease, Grace: ownGrace})
	}
	settled(t, tracker, 10*time.Second, 2*ownLease, "two queues each", evenly(workers, len(queues)))

}

// TestOwnWorkersStartedTogetherTakeTheirShares: four workers over three
// queues, started together or one of them an eighth of a poll after the
// others, see each other before any takes a share: the first owners hold
// one queue each, so none has to be handed over later. And they take them
// after a few short beats rather than a poll: the first owner of every
// queue runs before three quarters of a poll passed (a joining worker
// beats every fifth of a poll until the roster holds still).
func TestOwnWorkersStartedTogetherTakeTheirShares(t *testing.T) {
	const poll = 2 * time.Second
	for _, tc := range []struct {
		name string
		late time.Duration
	}{{"together", 0}, {"one an eighth of a poll later", poll / 8}} {
		t.Run(tc.name, func(t *testing.T) {
			_, rdb := newQueue(t)
			tracker := newOwnTracker(t)
			queues := ownQueueNames(3)
			options := emq.OwnOptions{Lease: 3 * poll, Poll: poll}
			started := time.Now()
			workers := []string{"a", "b", "c", "d"}
			for _, name := range workers[:3] {
				startOwnWorker(t, rdb, name, queues, tracker, options)
			}
			time.Sleep(tc.late)
			startOwnWorker(t, rdb, "d", queues, tracker, options)
			eventually(t, 2*poll, "every queue owned", func() bool { return len(tracker.owners()) == len(queues) })
			if took := time.Since(started); took > 3*poll/4 {
				t.Errorf("every queue had its first owner %v after the workers started; want under %v (poll %v)",
					took.Round(time.Millisecond), 3*poll/4, poll)
			}
			for worker, n := range tracker.holdings() {
				if n > 1 {
					t.Errorf("%s took %d queues before it saw the others; want 1 each (%v)", worker, n, tracker.holdings())
				}
			}
		})
	}
}

// TestOwnWorkersStartedApartTakeNoMoreThanTheirShares: four workers over
// eight queues, each started a quarter of a poll after the one before (more
// than a short beat, so the first is alone in the roster for a while):
// none holds more than its share of four workers, two, at any moment
// before every queue is owned, and none has to hand one over. A joining
// worker takes one queue a short beat until a poll passed since its first,
// not its whole share of the roster it saw (eight, alone).
func TestOwnWorkersStartedApartTakeNoMoreThanTheirShares(t *testing.T) {
	const poll = time.Second
	_, rdb := newQueue(t)
	tracker := newOwnTracker(t)
	queues := ownQueueNames(8)
	options := emq.OwnOptions{Lease: 3 * poll, Poll: poll}
	most := 2
	// watch reports a worker over its share until the moment passes.
	watch := func(until time.Time) {
		for time.Now().Before(until) {
			for worker, n := range tracker.holdings() {
				if n > most {
					most = n
					t.Errorf("%s holds %d queues; want at most 2 (%v)", worker, n, tracker.holdings())
				}
			}
			if len(tracker.owners()) == len(queues) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	start := time.Now()
	for i, name := range []string{"a", "b", "c", "d"} {
		watch(start.Add(time.Duration(i) * poll / 4))
		startOwnWorker(t, rdb, name, queues, tracker, options)
	}
	watch(time.Now().Add(3 * poll))
	if owned := len(tracker.owners()); owned != len(queues) {
		t.Fatalf("%d of %d queues owned %v after the last worker started", owned, len(queues), 3*poll)
	}
	if started := tracker.started(); started != len(queues) {
		t.Errorf("%d ownerships taken for %d queues; want one each, none handed over", started, len(queues))
	}
}

// TestOwnTakesOverADeadWorkersQueues: the queues of a worker that stops
// answering are owned by the others within lease + 1 s, never while it
// still counts itself their owner.
func TestOwnTakesOverADeadWorkersQueues(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out leases")
	}
	_, rdb := newQueue(t)
	tracker := newOwnTracker(t)
	queues := ownQueueNames(6)
	tracker.sample(t, rdb, queues)
	workers := []string{"a", "b", "c"}
	running := make(map[string]*ownWorker)
	for _, name := range workers {
		running[name] = startOwnWorker(t, rdb, name, queues, tracker, emq.OwnOptions{Lease: ownLease, Grace: ownGrace})
	}
	settled(t, tracker, 10*time.Second, ownLease, "two queues each", evenly(workers, len(queues)))
	var orphans []string
	for queue, owner := range tracker.owners() {
		if owner == "c" {
			orphans = append(orphans, queue)
		}
	}

	running["c"].kill()
	killedAt := time.Now()
	eventually(t, ownLease+time.Second, "the dead worker's queues owned by the others", func() bool {
		owners := tracker.owners()
		for _, queue := range orphans {
			if owner := owners[queue]; owner != "a" && owner != "b" {
				return false
			}
		}
		return true
	})
	t.Logf("the dead worker's %d queues were owned by the others %v after it died (lease %v)",
		len(orphans), time.Since(killedAt).Round(time.Millisecond), ownLease)
	settled(t, tracker, 5*time.Second, ownLease, "three queues each", evenly(workers[:2], len(queues)))

	// The dead worker stopped acting as their owner on its own clock, for
	// want of extensions, before the others took over.
	for _, span := range tracker.ended("c", killedAt) {
		if !errors.Is(span.cause, emq.ErrLeaseLost) || errors.Is(span.cause, emq.ErrStale) {
			t.Errorf("%s: the dead worker's handler ended with %v; want ErrLeaseLost for want of extensions", span.queue, span.cause)
		}
		if took := span.end.Sub(killedAt); took > ownLease {
			t.Errorf("%s: the dead worker stopped %v after it was cut off; want within the lease %v", span.queue, took, ownLease)
		}
	}
}

// TestOwnGivesANewWorkerItsShare: a worker joining three that own two
// queues each gets a share after a grace, taken from one of the most
// loaded, which hands it over; and a stopping worker hands its share to
// the others.
func TestOwnGivesANewWorkerItsShare(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out graces")
	}
	_, rdb := newQueue(t)
	tracker := newOwnTracker(t)
	queues := ownQueueNames(6)
	tracker.sample(t, rdb, queues)
	workers := []string{"a", "b", "c"}
	running := make(map[string]*ownWorker)
	for _, name := range workers {
		running[name] = startOwnWorker(t, rdb, name, queues, tracker, emq.OwnOptions{Lease: ownLease, Grace: ownGrace})
	}
	settled(t, tracker, 10*time.Second, ownLease, "two queues each", evenly(workers, len(queues)))

	workers = append(workers, "d")
	joinedAt := time.Now()
	running["d"] = startOwnWorker(t, rdb, "d", queues, tracker, emq.OwnOptions{Lease: ownLease, Grace: ownGrace})
	settled(t, tracker, 10*time.Second, 2*ownLease, "one or two queues each", evenly(workers, len(queues)))
	t.Logf("the new worker owned its share %v after it joined (grace %v)",
		tracker.firstStart("d", joinedAt).Sub(joinedAt).Round(time.Millisecond), ownGrace)
	handedOver := 0
	for _, name := range workers[:3] {
		for _, span := range tracker.ended(name, joinedAt) {
			if !errors.Is(span.cause, emq.ErrHandOver) {
				t.Errorf("%s: %s's handler ended with %v; want ErrHandOver", span.queue, name, span.cause)
			}
			handedOver++
		}
	}
	if handedOver != 1 {
		t.Errorf("%d ownerships handed over; want 1, to the new worker", handedOver)
	}

	// A stopping worker hands its queues over at once, without waiting
	// for its leases to run out.
	stoppedAt := time.Now()
	running["a"].stop(t)
	settled(t, tracker, 2*ownLease, 0, "two queues each without a", evenly([]string{"b", "c", "d"}, len(queues)))
	t.Logf("a stopping worker's queues were owned by the others %v after it stopped", time.Since(stoppedAt).Round(time.Millisecond))
}

// TestOwnRefusesBadOptions: what Own cannot run with.
func TestOwnRefusesBadOptions(t *testing.T) {
	testserver.Parallel(t)
	queue, rdb := newQueue(t)
	client, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	handler := func(ctx context.Context, _ emq.Owned) error { <-ctx.Done(); return nil }
	tests := []struct {
		name    string
		queues  []*emq.Queue
		handler emq.OwnHandler
		opts    emq.OwnOptions
	}{
		{"no worker", []*emq.Queue{client.Queue("q")}, handler, emq.OwnOptions{}},
		{"no handler", []*emq.Queue{client.Queue("q")}, nil, emq.OwnOptions{Worker: "w"}},
		{"no queues", nil, handler, emq.OwnOptions{Worker: "w"}},
		{"a queue twice", []*emq.Queue{client.Queue("q"), client.Queue("q")}, handler, emq.OwnOptions{Worker: "w"}},
		{"another client's queue", []*emq.Queue{queue}, handler, emq.OwnOptions{Worker: "w"}},
		{"a margin as long as the lease", []*emq.Queue{client.Queue("q")}, handler,
			emq.OwnOptions{Worker: "w", Lease: time.Second, Margin: time.Second}},
		{"a poll over half the lease", []*emq.Queue{client.Queue("q")}, handler,
			emq.OwnOptions{Worker: "w", Lease: time.Second, Poll: 600 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := client.Own(context.Background(), tt.queues, tt.handler, tt.opts); err == nil {
				t.Error("Own ran")
			}
		})
	}
}

// TestOwnTakesAFencedQueueAgainAboveTheFloor: a handler that finds a store
// fenced at a token above its own returns a *FencedError, and Own runs it
// again at once under a token above that floor, with no Grace in between.
func TestOwnTakesAFencedQueueAgainAboveTheFloor(t *testing.T) {
	_, rdb := newQueue(t)
	client, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	logger, _ := workerLogger(t)
	const floor = 40
	var mu sync.Mutex
	var tokens []int64
	var fencedAt time.Time
	handler := func(ctx context.Context, owned emq.Owned) error {
		mu.Lock()
		tokens = append(tokens, owned.Token)
		first := len(tokens) == 1
		if first {
			fencedAt = time.Now()
		}
		mu.Unlock()
		if first && owned.Token <= floor {
			return &emq.FencedError{Floor: floor, Err: errors.New("the store saw token 40")}
		}
		<-ctx.Done()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- client.Own(ctx, []*emq.Queue{client.Queue("fenced")}, handler,
			emq.OwnOptions{Worker: "w", Lease: ownLease, Grace: 10 * time.Second, Logger: logger})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Own = %v", err)
		}
	})
	var second time.Time
	eventually(t, 5*time.Second, "the handler runs again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(tokens) >= 2 && second.IsZero() {
			second = time.Now()
		}
		return len(tokens) >= 2
	})
	mu.Lock()
	defer mu.Unlock()
	if tokens[1] <= floor {
		t.Errorf("tokens %v: the second is not above the floor %d", tokens, floor)
	}
	// Well under the Grace a handler's own return leaves the queue for.
	if waited := second.Sub(fencedAt); waited > 2*time.Second {
		t.Errorf("taken again after %v", waited)
	}
}
