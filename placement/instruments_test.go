package placement_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

// TestHaltReachesGatewaysByBroadcast: a gateway's instrument copy
// learns of a halt from the broadcast at once, long before its periodic
// refresh (which this test never runs).
func TestHaltReachesGatewaysByBroadcast(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := migratedPool(t)
	caches := coherence.New(testserver.StartRedis(t).Client(t))
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
	ctx := context.Background()
	db := migratedPool(t)
	srv := testserver.StartRedis(t)
	tracking, err := coherence.NewTracking(&redis.Options{Addr: srv.Addr}, coherence.TrackingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracking.Close() })
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
		deadline := time.Now().Add(time.Second)
		for tracking.Stats().Invalidations == before {
			if time.Now().After(deadline) {
				t.Fatal("the halt's invalidation never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		if err := instruments.Fresh(ctx); err != nil {
			t.Fatal(err)
		}
		if in, err := instruments.Lookup("ETH-USD"); err != nil || in.Halted != halt {
			t.Errorf("after the invalidation: halted %v, %v; want %v", in.Halted, err, halt)
		}
	}
}
