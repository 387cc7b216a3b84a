package placement_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestHaltReachesGatewaysByBroadcast: a gateway's instrument copy
// learns of a halt from the broadcast at once, long before its periodic
// refresh (which this test never runs).
func TestHaltReachesGatewaysByBroadcast(t *testing.T) {
	testserver.Parallel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := migratedPool(t)
	caches := coherence.New(testserver.QueueRedis(t))
	instruments, err := placement.LoadInstruments(ctx, postgres.NewInstruments(db))
	if err != nil {
		t.Fatal(err)
	}
	subscription, err := instruments.FollowBroadcasts(ctx, caches, func(err error) { t.Errorf("refresh: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	halted := func() bool {
		in, err := instruments.Lookup("ETH-USD")
		if err != nil {
			t.Fatal(err)
		}
		return in.Halted
	}
	for _, step := range []struct {
		halt bool
	}{{true}, {false}} {
		if err := control.New(db, caches).SetInstrumentHalted(ctx, "ETH-USD", step.halt); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for halted() != step.halt && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if halted() != step.halt {
			t.Fatalf("halted = %v after the broadcast, want %v", halted(), step.halt)
		}
	}
	if stats := subscription.Stats(); stats.Received < 2 {
		t.Errorf("subscription received %d broadcasts, want 2", stats.Received)
	}
	if err := control.New(db, caches).SetInstrumentHalted(ctx, "NOPE-USD", true); err == nil {
		t.Error("halting an unknown instrument succeeded")
	}
}

// countingInstruments counts the reads of the instruments table.
type countingInstruments struct {
	placement.InstrumentReader
	reads atomic.Int64
}

func (c *countingInstruments) ReadInstruments(ctx context.Context) (map[string]orders.Instrument, error) {
	c.reads.Add(1)
	return c.InstrumentReader.ReadInstruments(ctx)
}

// TestHaltReachesGatewaysByTracking: with changes tracked, the copy is
// reread on the first request after a halt's invalidation reached the
// gateway's local copy, without a broadcast or a refresh, and not on the
// requests before it.
func TestHaltReachesGatewaysByTracking(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	srv := testserver.SingleRedis(t, "tracks its keys")
	tracking := newTracking(t, srv)
	reader := &countingInstruments{InstrumentReader: postgres.NewInstruments(db)}
	instruments, err := placement.LoadInstruments(ctx, reader)
	if err != nil {
		t.Fatal(err)
	}
	instruments.TrackChanges(coherence.New(tracking.Client()))
	for range 3 {
		if err := instruments.Fresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if reads := reader.reads.Load(); reads != 2 {
		t.Errorf("%d reads of the table for the load and three requests, want 2: one at the load, one for the first stamp", reads)
	}
	for _, halt := range []bool{true, false} {
		before := tracking.Stats().Invalidations
		if err := control.New(db, coherence.New(srv.Client(t))).SetInstrumentHalted(ctx, "ETH-USD", halt); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Second, "the halt's invalidation arrives", func() bool { return tracking.Stats().Invalidations > before })
		if err := instruments.Fresh(ctx); err != nil {
			t.Fatal(err)
		}
		if in, err := instruments.Lookup("ETH-USD"); err != nil || in.Halted != halt {
			t.Errorf("after the invalidation: halted %v, %v; want %v", in.Halted, err, halt)
		}
	}
}

// stallingInstruments answers the first read, then stalls every read
// until its context ends (PostgreSQL hung, or its pool exhausted).
type stallingInstruments struct{ reads atomic.Int64 }

func (s *stallingInstruments) ReadInstruments(ctx context.Context) (map[string]orders.Instrument, error) {
	if s.reads.Add(1) == 1 {
		return map[string]orders.Instrument{"ETH-USD": {Symbol: "ETH-USD"}}, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// fixedStamp answers one stamp for every item.
type fixedStamp int64

func (f fixedStamp) Stamp(context.Context, string, string) (int64, error) { return int64(f), nil }

// TestFreshHoldsNoRequestWhilePostgresStalls: after the stamp moved, a
// PostgreSQL that does not answer holds one reread at a time, for at most
// its bound, and no request waits for another's: the copy answers them.
func TestFreshHoldsNoRequestWhilePostgresStalls(t *testing.T) {
	db := &stallingInstruments{}
	instruments, err := placement.LoadInstruments(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	instruments.TrackChanges(fixedStamp(7)) // a halt raised the stamp
	const deadline = 300 * time.Millisecond
	var requests sync.WaitGroup
	var slow atomic.Int64
	for i := range 6 {
		requests.Go(func() {
			time.Sleep(time.Duration(i) * 50 * time.Millisecond) // requests keep coming
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			began := time.Now()
			_ = instruments.Fresh(ctx)
			if time.Since(began) > deadline/2 {
				slow.Add(1)
			}
		})
	}
	requests.Wait()
	if slow.Load() > 1 || db.reads.Load() > 2 {
		t.Errorf("%d of 6 requests spent over half their deadline in Fresh, %d rereads of a stalled PostgreSQL; want one of each", slow.Load(), db.reads.Load()-1)
	}
}

// steppedInstruments answers each read with the table as it was when the
// read began, and holds the read numbered hold until release is closed.
type steppedInstruments struct {
	reads   atomic.Int64
	halted  atomic.Bool
	hold    int64
	held    chan struct{}
	release chan struct{}
}

func (s *steppedInstruments) ReadInstruments(ctx context.Context) (map[string]orders.Instrument, error) {
	read := s.reads.Add(1)
	table := map[string]orders.Instrument{"ETH-USD": {Symbol: "ETH-USD", Halted: s.halted.Load()}}
	if read == s.hold {
		close(s.held)
		<-s.release
	}
	return table, nil
}

// TestASlowRefreshNeverPutsBackAnOlderTable: a periodic refresh that read
// the table before a halt and finishes after Fresh reread it is dropped,
// so the halt stays in the copy.
func TestASlowRefreshNeverPutsBackAnOlderTable(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := &steppedInstruments{hold: 2, held: make(chan struct{}), release: make(chan struct{})}
	instruments, err := placement.LoadInstruments(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	instruments.TrackChanges(fixedStamp(1))
	refreshed := make(chan error, 1)
	go func() { refreshed <- instruments.Refresh(ctx) }() // the periodic refresh, read 2
	<-db.held
	db.halted.Store(true)
	if err := instruments.Fresh(ctx); err != nil { // read 3, after the halt
		t.Fatal(err)
	}
	close(db.release)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	if in, err := instruments.Lookup("ETH-USD"); err != nil || !in.Halted {
		t.Errorf("after the slow refresh: halted %v, %v; want the halt Fresh read", in.Halted, err)
	}
}

// ctxInstruments answers the table as it is now, failing a read whose
// context has ended (as pgx does).
type ctxInstruments struct{ halted atomic.Bool }

func (c *ctxInstruments) ReadInstruments(ctx context.Context) (map[string]orders.Instrument, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return map[string]orders.Instrument{"ETH-USD": {Symbol: "ETH-USD", Halted: c.halted.Load()}}, nil
}

// TestACanceledRequestDoesNotHoldOffTheHalt: the reread Fresh makes for a
// request whose client went away does not fail with that request's
// context, so no back-off answers the next requests from the copy before
// the halt.
func TestACanceledRequestDoesNotHoldOffTheHalt(t *testing.T) {
	testserver.Parallel(t)
	db := &ctxInstruments{}
	instruments, err := placement.LoadInstruments(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	instruments.TrackChanges(fixedStamp(0))
	if err := instruments.Fresh(context.Background()); err != nil { // the copy is at stamp 0
		t.Fatal(err)
	}
	db.halted.Store(true) // admin halt: PostgreSQL, then the stamp
	instruments.TrackChanges(fixedStamp(1))
	gone, cancel := context.WithCancel(context.Background())
	cancel() // the first request after the halt: its client hung up
	_ = instruments.Fresh(gone)
	_ = instruments.Fresh(context.Background()) // the next request, PostgreSQL fine
	if in, _ := instruments.Lookup("ETH-USD"); !in.Halted {
		t.Error("a request after the halt was checked against the copy before it: a canceled request's failed reread held off the reread")
	}
}
