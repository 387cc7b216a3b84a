package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestOwnerDecidesArrivalsIntoTheNextBatch: while the first write (A) is
// held back, B is decided as the next batch, and C and D, arriving after
// it was decided, are decided on top of it, into it: B, C and D commit in
// one transaction, after A's, in the order they arrived (their sequences,
// the fills, the client order id B holds), also when a write fails on a
// resting order canceled behind the owner's back: the enlarged batch's own
// (it is decided again, whole, on the book loaded again) or the one before
// it (A's, decided again first, then B, C and D behind it).
func TestOwnerDecidesArrivalsIntoTheNextBatch(t *testing.T) {
	m := newMarket(t)
	sameClientID := func(o, of orders.Order) orders.Order { o.ClientOrderID = of.ClientOrderID; return o }
	for _, tc := range []struct {
		name string
		// resting rests, committed, before A; canceled behind the owner's
		// back while A's write is held, when cancel is set.
		resting   func(m *market) orders.Order
		cancel    bool
		a, b      func(m *market) orders.Order
		c, d      func(m *market, b orders.Order) orders.Order
		want      map[string]string // by order: A, B, C, D, R (resting)
		wantLoads int64
		// aWithB: A's row was last written by B's transaction (filled by
		// it, or its own write failed).
		aWithB bool
	}{{
		name: "decided on top of the next batch",
		a:    func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000") },
		b:    func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.05", "50000") },
		c: func(m *market, _ orders.Order) orders.Order {
			return newOrder(m.bob, "BTC-USD", orders.Buy, "0.05", "50000")
		},
		d: func(m *market, b orders.Order) orders.Order {
			return sameClientID(newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "49000"), b)
		},
		want: map[string]string{"A": "filled 0.1", "B": "filled 0.05", "C": "filled 0.05",
			"D": "rejected duplicate_client_order_id 0"},
		wantLoads: 1,
		aWithB:    true,
	}, {
		name:    "the enlarged batch's write refused",
		resting: func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000") },
		cancel:  true,
		a:       func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "51000") },
		b:       func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.01", "49000") },
		c: func(m *market, _ orders.Order) orders.Order {
			return newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000") // fills R, canceled since
		},
		d: func(m *market, b orders.Order) orders.Order {
			return sameClientID(newOrder(m.bob, "BTC-USD", orders.Buy, "0.01", "49000"), b)
		},
		want: map[string]string{"R": "canceled 0", "A": "open 0", "B": "open 0", "C": "open 0",
			"D": "rejected duplicate_client_order_id 0"},
		wantLoads: 2,
	}, {
		name:    "the write before refused",
		resting: func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000") },
		cancel:  true,
		a:       func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000") },
		b:       func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.01", "49000") },
		c: func(m *market, _ orders.Order) orders.Order {
			return newOrder(m.alice, "BTC-USD", orders.Sell, "0.05", "50000") // fills A once A rests
		},
		d: func(m *market, b orders.Order) orders.Order {
			return sameClientID(newOrder(m.bob, "BTC-USD", orders.Buy, "0.01", "49000"), b)
		},
		want: map[string]string{"R": "canceled 0", "A": "partially_filled 0.05", "B": "open 0", "C": "filled 0.05",
			"D": "rejected duplicate_client_order_id 0"},
		wantLoads: 2,
		aWithB:    true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			for _, account := range []string{m.alice, m.bob} {
				if _, err := m.settler.CancelAllResting(ctx, account, "BTC-USD"); err != nil {
					t.Fatal(err)
				}
			}
			s := owner(t, m, "BTC-USD", time.Now().UnixNano())
			placed := map[string]orders.Order{}
			if tc.resting != nil {
				placed["R"] = tc.resting(m)
				if err := s.Settle(ctx, placed["R"], 1); err != nil {
					t.Fatal(err)
				}
			}
			entered, hold := make(chan struct{}), make(chan struct{})
			var once sync.Once
			postgres.SetBeforeOwnedWrite(t, func() {
				once.Do(func() { close(entered); <-hold }) // A's write waits for the test
			})
			var settling sync.WaitGroup
			settle, _ := settleJoining(t, ctx, s, &settling)
			overlaps, extended := postgres.OwnedOverlaps(s), postgres.OwnedExtended(s)
			placed["A"] = tc.a(m)
			settle(placed["A"])
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("A's write never started")
			}
			if tc.cancel {
				if _, err := m.settler.CancelResting(ctx, placed["R"].Account, placed["R"].ID); err != nil {
					t.Fatal(err)
				}
			}
			placed["B"] = tc.b(m)
			settle(placed["B"])
			waitFor(t, "B decided while A's write is held", func() bool { return postgres.OwnedOverlaps(s) > overlaps })
			placed["C"] = tc.c(m, placed["B"])
			settle(placed["C"])
			waitFor(t, "C decided into B's batch", func() bool { return postgres.OwnedExtended(s) == extended+1 })
			placed["D"] = tc.d(m, placed["B"])
			settle(placed["D"])
			waitFor(t, "D decided into B's batch", func() bool { return postgres.OwnedExtended(s) == extended+2 })
			if _, found := readOrder(t, m.db, placed["A"].ID); found {
				t.Error("A's held write committed")
			}
			close(hold)
			settling.Wait()

			for name, want := range tc.want {
				row := mustOrder(t, m.db, placed[name].ID)
				got := row.status
				if row.reason != nil {
					got += " " + *row.reason
				}
				if got += " " + row.filled; got != want {
					t.Errorf("%s: %s, want %s", name, got, want)
				}
			}
			a, b, c, d := xmin(t, m, placed["A"]), xmin(t, m, placed["B"]), xmin(t, m, placed["C"]), xmin(t, m, placed["D"])
			if b != c || c != d {
				t.Errorf("B, C and D committed in transactions %s, %s and %s, want one", b, c, d)
			}
			if (a == b) != tc.aWithB {
				t.Errorf("A committed in transaction %s, B in %s", a, b)
			}
			var last int64
			for _, name := range []string{"A", "B", "C"} {
				if row := mustOrder(t, m.db, placed[name].ID); row.sequence != nil {
					if *row.sequence <= last {
						t.Errorf("%s's sequence %d is not after the order before's %d", name, *row.sequence, last)
					}
					last = *row.sequence
				}
			}
			if loads := postgres.OwnedLoads(s); loads != tc.wantLoads {
				t.Errorf("the owner loaded its book %d times, want %d", loads, tc.wantLoads)
			}
			mustAudit(t, m.db)
		})
	}
}

// xmin is the transaction that wrote order's row last.
func xmin(t testing.TB, m *market, order orders.Order) string {
	t.Helper()
	var id string
	if err := m.db.QueryRow(context.Background(), `SELECT xmin::text FROM orders WHERE id = $1`, order.ID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// waitFor waits, 10 s at most, until done, or fails t naming what.
func waitFor(t testing.TB, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
