package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"pgregory.net/rapid"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// richFunds let an account place orders up to the door's limits on every
// seeded instrument: 10^7 USD on BTC-USD, 10^9 USD on ETH-USD, 10^6 BTC on
// ETH-BTC.
var richFunds = map[string]string{"USD": "3000000000", "BTC": "3000000", "ETH": "30000000"}

// TestSettlementNeverBuriesOrRetriesOnArithmetic is issue 23's property:
// orders the door admits (orders.Instrument's Check, CheckBand and
// CheckAmounts on the instruments as the gateway reads them), with
// quantities and prices up to its limits, against a book that also holds
// resting orders an old release admitted beyond them (written as rows),
// settle on their first attempt through the real settler, a few at once so
// that they share batches: none fails (no ErrUnsettleable, no error a
// retry would meet), each reaches open, partially_filled, filled, canceled
// or rejected, none of them is rejected or canceled amount_too_large (only
// an old order is, as a maker), and the audit stays clean. The checks share
// one database, so each meets the book the ones before it left (and a
// failure's shrunk case may not fail alone: its message names the order).
func TestSettlementNeverBuriesOrRetriesOnArithmetic(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	legacy := map[string]bool{}
	rapid.Check(t, func(rt *rapid.T) {
		instruments, err := postgres.NewInstruments(m.db).ReadInstruments(ctx)
		if err != nil {
			rt.Fatal(err)
		}
		accounts := []string{m.newCustomerWith(t, richFunds), m.newCustomerWith(t, richFunds), m.newCustomer(t)}
		var admitted []orders.Order
		for range rapid.IntRange(0, 2).Draw(rt, "old orders") {
			old := plantOldMaker(rt, t, m, instruments)
			if old.ID == "" {
				continue
			}
			legacy[old.ID] = true
			// Often a taker aimed at it: the opposite side, at its price.
			if rapid.Bool().Draw(rt, "aimed") {
				account := rapid.SampledFrom(accounts).Draw(rt, "account")
				if order, ok := drawAdmitted(rt, instruments, account, &old); ok {
					admitted = append(admitted, order)
				}
			}
		}
		for range rapid.IntRange(1, 16).Draw(rt, "orders") {
			account := rapid.SampledFrom(accounts).Draw(rt, "account")
			if order, ok := drawAdmitted(rt, instruments, account, nil); ok {
				admitted = append(admitted, order)
			}
		}

		// A few at once, so that they settle in shared batches.
		errs := make([]error, len(admitted))
		var wg sync.WaitGroup
		work := make(chan int)
		for range 4 {
			wg.Go(func() {
				for i := range work {
					errs[i] = settlement.Settle(m.settler)(ctx, claimOf(t, admitted[i], 1))
				}
			})
		}
		for i := range admitted {
			work <- i
		}
		close(work)
		wg.Wait()

		for i, order := range admitted {
			describe := fmt.Sprintf("%s %s %s %s at %v", order.Symbol, order.Side, order.Type, order.Quantity, deref(order.Price))
			if errs[i] != nil {
				rt.Fatalf("%s: settle: %v (unsettleable: %v)", describe, errs[i], errors.Is(errs[i], postgres.ErrUnsettleable))
			}
			var status string
			var reject, cancel *string
			if err := m.db.QueryRow(ctx, `SELECT status, reject_reason, cancel_reason FROM orders WHERE id = $1`, order.ID).
				Scan(&status, &reject, &cancel); err != nil {
				rt.Fatalf("%s: its row: %v", describe, err)
			}
			switch {
			case status != "open" && status != "partially_filled" && status != "filled" && status != "canceled" && status != "rejected":
				rt.Fatalf("%s: status %s", describe, status)
			case deref(reject) == string(orders.ReasonAmountTooLarge):
				rt.Fatalf("%s: admitted at the door, rejected amount_too_large", describe)
			case deref(cancel) == string(orders.CancelBelowMinNotional) && order.Type != orders.Market:
				rt.Fatalf("%s: canceled below_min_notional", describe)
			}
		}
		rows, err := m.db.Query(ctx, `SELECT id FROM orders WHERE cancel_reason = 'amount_too_large'`)
		if err != nil {
			rt.Fatal(err)
		}
		canceled, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			rt.Fatal(err)
		}
		for _, id := range canceled {
			if !legacy[id] {
				rt.Fatalf("order %s, admitted within the limits, canceled amount_too_large as a maker", id)
			}
		}
		violations, err := postgres.Audit(ctx, m.db)
		if err != nil {
			rt.Fatal(err)
		}
		for _, v := range violations {
			rt.Errorf("audit: %s", v)
		}
	})
}

