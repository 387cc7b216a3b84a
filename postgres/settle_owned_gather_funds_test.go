package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestOwnerGathersOnTheFundsAsTheyStand: an order gathered into the next
// batch (C) is decided on its account's funds as the write in flight (A)
// and the batch's own part before it (B) leave them, not as last read: M's
// USD row is a maker's row B moves unread (B fills M's ask R) and, in some
// cases, one A moves too (A is M's own bid, its hold). Each case's C is
// accepted or refused as settling one by one would, with no write refused
// and no book loaded again (a wrong view is decided wrongly, which the
// funds guard refuses: a reload, a second load counted).
func TestOwnerGathersOnTheFundsAsTheyStand(t *testing.T) {
	m := newMarket(t)
	for _, tc := range []struct {
		name string
		// funds are M's before R rests (R sells 0.1 BTC at 50000).
		funds map[string]string
		// a is the held write's order (M's when own); c M's gathered bid.
		a      func(m *market, maker string) orders.Order
		cPrice string
		want   string // C's status and reason
	}{{
		// M's USD: 0 read, +4995 from R's fill in B; C holds 0.099 ×
		// 50300 × 1.002 = 4989.66.
		name:  "a maker's proceeds, its row read after",
		funds: map[string]string{"BTC": "0.1"},
		a: func(m *market, _ string) orders.Order {
			return newOrder(m.alice, "BTC-USD", orders.Sell, "0.01", "51000")
		},
		cPrice: "50300",
		want:   "open",
	}, {
		// 100 − 49.098 (A's hold) + 4995 = 5045.902; C holds 0.1 × 50300
		// × 1.002 = 5040.06.
		name:  "proceeds and the write in flight's hold cover it",
		funds: map[string]string{"BTC": "0.1", "USD": "100"},
		a: func(m *market, maker string) orders.Order {
			return newOrder(maker, "BTC-USD", orders.Buy, "0.001", "49000")
		},
		cPrice: "50300",
		want:   "open",
	}, {
		// C holds 0.1 × 50400 × 1.002 = 5050.08 > 5045.902: short by
		// what A holds (without A's hold M would have 5095).
		name:  "the write in flight's hold makes it short",
		funds: map[string]string{"BTC": "0.1", "USD": "100"},
		a: func(m *market, maker string) orders.Order {
			return newOrder(maker, "BTC-USD", orders.Buy, "0.001", "49000")
		},
		cPrice: "50400",
		want:   "rejected insufficient_funds",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			maker := m.newCustomerWith(t, tc.funds)
			symbol := "BTC-USD"
			s := owner(t, m, symbol, time.Now().UnixNano())
			r := newOrder(maker, symbol, orders.Sell, "0.1", "50000")
			if err := s.Settle(ctx, r, 1); err != nil {
				t.Fatal(err)
			}
			loads := postgres.OwnedLoads(s)

			entered, hold := make(chan struct{}), make(chan struct{})
			var once sync.Once
			postgres.SetBeforeOwnedWrite(t, func() {
				once.Do(func() { close(entered); <-hold }) // A's write waits for the test
			})
			var settling sync.WaitGroup
			settle, _ := settleJoining(t, ctx, s, &settling)
			overlaps, extended := postgres.OwnedOverlaps(s), postgres.OwnedExtended(s)
			a := tc.a(m, maker)
			settle(a)
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("A's write never started")
			}
			b := newOrder(m.bob, symbol, orders.Buy, "0.1", "50000")
			settle(b)
			waitFor(t, "B decided while A's write is held", func() bool { return postgres.OwnedOverlaps(s) > overlaps })
			quantity := "0.1"
			if tc.funds["USD"] == "" {
				quantity = "0.099"
			}
			c := newOrder(maker, symbol, orders.Buy, quantity, tc.cPrice)
			settle(c)
			waitFor(t, "C decided into B's batch", func() bool { return postgres.OwnedExtended(s) == extended+1 })
			close(hold)
			settling.Wait()

			if row := mustOrder(t, m.db, r.ID); row.status != "filled" {
				t.Errorf("R: %s, want filled", row.state())
			}
			row := mustOrder(t, m.db, c.ID)
			got := row.status
			if row.reason != nil {
				got += " " + *row.reason
			}
			if got != tc.want {
				t.Errorf("C: %s, want %s", got, tc.want)
			}
			if got := postgres.OwnedLoads(s) - loads; got != 0 {
				t.Errorf("the owner loaded its book %d times more: a write was refused", got)
			}
			if xmin(t, m, b) != xmin(t, m, c) {
				t.Error("B and C committed apart")
			}
			// Cleared for the next case.
			s.GiveUp(symbol)
			for _, account := range []string{maker, m.alice, m.bob} {
				if _, err := m.settler.CancelAllResting(ctx, account, symbol); err != nil {
					t.Fatal(err)
				}
			}
			mustAudit(t, m.db)
		})
	}
}
