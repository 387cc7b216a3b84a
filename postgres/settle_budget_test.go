package postgres_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/settlement"
)

// The defects of issue 23 as settlement met them: an order whose amounts do
// not fit the decimal type was buried, a maker whose fill did not fit made
// other accounts' takers fail their batch, and a market order's minimum
// notional was never checked at the price it traded.

// settleOnce settles order on its first attempt and fails the test on any
// error: settlement never buries or retries an order for its arithmetic.
func (m *market) settleOnce(t testing.TB, order orders.Order) orderRow {
	t.Helper()
	if err := settlement.Settle(m.settler)(context.Background(), claimOf(t, order, 1)); err != nil {
		t.Fatalf("settle %s (%s %s at %v): %v; want it settled on its first attempt", order.ID, order.Side,
			order.Quantity, deref(order.Price), err)
	}
	return mustOrder(t, m.db, order.ID)
}

// An order admitted before the door knew the budget, whose hold has more
// digits than the decimal type holds, is rejected amount_too_large: nothing
// happens, and the job completes.
func TestSettleRejectsAnOrderItCannotRepresent(t *testing.T) {
	m := newMarket(t)
	deposit(t, m.db, m.alice, "USD", "100000000000000")
	for _, quantity := range []string{"1000000.00001", "9999999999999.99999"} {
		t.Run(quantity, func(t *testing.T) {
			before := balanceOf(t, m.db, m.alice, "USD")
			order := newOrder(m.alice, "BTC-USD", orders.Buy, quantity, "50000.01")
			row := m.settleOnce(t, order)
			if got := row.state(); got != "rejected(amount_too_large) filled 0 notional 0 fees 0 hold 0" {
				t.Errorf("order %s", got)
			}
			if after := balanceOf(t, m.db, m.alice, "USD"); after != before {
				t.Errorf("USD %+v, was %+v", after, before)
			}
		})
	}
	mustAudit(t, m.db)
}

// plantWhale writes a resting buy as an old release could have admitted it,
// beyond the budget: its row and its hold, as settlement wrote them.
func (m *market) plantWhale(t testing.TB, account, quantity, price, hold string) string {
	t.Helper()
	id := orders.NewOrderID()
	plantTransaction(t, m.db, "hold", id,
		auditEntry{account, "USD", "available", "-" + hold}, auditEntry{account, "USD", "held", hold})
	var sequence int64
	if err := m.db.QueryRow(context.Background(), `SELECT nextval('orders_book_sequence')`).Scan(&sequence); err != nil {
		t.Fatal(err)
	}
	plantOrder(t, m.db, auditOrder{id: id, account: account, symbol: "BTC-USD", side: "buy", typ: "limit",
		quantity: quantity, price: price, status: "open", hold: hold, sequence: sequence})
	return id
}

// One large resting order must not block other accounts' orders: a maker
// whose fill the decimal type cannot hold is canceled amount_too_large, its
// hold released, and the taker matches on against the next maker.
func TestAMakerThatCannotFillExactlyIsCanceled(t *testing.T) {
	m := newMarket(t)
	whaleAccount := m.newCustomerWith(t, map[string]string{"USD": "1100000000"})
	whale := m.plantWhale(t, whaleAccount, "20000", "50000.01", "1002000200.4")
	next := m.place(t, m.alice, orders.Buy, "0.001", "50000")

	sell := newOrder(m.bob, "BTC-USD", orders.Sell, "0.00021", "50000")
	row := m.settleOnce(t, sell)
	if got := row.state(); got != "filled(<nil>) filled 0.00021 notional 10.5 fees 0.021 hold 0" {
		t.Errorf("the taker: %s, want filled by the next maker at 50000", got)
	}
	if got := mustOrder(t, m.db, whale).state(); got != "canceled(amount_too_large) filled 0 notional 0 fees 0 hold 0" {
		t.Errorf("the whale: %s", got)
	}
	if got := balanceOf(t, m.db, whaleAccount, "USD"); got.available != "1100000000" || got.held != "0" {
		t.Errorf("the whale's USD %+v, want its hold released", got)
	}
	if got := mustOrder(t, m.db, next.ID).state(); got != "partially_filled(<nil>) filled 0.00021 notional 10.5 fees 0.0105 hold 39.5895" {
		t.Errorf("the next maker: %s", got)
	}
	mustAudit(t, m.db)
}

// A market order's minimum notional is checked at the price it would trade,
// its first fill's: below it, nothing trades.
func TestMarketOrderBelowTheMinimumNotionalAtItsFillPrice(t *testing.T) {
	m := newMarket(t)
	bid := m.place(t, m.alice, orders.Buy, "0.01", "45000")
	before := fmt.Sprint(balanceOf(t, m.db, m.bob, "BTC"), balanceOf(t, m.db, m.bob, "USD"))
	// 0.0002 × 50,000 (the reference) is 10 USD, the minimum; at 45,000, the
	// bid it would fill, 9.
	sell := newOrder(m.bob, "BTC-USD", orders.Sell, "0.0002", "")
	row := m.settleOnce(t, sell)
	if got := row.state(); got != "canceled(below_min_notional) filled 0 notional 0 fees 0 hold 0" {
		t.Errorf("the market sell: %s", got)
	}
	if after := fmt.Sprint(balanceOf(t, m.db, m.bob, "BTC"), balanceOf(t, m.db, m.bob, "USD")); after != before {
		t.Errorf("bob's balances %s, were %s", after, before)
	}
	if got := mustOrder(t, m.db, bid.ID).state(); got != "open(<nil>) filled 0 notional 0 fees 0 hold 450.9" {
		t.Errorf("the bid: %s", got)
	}
	// 0.00023 × 45,000 is 10.35: it fills.
	sell = newOrder(m.bob, "BTC-USD", orders.Sell, "0.00023", "")
	if got := m.settleOnce(t, sell).state(); got != "filled(<nil>) filled 0.00023 notional 10.35 fees 0.0207 hold 0" {
		t.Errorf("the second market sell: %s", got)
	}
	mustAudit(t, m.db)
}
