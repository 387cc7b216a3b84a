package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestOwnerDecidesACancelBeforeTheOrdersBehindIt: the owner's queue holds,
// in this order, Y' (a redelivery of Y, which the batch after the held
// write A carries), O (bob's bid), a cancel of O and X (alice's ask that
// would fill O). The cancel keys its request by O's id, so it may not join
// O's batch; but X, behind it, must not be decided before it either: O is
// canceled unfilled and X rests, as deciding them one by one in arrival
// order leaves them.
func TestOwnerDecidesACancelBeforeTheOrdersBehindIt(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	s := owner(t, m, "BTC-USD", 1)
	entered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	postgres.SetBeforeOwnedWrite(t, func() {
		once.Do(func() { close(entered); <-hold }) // A's write waits for the test
	})
	var settling sync.WaitGroup
	settle, joined := settleJoining(t, ctx, s, &settling)

	settle(newOrder(m.alice, "BTC-USD", orders.Sell, "0.01", "53000")) // A
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("A's write never started")
	}
	y := newOrder(m.alice, "BTC-USD", orders.Sell, "0.01", "52000")
	overlaps := postgres.OwnedOverlaps(s)
	settle(y)
	waitFor(t, "Y decided while A's write is held", func() bool { return postgres.OwnedOverlaps(s) > overlaps })
	settle(y) // Y', a second lease's delivery
	o := newOrder(m.bob, "BTC-USD", orders.Buy, "0.01", "50000")
	settle(o)
	var canceled postgres.CommandOutcome
	settling.Go(func() {
		var err error
		if canceled, err = s.Command(ctx, "CMD_1", cancelOf(m.bob, o.ID), 1); err != nil {
			t.Errorf("cancel O: %v", err)
		}
	})
	<-joined
	x := newOrder(m.alice, "BTC-USD", orders.Sell, "0.01", "50000")
	settle(x)
	close(hold)
	settling.Wait()

	if len(canceled.Canceled) != 1 || canceled.Canceled[0] != o.ID {
		t.Errorf("the cancel canceled %v, want O %s", canceled.Canceled, o.ID)
	}
	if row := mustOrder(t, m.db, o.ID); row.status != "canceled" || row.filled != "0" {
		t.Errorf("O: %s, want canceled unfilled", row.state())
	}
	if row := mustOrder(t, m.db, x.ID); row.status != "open" {
		t.Errorf("X: %s, want open (O was canceled before it came)", row.state())
	}
	mustAudit(t, m.db)
}
