package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// cancelOf is the cancel command of the account's order on BTC-USD.
func cancelOf(account, orderID string) orders.Command {
	return orders.Command{Kind: orders.CommandCancel, Account: account, Symbol: "BTC-USD", OrderID: orderID}
}

// TestCommandCancelsARestingOrder: a cancel command, decided by the
// instrument's owner in its book or under the instrument's lock by a
// settler that owns nothing, cancels the resting order as CancelResting
// does: the row canceled with no reason, the hold back to available in
// one version of the balance, no ledger transaction, one order.canceled
// event, relayed after the commit. The owner loads no book again. A
// second cancel, or another account's, cancels nothing.
func TestCommandCancelsARestingOrder(t *testing.T) {
	for _, owned := range []bool{true, false} {
		t.Run(fmt.Sprintf("owned=%v", owned), func(t *testing.T) {
			ctx := context.Background()
			m := newMarket(t)
			s := m.settler
			if owned {
				s = postgres.NewSettler(m.db, m.relay, slog.New(slog.DiscardHandler))
				if err := s.TakeOver(ctx, "BTC-USD", 1); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.GiveUp("BTC-USD") })
			}
			settle := func(order orders.Order) {
				t.Helper()
				if err := s.Settle(ctx, order, 1); err != nil {
					t.Fatal(err)
				}
			}
			bid := newOrder(m.alice, "BTC-USD", orders.Buy, "1", "50000") // holds 50100
			settle(bid)
			settle(newOrder(m.bob, "BTC-USD", orders.Sell, "0.4", "49000")) // fills 0.4 at 50000
			before := balanceOf(t, m.db, m.alice, "USD")

			if got, err := s.Command(ctx, "CMD_1", cancelOf(m.bob, bid.ID), 1); err != nil || len(got.Canceled) != 0 {
				t.Errorf("bob cancels alice's order: %+v, %v; want nothing canceled", got, err)
			}
			got, err := s.Command(ctx, "CMD_2", cancelOf(m.alice, bid.ID), 1)
			if err != nil || !slices.Equal(got.Canceled, []string{bid.ID}) {
				t.Fatalf("cancel: %+v, %v", got, err)
			}
			if row := mustOrder(t, m.db, bid.ID); row.state() != "canceled(<nil>) filled 0.4 notional 20000 fees 20 hold 0" || row.sequence != nil {
				t.Errorf("the bid is %s", row.state())
			}
			after := balanceOf(t, m.db, m.alice, "USD")
			if after.available != "79980" || after.held != "0" || after.version != before.version+1 {
				t.Errorf("alice's USD after the cancel %+v (before %+v)", after, before)
			}
			for _, e := range entriesOf(t, m.db, bid.ID) {
				if e.kind != "trade" {
					t.Errorf("the bid has a %s entry %+v", e.kind, e)
				}
			}
			calls, committed := m.relay.Calls()
			if !committed[len(committed)-1] {
				t.Errorf("the cancel's outbox was relayed before its commit")
			}
			last, events := splitEvents(t, calls[len(calls)-1])
			if got, want := announced(t, last), map[string]int64{orders.BalanceName(m.alice, "USD"): after.version}; len(last) != 1 || !maps.Equal(got, want) {
				t.Errorf("the cancel relayed %v, want one row announcing %v", last, want)
			}
			if want := map[string][]string{orders.EventsName(m.alice, "BTC-USD"): {"order.canceled " + bid.ID}}; !maps.EqualFunc(events, want, slices.Equal) {
				t.Errorf("the cancel's events %v, want %v", events, want)
			}
			if got, err := s.Command(ctx, "CMD_3", cancelOf(m.alice, bid.ID), 1); err != nil || len(got.Canceled) != 0 {
				t.Errorf("a second cancel: %+v, %v; want nothing canceled", got, err)
			}
			// The owner's book is still PostgreSQL's: a bid at the
			// canceled one's price rests, and an ask fills it alone.
			again := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "50000")
			settle(again)
			ask := newOrder(m.bob, "BTC-USD", orders.Sell, "0.2", "50000")
			settle(ask)
			if row := mustOrder(t, m.db, ask.ID); row.status != "partially_filled" || row.filled != "0.1" {
				t.Errorf("the ask after the cancel is %s", row.state())
			}
			if owned {
				if loads := postgres.OwnedLoads(s); loads != 1 {
					t.Errorf("the owner loaded its book %d times, want the take-over's only", loads)
				}
			}
			mustAudit(t, m.db)
		})
	}
}

