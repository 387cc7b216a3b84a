package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// TestGuardBoundsKeepTheDecision: whenever every funds-checked row's locked
// available lies in [atLeast, below), deciding on the locked values gives
// exactly the first decision (outcomes, takers' rows, ledger, makers), so a
// batch whose rows pass settle_guard.sql may write what it first decided.
// Random books, balances and batches (several orders of one account, buys
// and sells, limit, IOC, FOK and market, takers resting and then taken);
// each locked value is the read one, a random one, or one on either side of
// a bound.
func TestGuardBoundsKeepTheDecision(t *testing.T) {
	in := orders.Instrument{Symbol: "BTC-USD", Base: "BTC", Quote: "USD",
		TickSize: decimal.MustParse("0.01"), LotSize: decimal.MustParse("0.001"),
		ReferencePrice: decimal.MustParse("100"), MakerFeeBps: decimal.MustParse("10"),
		TakerFeeBps: decimal.MustParse("20"), PriceBandPercent: decimal.MustParse("10")}
	instruments := map[string]orders.Instrument{in.Symbol: in}
	takers := []string{"ACC_A", "ACC_B", "ACC_C"}
	makers := []string{"ACC_M1", "ACC_A", "ACC_B"}
	random := rand.New(rand.NewPCG(1, 2))
	outside, checked, several := 0, 0, 0
	for iter := 0; iter < 20000; iter++ {
		// The book.
		reads := map[sideKey]*sideRead{}
		seq := int64(1)
		for _, side := range []orders.Side{orders.Buy, orders.Sell} {
			r := &sideRead{all: true}
			n := random.IntN(4)
			for range n {
				p := 95 + random.IntN(6)
				if side == orders.Buy {
					p = 100 + random.IntN(6) - 5
				} else {
					p = 100 + random.IntN(6)
				}
				price := decimal.MustNew(int64(p), 0)
				qty := decimal.MustNew(int64(1+random.IntN(3)), 0)
				hold, _ := orders.Hold(side, qty, price, in.TakerFeeBps)
				r.rows = append(r.rows, bookOrder{id: fmt.Sprintf("M%d", seq), account: makers[random.IntN(3)], side: side,
					price: price, remaining: qty, hold: hold, sequence: seq})
				seq++
			}
			// best first, as a book page is read
			rows := r.rows
			for i := range rows {
				for j := i + 1; j < len(rows); j++ {
					if priority(side, rows[j].price, rows[j].sequence, rows[i].price, rows[i].sequence) < 0 {
						rows[i], rows[j] = rows[j], rows[i]
					}
				}
			}
			reads[sideKey{in.Symbol, side}] = r
		}
		// The takers' balances.
		snapshot := map[balanceKey]*lockedBalance{}
		for _, acc := range takers {
			for _, asset := range []string{"BTC", "USD"} {
				amount := random.IntN(400)
				if asset == "BTC" {
					amount = random.IntN(5)
				}
				snapshot[balanceKey{acc, asset}] = &lockedBalance{known: true, available: amountOf(decimal.MustNew(int64(amount), 0)),
					held: new(ledgerAmount), acc: acc, asset: asset, name: orders.BalanceName(acc, asset)}
			}
		}
		// The batch.
		var batch []*settleRequest
		for range 1 + random.IntN(6) {
			side := orders.Buy
			if random.IntN(2) == 0 {
				side = orders.Sell
			}
			// Each order its own client order id, but now and then a retry
			// of the one before (a duplicate, refused before any hold).
			clientOrderID := fmt.Sprintf("c-%d", len(batch))
			if len(batch) > 0 && random.IntN(8) == 0 {
				clientOrderID = batch[len(batch)-1].order.ClientOrderID
			}
			o := orders.Order{ID: orders.NewOrderID(), ClientOrderID: clientOrderID, Account: takers[random.IntN(len(takers))],
				Symbol: in.Symbol, Side: side, Type: orders.Limit, TimeInForce: orders.GTC,
				Quantity: decimal.MustNew(int64(1+random.IntN(3)), 0)}
			price := decimal.MustNew(int64(96+random.IntN(9)), 0)
			o.Price = &price
			switch random.IntN(5) {
			case 0:
				o.TimeInForce = orders.IOC
			case 1:
				o.TimeInForce = orders.FOK
			case 2:
				o.Type, o.Price, o.TimeInForce = orders.Market, nil, orders.IOC
			}
			batch = append(batch, &settleRequest{ctx: context.Background(), order: o})
		}
		w1, out1, err := decideBatch(context.Background(), nil, batch, instruments, reads, snapshot, map[string]bool{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Perturb.
		locked := map[balanceKey]*lockedBalance{}
		inBounds := true
		for key, b := range snapshot {
			wb := w1.balances[key]
			candidates := []*ledgerAmount{b.available, amountOf(decimal.MustNew(int64(random.IntN(400)), 0))}
			tiny := amountOf(decimal.MustNew(1, orders.LedgerScale))
			if wb.atLeast != nil {
				candidates = append(candidates, wb.atLeast, new(ledgerAmount).minus(wb.atLeast, tiny))
			}
			if wb.below != nil {
				candidates = append(candidates, wb.below, new(ledgerAmount).minus(wb.below, tiny))
			}
			l := candidates[random.IntN(len(candidates))]
			if l.sign() < 0 {
				l = new(ledgerAmount)
			}
			if wb.atLeast != nil && l.cmp(wb.atLeast) < 0 || wb.below != nil && l.cmp(wb.below) >= 0 {
				inBounds = false
			}
			locked[key] = &lockedBalance{known: true, available: new(ledgerAmount).set(l), held: new(ledgerAmount),
				acc: b.acc, asset: b.asset, name: b.name}
		}
		if !inBounds {
			outside++
			continue
		}
		w2, out2, err := decideBatch(context.Background(), nil, batch, instruments, reads, locked, map[string]bool{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := describe(w1, out1), describe(w2, out2); a != b {
			t.Fatalf("iteration %d: guard passes but the decision differs:\nfirst:\n%s\nlocked:\n%s", iter, a, b)
		}
		checked++
		written := map[string]int{}
		for _, row := range w1.takers {
			if row.duplicateOf == "" {
				written[row.order.Account]++
			}
		}
		for _, n := range written {
			if n > 1 {
				several++
				break
			}
		}
	}
	if checked < 1000 || outside < 1000 || several < 1000 {
		t.Errorf("%d batches within their bounds were decided again (%d with several written orders of one account) and %d fell outside: too few to mean much",
			checked, several, outside)
	}
}

// describe is everything a decision wrote, for comparing two.
func describe(w *batchWork, out []batchOutcome) string {
	s := ""
	for _, o := range out {
		s += fmt.Sprintf("outcome %v %v %v %d err=%v\n", o.result.duplicate, o.result.status, o.result.reason, o.result.trades, o.err)
	}
	for _, r := range w.takers {
		s += fmt.Sprintf("taker %s %s %s %s %s %s %s %v\n", r.order.ID, r.status, r.rejectReason, r.cancelReason, r.filled.text(), r.notional.text(), r.hold, r.rests)
	}
	for _, t := range w.txns {
		s += fmt.Sprintf("txn %d %s %s", t.position, t.Kind, t.OrderID)
		for _, m := range t.Moves {
			s += fmt.Sprintf(" [%s %s %s %s]", m.Account, m.Asset, m.Part, m.Amount)
		}
		s += "\n"
	}
	for _, m := range w.makers {
		s += fmt.Sprintf("maker %s %s %s %s %s\n", m.id, m.status, m.cancelReason, m.filled.text(), m.givenUp.text())
	}
	return s
}