// drawAdmitted draws an order of account and reports whether the door
// admits it, as the gateway checks it (orders.Instrument's Check,
// CheckBand, CheckAmounts). Its quantity is often near the limit at its
// budget price, or near the minimum notional. aim, when given, is a
// resting order it is to meet: it takes the other side, at that price.
func drawAdmitted(rt *rapid.T, instruments map[string]orders.Instrument, account string, aim *orders.Order) (orders.Order, bool) {
	in := instruments[rapid.SampledFrom([]string{"BTC-USD", "ETH-USD", "ETH-BTC"}).Draw(rt, "symbol")]
	cmd := orders.PlaceCommand{Account: account, ClientOrderID: "p", Symbol: in.Symbol,
		Side: rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(rt, "side"),
		Type: rapid.SampledFrom([]orders.OrderType{orders.Limit, orders.Limit, orders.Market}).Draw(rt, "type")}
	if aim != nil {
		in = instruments[aim.Symbol]
		cmd.Symbol, cmd.Side = in.Symbol, aim.Side.Opposite()
	}
	low, high, err := in.Band()
	if err != nil {
		rt.Fatal(err)
	}
	if cmd.Type == orders.Limit {
		cmd.Price = drawOnGrid(rt, "price", in.TickSize, low, high)
		if aim != nil {
			cmd.Price = *aim.Price
		}
		cmd.TimeInForce = rapid.SampledFrom([]orders.TimeInForce{orders.GTC, orders.GTC, orders.IOC, orders.FOK}).Draw(rt, "tif")
		cmd.PostOnly = cmd.TimeInForce == orders.GTC && rapid.IntRange(0, 5).Draw(rt, "post only") == 0
	}
	budget, _, err := in.BudgetPrice(cmd.Side, cmd.Type, cmd.Price)
	if err != nil {
		rt.Fatal(err)
	}
	reference := cmd.Price
	if cmd.Type == orders.Market {
		reference = in.Reference()
	}
	most, err := in.MaxNotional().Quo(budget)
	least, err2 := in.MinNotional.Quo(reference)
	if err != nil || err2 != nil {
		rt.Fatal(err, err2)
	}
	switch rapid.IntRange(0, 2).Draw(rt, "size") {
	case 0: // at the door's limit, or just past it
		cmd.Quantity = drawOnGrid(rt, "quantity", in.LotSize, minus(most, in.LotSize, 20), plus(most, in.LotSize, 3))
	case 1: // at about the minimum notional
		cmd.Quantity = drawOnGrid(rt, "quantity", in.LotSize, least, plus(least, in.LotSize, 2))
	default:
		cmd.Quantity = drawOnGrid(rt, "quantity", in.LotSize, in.LotSize, most)
	}
	if len(in.Check(cmd)) > 0 || cmd.Type == orders.Limit && in.CheckBand(cmd.Price) != nil || in.CheckAmounts(cmd) != nil {
		return orders.Order{}, false
	}
	order, err := orders.NewOrder(cmd)
	if err != nil {
		rt.Fatal(err)
	}
	order.ClientOrderID = "p-" + order.ID[len(order.ID)-12:]
	return order, true
}