// TestCommandCancelsAllOfAnAccount: a cancel-all command cancels the
// account's resting orders on its instrument, both sides, and leaves the
// other instruments' and accounts' alone.
func TestCommandCancelsAllOfAnAccount(t *testing.T) {
	for _, owned := range []bool{true, false} {
		t.Run(fmt.Sprintf("owned=%v", owned), func(t *testing.T) {
			ctx := context.Background()
			m := newMarket(t)
			a := m.place(t, m.alice, orders.Buy, "0.1", "49000")
			b := m.place(t, m.alice, orders.Sell, "0.1", "51000")
			eth := newOrder(m.alice, "ETH-USD", orders.Buy, "1", "2900")
			m.settle(t, eth, 1)
			bobs := m.place(t, m.bob, orders.Sell, "0.1", "52000")
			s := m.settler
			if owned {
				s = owner(t, m, "BTC-USD", 1)
			}
			all := orders.Command{Kind: orders.CommandCancelAll, Account: m.alice, Symbol: "BTC-USD"}
			got, err := s.Command(ctx, "CMD_1", all, 1)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got.Canceled)
			if want := []string{a.ID, b.ID}; !slices.Equal(got.Canceled, want) {
				t.Errorf("canceled %v, want %v", got.Canceled, want)
			}
			for id, status := range map[string]string{a.ID: "canceled", b.ID: "canceled", eth.ID: "open", bobs.ID: "open"} {
				if row := mustOrder(t, m.db, id); row.status != status {
					t.Errorf("%s is %s, want %s", id, row.state(), status)
				}
			}
			if got := balanceOf(t, m.db, m.alice, "BTC"); got.held != "0" {
				t.Errorf("alice's BTC %+v", got)
			}
			if got, err := s.Command(ctx, "CMD_2", all, 1); err != nil || len(got.Canceled) != 0 {
				t.Errorf("a second cancel-all: %+v, %v", got, err)
			}
			if owned {
				if loads := postgres.OwnedLoads(s); loads != 1 {
					t.Errorf("the owner loaded its book %d times, want the take-over's only", loads)
				}
			}
			mustAudit(t, m.db)
		})
	}
}

