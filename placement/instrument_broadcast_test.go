package placement_test

import (
	"context"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/internal/testserver"
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
