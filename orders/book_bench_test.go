package orders_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// The book's benchmarks: go test -run '^$' -bench OrderBook -benchmem ./orders/
//
// Each book holds its orders half bids, half asks, ten orders of 1 a price
// level, a tick apart on each side of 1000 (asks from 1000.00 up, bids from
// 999.99 down), of a hundred accounts. A benchmark that takes orders off
// or puts them on restores the book every tenth of its size, timer
// stopped, so the book stays within 10% of its size.

// benchUSD is the benchmarks' instrument: a tick of 0.01 and a band of
// 900 to 1100.
var benchUSD = orders.Instrument{Symbol: "BTC-USD", Base: "BTC", Quote: "USD",
	TickSize: amt("0.01"), LotSize: amt("0.001"), ReferencePrice: amt("1000"),
	MakerFeeBps: amt("10"), TakerFeeBps: amt("20"), PriceBandPercent: amt("10")}

const benchPerLevel = 10

var benchSizes = []int{1_000, 100_000}

// benchPrice is the price level levels from the inside of side.
func benchPrice(side orders.Side, level int) decimal.Decimal {
	if side == orders.Sell {
		return decimal.MustNew(int64(100_000+level), 2)
	}
	return decimal.MustNew(int64(99_999-level), 2)
}

// benchOrder is a resting order of 1 at price.
func benchOrder(id string, n int, side orders.Side, price decimal.Decimal, sequence int64) orders.BookOrder {
	one := decimal.One
	hold, err := orders.Hold(side, one, price, benchUSD.TakerFeeBps)
	if err != nil {
		panic(err)
	}
	return orders.BookOrder{ID: id, ClientOrderID: "c-" + id, Account: fmt.Sprintf("ACC_%02d", n%100), Side: side,
		TimeInForce: orders.GTC, Price: price, Quantity: one, Remaining: one, Hold: hold, CreatedAt: bookCreated,
		Sequence: sequence}
}

// benchBook is a book of size orders, as the benchmarks' comment says.
func benchBook(b *testing.B, size int) *orders.OrderBook {
	b.Helper()
	book := orders.NewOrderBook(benchUSD.Symbol)
	for i := range size {
		side := orders.Buy
		if i%2 == 1 {
			side = orders.Sell
		}
		level := i / 2 / benchPerLevel
		o := benchOrder(fmt.Sprintf("ORD_%d", i), i, side, benchPrice(side, level), int64(i+1))
		if err := book.Rest(o); err != nil {
			b.Fatal(err)
		}
	}
	return book
}