// TestOwnerDecidesCancelsAmongFills: cancels of resting asks race takers
// that fill them, all through the owner; every ask ends filled or canceled
// (each cancel of a filled one cancels nothing), nothing stays held, the
// audit is clean, and the owner never loads its book again: the cancels
// are its own decisions, not changes behind its back.
func TestOwnerDecidesCancelsAmongFills(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	s := owner(t, m, "BTC-USD", 1)
	var asks []orders.Order
	for i := range 40 {
		ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.02", fmt.Sprintf("%d", 50000+10*(i%5)))
		if err := s.Settle(ctx, ask, 1); err != nil {
			t.Fatal(err)
		}
		asks = append(asks, ask)
	}
	var wg sync.WaitGroup
	for range 30 {
		bid := withTIF(newOrder(m.bob, "BTC-USD", orders.Buy, "0.03", "50050"), orders.IOC)
		wg.Go(func() {
			if err := s.Settle(ctx, bid, 1); err != nil {
				t.Errorf("settle %s: %v", bid.ID, err)
			}
		})
	}
	var mu sync.Mutex
	canceled := map[string]bool{}
	for i, ask := range asks {
		wg.Go(func() {
			got, err := s.Command(ctx, fmt.Sprintf("CMD_%d", i), cancelOf(m.alice, ask.ID), 1)
			if err != nil {
				t.Errorf("cancel %s: %v", ask.ID, err)
			}
			mu.Lock()
			for _, id := range got.Canceled {
				canceled[id] = true
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, ask := range asks {
		row := mustOrder(t, m.db, ask.ID)
		if want := map[bool]string{true: "canceled", false: "filled"}[canceled[ask.ID]]; row.status != want {
			t.Errorf("ask %s is %s, want %s", ask.ID, row.state(), want)
		}
	}
	if got := balanceOf(t, m.db, m.alice, "BTC"); got.held != "0" {
		t.Errorf("alice still holds %s BTC", got.held)
	}
	if loads := postgres.OwnedLoads(s); loads != 1 {
		t.Errorf("the owner loaded its book %d times, want the take-over's only", loads)
	}
	mustAudit(t, m.db)
}

// TestCommandOfAnUnknownKindIsUnsettleable: no retry decides a command
// kind the settler does not know.
func TestCommandOfAnUnknownKindIsUnsettleable(t *testing.T) {
	m := newMarket(t)
	s := owner(t, m, "BTC-USD", 1)
	for name, settler := range map[string]*postgres.Settler{"owned": s, "locked": m.settler} {
		_, err := settler.Command(context.Background(), "CMD_1",
			orders.Command{Kind: "amend", Account: m.alice, Symbol: "BTC-USD", OrderID: "ORD_X"}, 1)
		if !errors.Is(err, postgres.ErrUnsettleable) {
			t.Errorf("%s: %v, want ErrUnsettleable", name, err)
		}
	}
}

// TestOwnerCancelsOrdersOfTheBatchesInFlight: while the write that rests
// alice's first bid is held and a batch of bob's is decided behind it, her
// second bid and a cancel-all of hers join the batch after, together: the
// cancel-all cancels the first bid (rested by a batch before, its row
// updated) and the second (rested by the order before it in its own
// batch, its row inserted canceled). Nothing stays held, and the owner
// loads nothing again.
func TestOwnerCancelsOrdersOfTheBatchesInFlight(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	s := owner(t, m, "BTC-USD", 1)
	entered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	postgres.SetBeforeOwnedWrite(t, func() {
		once.Do(func() { close(entered); <-hold })
	})
	first := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "49000")
	bobs := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "48000")
	second := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "49500")
	var wg sync.WaitGroup
	settle, joined := settleJoining(t, ctx, s, &wg)
	settle(first)
	<-entered
	settle(bobs)
	waitOverlap(s)
	// The driver now waits for the held write: what joins goes together.
	settle(second)
	var got postgres.CommandOutcome
	wg.Go(func() {
		var err error
		got, err = s.Command(ctx, "CMD_1", orders.Command{Kind: orders.CommandCancelAll, Account: m.alice, Symbol: "BTC-USD"}, 1)
		if err != nil {
			t.Errorf("cancel all: %v", err)
		}
	})
	<-joined
	close(hold)
	wg.Wait()
	want := []string{first.ID, second.ID}
	slices.Sort(got.Canceled)
	slices.Sort(want)
	if !slices.Equal(got.Canceled, want) {
		t.Errorf("canceled %v, want %v", got.Canceled, want)
	}
	for _, id := range want {
		if row := mustOrder(t, m.db, id); row.state() != "canceled(<nil>) filled 0 notional 0 fees 0 hold 0" || row.sequence != nil {
			t.Errorf("%s is %s", id, row.state())
		}
	}
	if row := mustOrder(t, m.db, bobs.ID); row.status != "open" {
		t.Errorf("bob's bid is %s", row.state())
	}
	if got := balanceOf(t, m.db, m.alice, "USD"); got.available != "100000" || got.held != "0" {
		t.Errorf("alice's USD %+v", got)
	}
	if loads := postgres.OwnedLoads(s); loads != 1 {
		t.Errorf("the owner loaded its book %d times, want the take-over's only", loads)
	}
	mustAudit(t, m.db)
}
