package postgres_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestHandedBackCancelAllWaitsForTheWritesBeforeIt: the owner sequences
// alice's second bid before her cancel-all (the bid is decided, its write
// in flight) when GiveUp hands the cancel-all back. Like a handed-back
// order, the command waits for the owner's writes to land (released)
// before it cancels under the instrument's lock: at once, it would cancel
// before the second bid's row exists, and the bid sequenced before the
// cancel-all would rest after it.
func TestHandedBackCancelAllWaitsForTheWritesBeforeIt(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	s := owner(t, m, "BTC-USD", 1)
	var writes atomic.Int32
	entered1, hold1 := make(chan struct{}), make(chan struct{})
	entered2, hold2 := make(chan struct{}), make(chan struct{})
	var release2 sync.Once
	free2 := func() { release2.Do(func() { close(hold2) }) }
	t.Cleanup(free2)
	postgres.SetBeforeOwnedWrite(t, func() {
		switch writes.Add(1) {
		case 1:
			close(entered1)
			<-hold1
		case 2:
			close(entered2)
			<-hold2
		}
	})
	first := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "49000")
	second := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "49500")
	var wg sync.WaitGroup
	settle, joined := settleJoining(t, ctx, s, &wg)
	settle(first)
	<-entered1
	settle(second)
	waitOverlap(s)
	// The second bid is decided after the first, its write to follow; the
	// driver waits for the first write. The cancel-all joins behind both.
	var got postgres.CommandOutcome
	decided := make(chan struct{})
	go func() {
		defer close(decided)
		var err error
		got, err = s.Command(ctx, "CMD_1", orders.Command{Kind: orders.CommandCancelAll, Account: m.alice, Symbol: "BTC-USD"}, 1)
		if err != nil {
			t.Errorf("cancel all: %v", err)
		}
	}()
	<-joined
	gaveUp := make(chan struct{})
	go func() { defer close(gaveUp); s.GiveUp("BTC-USD") }()
	time.Sleep(200 * time.Millisecond) // GiveUp marks the book leaving
	close(hold1)
	<-entered2
	select {
	case <-decided:
		t.Errorf("the handed-back cancel-all was decided while the second bid's write was still held; canceled %v", got.Canceled)
	case <-time.After(time.Second):
	}
	free2()
	<-decided
	wg.Wait()
	<-gaveUp
	for _, id := range []string{first.ID, second.ID} {
		if row := mustOrder(t, m.db, id); row.status != "canceled" {
			t.Errorf("%s (sequenced before the cancel-all) is %s after it", id, row.state())
		}
	}
	mustAudit(t, m.db)
}