// BenchmarkOrderBookRest: an order of 1 rests at a random price level of
// its side, behind the orders there.
func BenchmarkOrderBookRest(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("orders=%d", size), func(b *testing.B) {
			book := benchBook(b, size)
			levels := size / 2 / benchPerLevel
			rng := rand.New(rand.NewPCG(1, 2))
			batch := make([]orders.BookOrder, size/10)
			for i := range batch {
				side := orders.Buy
				if i%2 == 1 {
					side = orders.Sell
				}
				batch[i] = benchOrder(fmt.Sprintf("NEW_%d", i), i, side, benchPrice(side, rng.IntN(levels)), 0)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				o := batch[i]
				o.Sequence = book.Sequence() + 1
				if err := book.Rest(o); err != nil {
					b.Fatal(err)
				}
				if i++; i == len(batch) {
					b.StopTimer()
					for _, o := range batch {
						book.Remove(o.ID)
					}
					i = 0
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkOrderBookCancel: a random resting order is removed.
func BenchmarkOrderBookCancel(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("orders=%d", size), func(b *testing.B) {
			book := benchBook(b, size)
			rng := rand.New(rand.NewPCG(1, 2))
			ids := make([]string, size/10)
			for i, n := range rng.Perm(size)[:len(ids)] {
				ids[i] = fmt.Sprintf("ORD_%d", n)
			}
			removed := make([]orders.BookOrder, 0, len(ids))
			b.ReportAllocs()
			for b.Loop() {
				o, ok := book.Remove(ids[len(removed)])
				if !ok {
					b.Fatalf("%s is not in the book", ids[len(removed)])
				}
				if removed = append(removed, o); len(removed) == len(ids) {
					b.StopTimer()
					for _, o := range removed {
						if err := book.Rest(o); err != nil {
							b.Fatal(err)
						}
					}
					removed = removed[:0]
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkOrderBookMatch: a buy takes one maker, or ten (a whole level),
// decided by orders.Decide through the book's Opposing and applied: what
// an owner pays for a taker. The makers it filled rest again (at the back
// of their levels) every tenth of the book, timer stopped.
func BenchmarkOrderBookMatch(b *testing.B) {
	for _, size := range benchSizes {
		for _, makers := range []int{1, 10} {
			b.Run(fmt.Sprintf("orders=%d/makers=%d", size, makers), func(b *testing.B) {
				benchMatch(b, size, makers, false)
			})
		}
	}
}

// BenchmarkOrderBookApply: the book's part of BenchmarkOrderBookMatch:
// Opposing, and Apply of what Decide would decide on its page, the
// decision built by the benchmark itself (each maker of 1 filled whole at
// its price) instead of by orders.Decide, whose exact arithmetic costs a
// hundred times as much.
func BenchmarkOrderBookApply(b *testing.B) {
	for _, size := range benchSizes {
		for _, makers := range []int{1, 10} {
			b.Run(fmt.Sprintf("orders=%d/makers=%d", size, makers), func(b *testing.B) {
				benchMatch(b, size, makers, true)
			})
		}
	}
}

// benchDecision is what Decide decides for the benchmark's buy taker on
// page: each maker (of 1, selling) filled whole at its price.
func benchDecision(page orders.Book, d *orders.Decision) error {
	d.Status, d.TimeInForce, d.Trades = orders.StatusFilled, orders.IOC, d.Trades[:0]
	for _, r := range page.Resting {
		fee, err := r.Price.Mul(decimal.MustNew(1, 3)) // 10 bps
		if err != nil {
			return err
		}
		d.Trades = append(d.Trades, orders.Trade{
			Fill: orders.Fill{MakerOrderID: r.OrderID, MakerAccount: r.Account, Price: r.Price, Quantity: r.Remaining,
				MakerRemaining: decimal.Zero},
			Notional: r.Price, MakerFee: fee,
			Maker: orders.MakerFill{Remaining: decimal.Zero, Hold: decimal.Zero, Status: orders.StatusFilled,
				GivesUp: r.Remaining, Release: decimal.Zero},
		})
	}
	return nil
}

// BenchmarkOrderBookOpposing: the book's part of what Decide does in
// BenchmarkOrderBookMatch: the page of the side Decide is given.
func BenchmarkOrderBookOpposing(b *testing.B) {
	for _, size := range benchSizes {
		for _, makers := range []int{1, 10} {
			b.Run(fmt.Sprintf("orders=%d/makers=%d", size, makers), func(b *testing.B) {
				book := benchBook(b, size)
				order := benchTaker(makers)
				b.ReportAllocs()
				for b.Loop() {
					if page := book.Opposing(order.Side, *order.Price, order.Quantity); len(page.Resting) != makers {
						b.Fatalf("a page of %d makers", len(page.Resting))
					}
				}
			})
		}
	}
}

// BenchmarkOrderBookDecideAlone: orders.Decide's part of
// BenchmarkOrderBookMatch: the same taker decided against the same page,
// held in a slice, and not applied. BenchmarkOrderBookMatch less this is
// what the book costs.
func BenchmarkOrderBookDecideAlone(b *testing.B) {
	for _, makers := range []int{1, 10} {
		b.Run(fmt.Sprintf("makers=%d", makers), func(b *testing.B) {
			order := benchTaker(makers)
			page := benchBook(b, 1_000).Opposing(order.Side, *order.Price, order.Quantity)
			b.ReportAllocs()
			for b.Loop() {
				d, err := orders.Decide(order, benchUSD, "", func(decimal.Decimal) orders.Book { return page },
					alwaysFunded)
				if err != nil || len(d.Trades) != makers {
					b.Fatalf("%d trades: %v", len(d.Trades), err)
				}
			}
		})
	}
}

// benchTaker is an IOC buy of makers, limited to the band's top: the
// whole side is in its reach, and it takes makers orders of 1.
func benchTaker(makers int) orders.Order {
	price := amt("1100")
	return orders.Order{ID: "ORD_T", ClientOrderID: "c-T", Account: "ACC_T", Symbol: benchUSD.Symbol,
		Side: orders.Buy, Type: orders.Limit, TimeInForce: orders.IOC, Quantity: decimal.MustNew(int64(makers), 0),
		Price: &price, CreatedAt: bookCreated}
}

// benchMatch decides and applies takers of makers against a book of
// size, decided by Decide or, withoutDecide, by benchDecision.
func benchMatch(b *testing.B, size, makers int, withoutDecide bool) {
	book := benchBook(b, size)
	order := benchTaker(makers)
	opposing := book.OpposingFor(order)
	filled := make([]orders.BookOrder, 0, size/10+makers)
	var buffer []orders.BookOrder
	b.ReportAllocs()
	var d orders.Decision
	for b.Loop() {
		var err error
		if withoutDecide {
			err = benchDecision(opposing(*order.Price), &d)
		} else {
			d, err = orders.Decide(order, benchUSD, "", opposing, alwaysFunded)
		}
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Trades) != makers || d.Status != orders.StatusFilled {
			b.Fatalf("%s with %d trades", d.Status, len(d.Trades))
		}
		if buffer, err = book.Apply(order, d, buffer[:0]); err != nil {
			b.Fatal(err)
		}
		if filled = append(filled, buffer...); len(filled) >= size/10 {
			b.StopTimer()
			for _, o := range filled {
				// As it rested first: a sell of 1 holds 1.
				o.Remaining, o.Hold, o.Filled, o.Notional, o.Fees = o.Quantity, o.Quantity, decimal.Zero, decimal.Zero, decimal.Zero
				o.Sequence = book.Sequence() + 1
				if err := book.Rest(o); err != nil {
					b.Fatal(err)
				}
			}
			filled = filled[:0]
			b.StartTimer()
		}
	}
}

// BenchmarkOrderBookDepth: the book's ten best levels a side, as the API
// serves them.
func BenchmarkOrderBookDepth(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprintf("orders=%d", size), func(b *testing.B) {
			book := benchBook(b, size)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := book.Depth(benchUSD, orders.DefaultBookDepth); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
