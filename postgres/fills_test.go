package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// view is an execution without its id and time, for comparing.
func view(e orders.Execution) string {
	return fmt.Sprintf("%s %s %s %s x %s fee %s %s %s", e.OrderID, e.Symbol, e.Side, e.Price, e.Quantity, e.Fee, e.FeeAsset, e.Liquidity)
}

// TestFillsListEachAccountsSide settles three trades and reads them back
// from both sides: each account sees its own order, side, fee and
// liquidity, newest first, on the instrument's grid.
func TestFillsListEachAccountsSide(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	carol := m.newCustomer(t)
	began := time.Now().Add(-time.Second)

	// 1: bob's bid takes 0.3 of alice's ask at 50000 (fees 15 maker, 30 taker).
	ask := m.place(t, m.alice, orders.Sell, "0.5", "50000")
	bid := m.place(t, m.bob, orders.Buy, "0.3", "50100")
	// 2: bob's sell takes alice's bid of 0.1 at 49990 (fees 4.999, 9.998).
	aliceBid := m.place(t, m.alice, orders.Buy, "0.1", "49990")
	bobSell := m.place(t, m.bob, orders.Sell, "0.1", "49990")
	// 3: carol's bid takes the rest of alice's ask (fees 10, 20).
	carolBid := m.place(t, carol, orders.Buy, "0.2", "50000")

	fills := postgres.NewFills(m.db)
	list := func(account string, q orders.ExecutionQuery) orders.ExecutionPage {
		t.Helper()
		page, err := fills.List(ctx, account, q)
		if err != nil {
			t.Fatalf("list %s %+v: %v", account, q, err)
		}
		return page
	}
	views := func(page orders.ExecutionPage) []string {
		var got []string
		for _, e := range page.Executions {
			got = append(got, view(e))
		}
		return got
	}
	alice := list(m.alice, orders.ExecutionQuery{})
	want := []string{
		ask.ID + " BTC-USD sell 50000.00 x 0.20000 fee 10.00 USD maker",
		aliceBid.ID + " BTC-USD buy 49990.00 x 0.10000 fee 4.999 USD maker",
		ask.ID + " BTC-USD sell 50000.00 x 0.30000 fee 15.00 USD maker",
	}
	if got := views(alice); !slices.Equal(got, want) || alice.Next != "" {
		t.Errorf("alice's fills:\n got %q next %q\nwant %q", got, alice.Next, want)
	}
	bob := list(m.bob, orders.ExecutionQuery{})
	want = []string{
		bobSell.ID + " BTC-USD sell 49990.00 x 0.10000 fee 9.998 USD taker",
		bid.ID + " BTC-USD buy 50000.00 x 0.30000 fee 30.00 USD taker",
	}
	if got := views(bob); !slices.Equal(got, want) {
		t.Errorf("bob's fills:\n got %q\nwant %q", got, want)
	}
	if got := views(list(carol, orders.ExecutionQuery{})); !slices.Equal(got, []string{carolBid.ID + " BTC-USD buy 50000.00 x 0.20000 fee 20.00 USD taker"}) {
		t.Errorf("carol's fills: %q", got)
	}
	// Both sides of a trade share its id; ids fall down the page.
	if len(alice.Executions) == 3 && len(bob.Executions) == 2 {
		if alice.Executions[1].ID != bob.Executions[0].ID || alice.Executions[2].ID != bob.Executions[1].ID {
			t.Errorf("alice's ids %v, bob's %v: one trade, one id", alice.Executions, bob.Executions)
		}
		for i, e := range alice.Executions {
			n, err := orders.ParseFillID(e.ID)
			if err != nil {
				t.Errorf("fill id %q: %v", e.ID, err)
			}
			if i > 0 {
				if prev, _ := orders.ParseFillID(alice.Executions[i-1].ID); prev <= n {
					t.Errorf("fill %s listed after %s", e.ID, alice.Executions[i-1].ID)
				}
			}
			if e.CreatedAt.Before(began) || e.CreatedAt.After(time.Now()) || e.CreatedAt.Location() != time.UTC {
				t.Errorf("fill %s created_at %v", e.ID, e.CreatedAt)
			}
		}
	}

	t.Run("pages", func(t *testing.T) {
		var got []string
		query := orders.ExecutionQuery{Limit: 1}
		for range 10 {
			page := list(m.alice, query)
			if len(page.Executions) != 1 {
				t.Fatalf("page %+v, want one fill", page)
			}
			got = append(got, page.Executions[0].ID)
			if page.Next == "" {
				break
			}
			if page.Next != page.Executions[0].ID {
				t.Errorf("next %q, want the page's last id %q", page.Next, page.Executions[0].ID)
			}
			query.After = page.Next
		}
		var all []string
		for _, e := range alice.Executions {
			all = append(all, e.ID)
		}
		if !slices.Equal(got, all) {
			t.Errorf("paged %v, want %v", got, all)
		}
	})
	t.Run("one order", func(t *testing.T) {
		tests := []struct {
			name    string
			account string
			order   string
			want    []string
		}{
			{"alice's ask, maker twice", m.alice, ask.ID, []string{view(alice.Executions[0]), view(alice.Executions[2])}},
			{"alice's bid", m.alice, aliceBid.ID, []string{view(alice.Executions[1])}},
			{"bob's bid", m.bob, bid.ID, []string{view(bob.Executions[1])}},
			{"bob's order, read by alice", m.alice, bid.ID, nil},
			{"alice's order, read by bob", m.bob, ask.ID, nil},
			{"an order nobody placed", m.alice, orders.NewOrderID(), nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := views(list(tt.account, orders.ExecutionQuery{OrderID: tt.order})); !slices.Equal(got, tt.want) {
					t.Errorf("got %q, want %q", got, tt.want)
				}
			})
		}
		page := list(m.alice, orders.ExecutionQuery{OrderID: ask.ID, Limit: 1})
		next := list(m.alice, orders.ExecutionQuery{OrderID: ask.ID, Limit: 1, After: page.Next})
		if page.Next != alice.Executions[0].ID || len(next.Executions) != 1 || next.Executions[0].ID != alice.Executions[2].ID || next.Next != "" {
			t.Errorf("alice's ask by pages of one: %+v then %+v", page, next)
		}
	})
	t.Run("refused queries", func(t *testing.T) {
		for _, q := range []orders.ExecutionQuery{
			{Limit: -1}, {Limit: orders.MaxListLimit + 1}, {After: "FIL_0"}, {After: ask.ID}, {OrderID: "FIL_1"}, {OrderID: "ORD_1"},
		} {
			if _, err := fills.List(ctx, m.alice, q); !errors.Is(err, orders.ErrInvalidQuery) {
				t.Errorf("list %+v: %v, want ErrInvalidQuery", q, err)
			}
		}
	})
}