// drawOnGrid draws a multiple of grid from about from to about to (both
// rounded onto the grid, at least one step).
func drawOnGrid(rt *rapid.T, label string, grid, from, to decimal.Decimal) decimal.Decimal {
	steps := func(x decimal.Decimal) int64 {
		q, _, err := x.QuoRem(grid)
		if err != nil {
			rt.Fatalf("%s: %s on a grid of %s: %v", label, x, grid, err)
		}
		n, _, _ := q.Int64(0)
		return max(n, 1)
	}
	lo, hi := steps(from), steps(to)
	n := rapid.Int64Range(lo, max(lo, hi)).Draw(rt, label)
	d, err := decimal.MustNew(n, 0).Mul(grid)
	if err != nil {
		rt.Fatal(err)
	}
	return d
}

func plus(x, step decimal.Decimal, n int64) decimal.Decimal {
	delta, _ := step.Mul(decimal.MustNew(n, 0))
	sum, _ := x.Add(delta)
	return sum
}

func minus(x, step decimal.Decimal, n int64) decimal.Decimal {
	delta, _ := step.Mul(decimal.MustNew(n, 0))
	diff, _ := x.Sub(delta)
	if !diff.IsPos() {
		return step
	}
	return diff
}

// plantOldMaker writes a resting order as an old release admitted it,
// beyond the door's limits (whole coins by the thousand to the billion,
// whose hold is exact but leaves no digit for a fill's decimals), in the
// band and without crossing the book, for a new account funded for its
// hold: its symbol, side, price and id (none when no such order could
// rest).
func plantOldMaker(rt *rapid.T, t testing.TB, m *market, instruments map[string]orders.Instrument) orders.Order {
	ctx := context.Background()
	in := instruments[rapid.SampledFrom([]string{"BTC-USD", "ETH-USD", "ETH-BTC"}).Draw(rt, "old symbol")]
	side := rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(rt, "old side")
	low, high, err := in.Band()
	if err != nil {
		rt.Fatal(err)
	}
	var best *string
	if err := m.db.QueryRow(ctx, `SELECT trim_scale(CASE $2 WHEN 'buy' THEN min(price) ELSE max(price) END)::text
		FROM orders WHERE symbol = $1 AND side <> $2 AND status IN ('open', 'partially_filled')`, in.Symbol, side).Scan(&best); err != nil {
		rt.Fatal(err)
	}
	if best != nil {
		edge := decimal.MustParse(*best)
		if side == orders.Buy {
			high = minus(edge, in.TickSize, 1)
		} else {
			low = plus(edge, in.TickSize, 1)
		}
	}
	if low.Cmp(high) > 0 {
		return orders.Order{}
	}
	// Often at the touch, where the next taker meets it.
	price := drawOnGrid(rt, "old price", in.TickSize, low, high)
	if rapid.Bool().Draw(rt, "old at the touch") {
		price = high
		if side == orders.Sell {
			price = low
		}
	}
	whole := rapid.Int64Range(1, 999).Draw(rt, "old coins")
	for range rapid.IntRange(3, 9).Draw(rt, "old magnitude") {
		whole *= 10
	}
	quantity := decimal.MustNew(whole, 0)
	hold, err := orders.Hold(side, quantity, price, in.TakerFeeBps)
	if err != nil {
		return orders.Order{} // an old release could not have rested it either
	}
	asset := in.Base
	if side == orders.Buy {
		asset = in.Quote
	}
	// Deposits keep the asset's scale: the next whole coin above the hold.
	funds, err := hold.Floor(0).Add(decimal.One)
	if err != nil {
		return orders.Order{}
	}
	account := m.newCustomerWith(t, map[string]string{asset: funds.String()})
	id := orders.NewOrderID()
	plantTransaction(t, m.db, "hold", id,
		auditEntry{account, asset, "available", hold.Neg().String()}, auditEntry{account, asset, "held", hold.String()})
	var sequence int64
	if err := m.db.QueryRow(ctx, `SELECT nextval('orders_book_sequence')`).Scan(&sequence); err != nil {
		rt.Fatal(err)
	}
	plantOrder(t, m.db, auditOrder{id: id, account: account, symbol: in.Symbol, side: string(side), typ: "limit",
		quantity: quantity.String(), price: price.String(), status: "open", hold: hold.String(), sequence: sequence})
	return orders.Order{ID: id, Symbol: in.Symbol, Side: side, Price: &price}
}
