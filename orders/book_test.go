package orders_test

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"pgregory.net/rapid"

	"github.com/ordergate/ordergate/orders"
)

// bookUSD is the instrument of the book tests: a band of 90 to 110 around
// 100, a tick of 0.5 and a lot of 0.01; the taker pays 20 bps, the maker
// 10.
var bookUSD = orders.Instrument{Symbol: "ETH-USD", Base: "ETH", Quote: "USD",
	TickSize: amt("0.5"), LotSize: amt("0.01"), ReferencePrice: amt("100"),
	MakerFeeBps: amt("10"), TakerFeeBps: amt("20"), PriceBandPercent: amt("10")}

var bookCreated = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// bookOrder is account's order resting whole, holding what it would on
// resting now.
func bookOrder(id, account string, side orders.Side, price, quantity string, sequence int64) orders.BookOrder {
	hold, err := orders.Hold(side, amt(quantity), amt(price), bookUSD.TakerFeeBps)
	if err != nil {
		panic(err)
	}
	return orders.BookOrder{ID: id, ClientOrderID: "c-" + id, Account: account, Side: side, TimeInForce: orders.GTC,
		Price: amt(price), Quantity: amt(quantity), Remaining: amt(quantity), Hold: hold, CreatedAt: bookCreated,
		Sequence: sequence}
}

// newBook rests each order, in turn, on a new book.
func newBook(t testing.TB, resting ...orders.BookOrder) *orders.OrderBook {
	t.Helper()
	book := orders.NewOrderBook(bookUSD.Symbol)
	for _, o := range resting {
		if err := book.Rest(o); err != nil {
			t.Fatal(err)
		}
	}
	return book
}

// bookIDs is every order of the book, bids then asks, in priority order.
func bookIDs(book *orders.OrderBook) []string {
	var ids []string
	for _, side := range []orders.Side{orders.Buy, orders.Sell} {
		for o := range book.Orders(side) {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

// bookState is every order of the book in full, for telling that a
// refused change left it as it was.
func bookState(book *orders.OrderBook) string {
	var lines []string
	for _, side := range []orders.Side{orders.Buy, orders.Sell} {
		for o := range book.Orders(side) {
			lines = append(lines, fmt.Sprintf("%+v", o))
		}
	}
	return strings.Join(lines, "\n") + fmt.Sprintf("\nsequence %d", book.Sequence())
}

func TestOrderBookRest(t *testing.T) {
	base := []orders.BookOrder{
		bookOrder("B1", "A", orders.Buy, "99", "1", 1),
		bookOrder("S1", "B", orders.Sell, "101", "1", 2),
	}
	with := func(o orders.BookOrder, change func(*orders.BookOrder)) orders.BookOrder {
		change(&o)
		return o
	}
	bid := bookOrder("B2", "C", orders.Buy, "100", "2", 3)
	tests := []struct {
		name    string
		order   orders.BookOrder
		refused string // what the error says; "" when the order rests
		ids     []string
	}{
		{name: "a bid under the best ask rests", order: bid, ids: []string{"B2", "B1", "S1"}},
		{name: "an ask over the best bid rests", order: bookOrder("S2", "C", orders.Sell, "100", "2", 3),
			ids: []string{"B1", "S2", "S1"}},
		{name: "a bid at the best ask would cross", order: bookOrder("B2", "C", orders.Buy, "101", "2", 3),
			refused: "crosses the best sell order at 101"},
		{name: "an ask under the best bid would cross", order: bookOrder("S2", "C", orders.Sell, "98.5", "2", 3),
			refused: "crosses the best buy order at 99"},
		{name: "an id already in the book", order: with(bid, func(o *orders.BookOrder) { o.ID = "B1" }),
			refused: "rests in the book already"},
		{name: "a sequence its price level has", order: bookOrder("B2", "C", orders.Buy, "99", "2", 1),
			refused: "order B1 at its price has its sequence 1"},
		{name: "a sequence not above zero", order: bookOrder("B0", "C", orders.Buy, "99.0", "2", 0),
			refused: "sequence 0 is not above zero"},
		{name: "no id", order: with(bid, func(o *orders.BookOrder) { o.ID = "" }), refused: "no id"},
		{name: "no account", order: with(bid, func(o *orders.BookOrder) { o.Account = "" }), refused: "no account"},
		{name: "no side", order: with(bid, func(o *orders.BookOrder) { o.Side = "" }), refused: `side ""`},
		{name: "an ioc order", order: with(bid, func(o *orders.BookOrder) { o.TimeInForce = orders.IOC }),
			refused: `time in force "ioc" does not rest`},
		{name: "no price", order: with(bid, func(o *orders.BookOrder) { o.Price = decimal.Zero }),
			refused: "price 0 is not above zero"},
		{name: "nothing remaining", order: with(bid, func(o *orders.BookOrder) { o.Remaining, o.Quantity = decimal.Zero, decimal.Zero }),
			refused: "remaining 0 is not above zero"},
		{name: "filled and remaining that are not its quantity", order: with(bid, func(o *orders.BookOrder) { o.Filled = amt("0.5") }),
			refused: "filled 0.5 + remaining 2 is not its quantity 2"},
		{name: "a negative hold", order: with(bid, func(o *orders.BookOrder) { o.Hold = amt("-1") }),
			refused: "a negative amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			book := newBook(t, base...)
			before := bookState(book)
			err := book.Rest(tt.order)
			if tt.refused != "" {
				if !errors.Is(err, orders.ErrBookRefused) || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("Rest = %v, want ErrBookRefused saying %q", err, tt.refused)
				}
				if after := bookState(book); after != before {
					t.Fatalf("a refused Rest changed the book:\n%s\nwas\n%s", after, before)
				}
			} else if err != nil {
				t.Fatalf("Rest: %v", err)
			} else if got := bookIDs(book); !slices.Equal(got, tt.ids) {
				t.Fatalf("book %v, want %v", got, tt.ids)
			}
			if err := book.Verify(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestOrderBookLoadsInAnyOrder: orders rested out of sequence order come
// out in priority order, and the book goes on from the highest sequence.
func TestOrderBookLoadsInAnyOrder(t *testing.T) {
	book := newBook(t,
		bookOrder("S9", "A", orders.Sell, "101", "1", 9),
		bookOrder("S3", "B", orders.Sell, "101.0", "1", 3),
		bookOrder("S5", "C", orders.Sell, "100.5", "1", 5),
		bookOrder("S7", "A", orders.Sell, "101", "1", 7),
		bookOrder("B4", "A", orders.Buy, "99", "1", 4),
		bookOrder("B8", "A", orders.Buy, "99.5", "1", 8),
		bookOrder("B2", "A", orders.Buy, "99", "1", 2),
	)
	if err := book.Verify(); err != nil {
		t.Fatal(err)
	}
	if got, want := bookIDs(book), []string{"B8", "B2", "B4", "S5", "S3", "S7", "S9"}; !slices.Equal(got, want) {
		t.Fatalf("book %v, want %v", got, want)
	}
	if book.Sequence() != 9 || book.Len() != 7 {
		t.Fatalf("sequence %d, %d orders; want 9, 7", book.Sequence(), book.Len())
	}
	bid, _ := book.BestBid()
	ask, _ := book.BestAsk()
	if bid.Cmp(amt("99.5")) != 0 || ask.Cmp(amt("100.5")) != 0 {
		t.Fatalf("best bid %s, best ask %s", bid, ask)
	}
}

func TestOrderBookRemove(t *testing.T) {
	book := newBook(t,
		bookOrder("B1", "A", orders.Buy, "99", "1", 1),
		bookOrder("B2", "B", orders.Buy, "99", "2", 2),
		bookOrder("B3", "A", orders.Buy, "98", "3", 3),
		bookOrder("S1", "A", orders.Sell, "101", "1", 4),
	)
	got, ok := book.Remove("B2")
	if !ok || got.ID != "B2" || got.Remaining.Cmp(amt("2")) != 0 {
		t.Fatalf("Remove(B2) = %+v, %v", got, ok)
	}
	if _, ok := book.Remove("B2"); ok {
		t.Fatal("B2 was removed twice")
	}
	if _, ok := book.Get("B2"); ok {
		t.Fatal("Get finds a removed order")
	}
	if o, ok := book.Get("B1"); !ok || o.Price.Cmp(amt("99")) != 0 || o.Status() != orders.StatusOpen {
		t.Fatalf("Get(B1) = %+v, %v", o, ok)
	}
	// The best level's last order leaves: the next level is the best.
	book.Remove("B1")
	if bid, ok := book.BestBid(); !ok || bid.Cmp(amt("98")) != 0 {
		t.Fatalf("best bid %s, %v; want 98", bid, ok)
	}
	if err := book.Verify(); err != nil {
		t.Fatal(err)
	}

	// A cancel of all of an account's orders removes each as it is yielded.
	var canceled []string
	for o := range book.AccountOrders("A") {
		if _, ok := book.Remove(o.ID); !ok {
			t.Fatalf("%s yielded but not removed", o.ID)
		}
		canceled = append(canceled, o.ID)
	}
	if !slices.Equal(canceled, []string{"B3", "S1"}) || book.Len() != 0 {
		t.Fatalf("canceled %v, %d left", canceled, book.Len())
	}
	if _, ok := book.BestBid(); ok {
		t.Fatal("an empty book has a best bid")
	}
	if err := book.Verify(); err != nil {
		t.Fatal(err)
	}
}

func TestOrderBookOpposing(t *testing.T) {
	book := newBook(t,
		bookOrder("A1", "M", orders.Sell, "100", "1", 1),
		bookOrder("A2", "M", orders.Sell, "100", "2", 2),
		bookOrder("A3", "N", orders.Sell, "101", "5", 3),
		bookOrder("A4", "M", orders.Sell, "103", "1", 4),
		bookOrder("B1", "M", orders.Buy, "99", "1", 5),
		bookOrder("B2", "N", orders.Buy, "98", "1", 6),
	)
	tests := []struct {
		name            string
		taker           orders.Side
		worst, quantity string
		want            []string
		complete        bool
	}{
		{"nothing in reach", orders.Buy, "99.5", "1", nil, true},
		{"the first maker covers the taker", orders.Buy, "100", "0.5", []string{"A1"}, false},
		{"a maker covers the taker exactly", orders.Buy, "101", "1", []string{"A1"}, false},
		{"the level covers the taker, the next is out of reach", orders.Buy, "100", "3", []string{"A1", "A2"}, true},
		{"the level covers the taker, the next is in reach", orders.Buy, "101", "3", []string{"A1", "A2"}, false},
		{"everything in reach is less than the taker", orders.Buy, "101", "100", []string{"A1", "A2", "A3"}, true},
		{"the whole side is less than the taker", orders.Buy, "200", "100", []string{"A1", "A2", "A3", "A4"}, true},
		{"the whole side covers the taker exactly", orders.Buy, "200", "9", []string{"A1", "A2", "A3", "A4"}, true},
		{"a sell meets the bids", orders.Sell, "90", "1.5", []string{"B1", "B2"}, true},
		{"a sell meets the bids, covered by the first", orders.Sell, "90", "0.5", []string{"B1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := book.Opposing(tt.taker, amt(tt.worst), amt(tt.quantity))
			var ids []string
			for _, r := range got.Resting {
				ids = append(ids, r.OrderID)
			}
			if !slices.Equal(ids, tt.want) || got.Complete != tt.complete {
				t.Fatalf("Opposing = %v complete %v, want %v complete %v", ids, got.Complete, tt.want, tt.complete)
			}
		})
	}
}

// alwaysFunded is a funds check every hold passes.
func alwaysFunded(string, decimal.Decimal) bool { return true }

// limitOrder is account T's order; price "" is a market order's none.
func limitOrder(id string, side orders.Side, tif orders.TimeInForce, quantity, price string) orders.Order {
	o := orders.Order{ID: id, ClientOrderID: "c-" + id, Account: "T", Symbol: bookUSD.Symbol, Side: side,
		Type: orders.Limit, TimeInForce: tif, Quantity: amt(quantity), CreatedAt: bookCreated}
	if price == "" {
		o.Type = orders.Market
	} else {
		p := amt(price)
		o.Price = &p
	}
	return o
}

// decide decides order against book.
func decide(t testing.TB, book *orders.OrderBook, order orders.Order) orders.Decision {
	t.Helper()
	d, err := orders.Decide(order, bookUSD, "", book.OpposingFor(order), alwaysFunded)
	if err != nil {
		t.Fatalf("Decide: %v", err)
	}
	return d
}

func TestOrderBookApply(t *testing.T) {
	book := newBook(t,
		bookOrder("A1", "M", orders.Sell, "100", "1", 1),
		bookOrder("A2", "N", orders.Sell, "100", "2", 2),
		bookOrder("A3", "M", orders.Sell, "101", "5", 3),
		bookOrder("B1", "M", orders.Buy, "99", "1", 4),
	)
	// A buy of 2.5 at 100 takes A1 whole and 1 of A2, and rests nothing.
	order := limitOrder("T1", orders.Buy, orders.GTC, "2.5", "100.5")
	d := decide(t, book, order)
	makers, err := book.Apply(order, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"A1 filled remaining 0 hold 0 filled 1 notional 100 fees 0.1",
		"A2 partially_filled remaining 0.5 hold 0.5 filled 1.5 notional 150 fees 0.15",
	}
	var got []string
	for _, m := range makers {
		status := orders.StatusFilled
		if m.Remaining.IsPos() {
			status = m.Status()
		}
		got = append(got, fmt.Sprintf("%s %s remaining %s hold %s filled %s notional %s fees %s", m.ID, status,
			m.Remaining.Trim(0), m.Hold.Trim(0), m.Filled.Trim(0), m.Notional.Trim(0), m.Fees.Trim(0)))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("makers after the fill:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if a2, _ := book.Get("A2"); fmt.Sprintf("%+v", a2) != fmt.Sprintf("%+v", makers[1]) {
		t.Fatalf("A2 rests as %+v, Apply said %+v", a2, makers[1])
	}
	if _, ok := book.Get("A1"); ok {
		t.Fatal("the filled maker A1 is still in the book")
	}

	// A buy of 2 at 100.5 takes A2's 0.5 and rests 1.5 with the next
	// sequence, the best bid now.
	order = limitOrder("T2", orders.Buy, orders.GTC, "2", "100.5")
	d = decide(t, book, order)
	if _, err := book.Apply(order, d, nil); err != nil {
		t.Fatal(err)
	}
	rested, ok := book.Get("T2")
	if !ok || rested.Sequence != 5 || rested.Remaining.Cmp(amt("1.5")) != 0 || rested.Filled.Cmp(amt("0.5")) != 0 ||
		rested.Hold.Cmp(d.RestingHold) != 0 || rested.Status() != orders.StatusPartiallyFilled ||
		rested.ClientOrderID != "c-T2" || !rested.CreatedAt.Equal(bookCreated) {
		t.Fatalf("T2 rests as %+v, %v", rested, ok)
	}
	if got, want := bookIDs(book), []string{"T2", "B1", "A3"}; !slices.Equal(got, want) {
		t.Fatalf("book %v, want %v", got, want)
	}
	if err := book.Verify(); err != nil {
		t.Fatal(err)
	}
}

// TestOrderBookApplyRefusesAMismatch: a decision not made against the
// book as it stands is refused whole, and the book is left as it was.
func TestOrderBookApplyRefusesAMismatch(t *testing.T) {
	resting := []orders.BookOrder{
		bookOrder("A1", "M", orders.Sell, "100", "1", 1),
		bookOrder("A2", "N", orders.Sell, "100", "2", 2),
		bookOrder("A3", "M", orders.Sell, "101", "5", 3),
		bookOrder("B1", "M", orders.Buy, "99", "1", 4),
	}
	takes := limitOrder("T1", orders.Buy, orders.GTC, "2.5", "100.5")
	// decidedOn decides order against the given orders as the whole side.
	decidedOn := func(t *testing.T, order orders.Order, side ...orders.BookOrder) orders.Decision {
		d, err := orders.Decide(order, bookUSD, "", func(decimal.Decimal) orders.Book {
			book := orders.Book{Complete: true}
			for _, o := range side {
				book.Resting = append(book.Resting, o.Resting())
			}
			return book
		}, alwaysFunded)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := []struct {
		name   string
		order  orders.Order
		decide func(t *testing.T, book *orders.OrderBook) orders.Decision
		says   string
	}{
		{"a fill of an order not in the book", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			return decidedOn(t, takes, bookOrder("X", "M", orders.Sell, "100", "3", 1))
		}, "a trade fills X where A1 is next in priority"},
		{"makers out of priority", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			first := resting[1]
			first.Sequence = 0 // ahead of A1, as the book does not hold it
			return decidedOn(t, takes, first, resting[0])
		}, "a trade fills A2 where A1 is next in priority"},
		{"a maker that ran out of orders", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			book.Remove("A2")
			book.Remove("A3")
			return decidedOn(t, takes, resting[0], resting[1])
		}, "trade 1 fills A2, which does not rest on the book"},
		{"a maker's remaining that does not follow", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			d := decide(t, book, takes)
			d.Trades[1].Maker.Remaining, d.Trades[1].MakerRemaining = amt("0.6"), amt("0.6")
			return d
		}, "A2 is left with 0.5, its trade says 0.6"},
		{"a maker left with more than it had", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			return decidedOn(t, takes, bookOrder("A1", "M", orders.Sell, "100", "3", 1))
		}, "A1 has 1 left, its trade takes 2.5"},
		{"a maker's hold that does not follow", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			d := decide(t, book, takes)
			d.Trades[1].Maker.Hold = amt("1")
			return d
		}, "A2 holds 2 and gives up 1.5: its trade says it keeps 1 and releases 0"},
		{"a maker of another account", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			d := decide(t, book, takes)
			d.Trades[0].MakerAccount = "Z"
			return d
		}, "A1 is of account M, its trade says Z"},
		{"a maker passed with some left", takes, func(t *testing.T, book *orders.OrderBook) orders.Decision {
			d := decide(t, book, takes)
			d.Trades[0].Maker.Remaining, d.Trades[0].MakerRemaining = amt("0.5"), amt("0.5")
			return d
		}, "A1 keeps 0.5 and a later trade passes it"},
		{"a taker resting across the book", limitOrder("T1", orders.Buy, orders.GTC, "1", "100"),
			func(t *testing.T, book *orders.OrderBook) orders.Decision {
				return decidedOn(t, limitOrder("T1", orders.Buy, orders.GTC, "1", "100"))
			}, "rests at 100 across A1 at 100"},
		{"a taker resting in the book already", limitOrder("B1", orders.Buy, orders.GTC, "1", "98"),
			func(t *testing.T, book *orders.OrderBook) orders.Decision {
				return decide(t, book, limitOrder("B1", orders.Buy, orders.GTC, "1", "98"))
			}, "rests in the book already"},
		{"a market order resting", limitOrder("T1", orders.Buy, orders.IOC, "1", ""),
			func(t *testing.T, book *orders.OrderBook) orders.Decision {
				d := decide(t, book, limitOrder("T1", orders.Buy, orders.IOC, "1", ""))
				d.Rests = true
				return d
			}, "a market order without a limit price rests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			book := newBook(t, resting...)
			d := tt.decide(t, book)
			before := bookState(book)
			_, err := book.Apply(tt.order, d, nil)
			if !errors.Is(err, orders.ErrDecisionMismatch) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("Apply = %v, want ErrDecisionMismatch saying %q", err, tt.says)
			}
			if after := bookState(book); after != before {
				t.Fatalf("a refused Apply changed the book:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

func TestOrderBookDepth(t *testing.T) {
	book := newBook(t,
		bookOrder("A1", "M", orders.Sell, "100.5", "1", 1),
		bookOrder("A2", "N", orders.Sell, "100.5", "2.25", 2),
		bookOrder("A3", "M", orders.Sell, "101", "5", 3),
		bookOrder("A4", "M", orders.Sell, "103", "1", 4),
		bookOrder("B1", "M", orders.Buy, "99", "1.5", 5),
	)
	describe := func(levels []orders.DepthLevel) []string {
		var s []string
		for _, l := range levels {
			s = append(s, fmt.Sprintf("%s×%s/%d", l.Price, l.Quantity, l.Orders))
		}
		return s
	}
	depth, err := book.Depth(bookUSD, 2)
	if err != nil {
		t.Fatal(err)
	}
	if depth.Symbol != bookUSD.Symbol || !slices.Equal(describe(depth.Bids), []string{"99.0×1.50/1"}) ||
		!slices.Equal(describe(depth.Asks), []string{"100.5×3.25/2", "101.0×5.00/1"}) {
		t.Fatalf("depth %s: bids %v asks %v", depth.Symbol, describe(depth.Bids), describe(depth.Asks))
	}
	book.Remove("A1")
	book.Remove("B1")
	if depth, err = book.Depth(bookUSD, orders.MaxBookDepth); err != nil {
		t.Fatal(err)
	}
	if len(depth.Bids) != 0 || depth.Bids == nil ||
		!slices.Equal(describe(depth.Asks), []string{"100.5×2.25/1", "101.0×5.00/1", "103.0×1.00/1"}) {
		t.Fatalf("depth: bids %v asks %v", describe(depth.Bids), describe(depth.Asks))
	}
	for _, bad := range []int{0, orders.MaxBookDepth + 1} {
		if _, err := book.Depth(bookUSD, bad); !errors.Is(err, orders.ErrInvalidQuery) {
			t.Fatalf("Depth(%d) = %v, want ErrInvalidQuery", bad, err)
		}
	}
}

// TestOrderBookKeepsAHugeLevelExactly: a level whose quantity needs more
// digits than the decimal type has is counted again from its orders once
// it fits, never rounded.
func TestOrderBookKeepsAHugeLevelExactly(t *testing.T) {
	// 15 digits and 4 decimals fit; twice the 15 digits and 4 decimals do not.
	book := newBook(t, bookOrder("A1", "M", orders.Sell, "100", "999999999999999", 1),
		bookOrder("A2", "M", orders.Sell, "100", "0.0001", 2),
		bookOrder("A3", "M", orders.Sell, "100", "999999999999999", 3))
	if _, err := book.Depth(bookUSD, 1); !errors.Is(err, orders.ErrInexact) {
		t.Fatalf("Depth of a level past 19 digits = %v, want ErrInexact", err)
	}
	book.Remove("A3")
	depth, err := book.Depth(bookUSD, 1)
	if err != nil || depth.Asks[0].Quantity.String() != "999999999999999.0001" {
		t.Fatalf("Depth = %+v, %v", depth.Asks, err)
	}
	if err := book.Verify(); err != nil {
		t.Fatal(err)
	}
}

// bookModel is the reference the property test holds the book to: a plain
// list of the resting orders, searched and sorted afresh for every use.
type bookModel struct {
	resting  []orders.BookOrder
	sequence int64
}

// side is the orders resting on side, in priority order.
func (m *bookModel) side(side orders.Side) []orders.BookOrder {
	var out []orders.BookOrder
	for _, o := range m.resting {
		if o.Side == side {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b orders.BookOrder) int {
		byPrice := a.Price.Cmp(b.Price)
		if side == orders.Buy {
			byPrice = -byPrice
		}
		if byPrice != 0 {
			return byPrice
		}
		return int(a.Sequence - b.Sequence)
	})
	return out
}

// opposing is the whole side a taker on side meets.
func (m *bookModel) opposing(side orders.Side) orders.OpposingSide {
	return func(decimal.Decimal) orders.Book {
		book := orders.Book{Complete: true}
		for _, o := range m.side(side.Opposite()) {
			book.Resting = append(book.Resting, o.Resting())
		}
		return book
	}
}

func (m *bookModel) find(id string) int {
	return slices.IndexFunc(m.resting, func(o orders.BookOrder) bool { return o.ID == id })
}

// apply is what a decision does to the orders, written out plainly.
func (m *bookModel) apply(t *rapid.T, order orders.Order, d orders.Decision) {
	for _, tr := range d.Trades {
		i := m.find(tr.MakerOrderID)
		if i < 0 {
			t.Fatalf("the decision fills %s, which the model does not hold", tr.MakerOrderID)
		}
		o := &m.resting[i]
		var errs [3]error
		o.Filled, errs[0] = orders.ExactAdd(o.Filled, tr.Quantity)
		o.Notional, errs[1] = orders.ExactAdd(o.Notional, tr.Notional)
		o.Fees, errs[2] = orders.ExactAdd(o.Fees, tr.MakerFee)
		if err := errors.Join(errs[:]...); err != nil {
			t.Fatal(err)
		}
		o.Remaining, o.Hold = tr.Maker.Remaining, tr.Maker.Hold
		if o.Remaining.IsZero() {
			m.resting = slices.Delete(m.resting, i, i+1)
		}
	}
	if d.Rests {
		m.sequence++
		m.resting = append(m.resting, orders.BookOrder{ID: order.ID, ClientOrderID: order.ClientOrderID,
			Account: order.Account, Side: order.Side, TimeInForce: d.TimeInForce, PostOnly: order.PostOnly,
			Price: *order.Price, Quantity: order.Quantity, Remaining: d.Remaining, Hold: d.RestingHold,
			Filled: d.Filled, Notional: d.Notional, Fees: d.Fees, CreatedAt: order.CreatedAt, Sequence: m.sequence})
	}
}

// crosses reports whether o would cross the model's opposite side.
func (m *bookModel) crosses(o orders.BookOrder) bool {
	for _, other := range m.resting {
		if other.Side != o.Side && (o.Side == orders.Buy && other.Price.Cmp(o.Price) <= 0 ||
			o.Side == orders.Sell && other.Price.Cmp(o.Price) >= 0) {
			return true
		}
	}
	return false
}

// sameBookOrder compares two orders field by field, amounts by value.
func sameBookOrder(a, b orders.BookOrder) bool {
	return a.ID == b.ID && a.ClientOrderID == b.ClientOrderID && a.Account == b.Account && a.Side == b.Side &&
		a.TimeInForce == b.TimeInForce && a.PostOnly == b.PostOnly && a.Price.Cmp(b.Price) == 0 &&
		a.Quantity.Cmp(b.Quantity) == 0 && a.Remaining.Cmp(b.Remaining) == 0 && a.Hold.Cmp(b.Hold) == 0 &&
		a.Filled.Cmp(b.Filled) == 0 && a.Notional.Cmp(b.Notional) == 0 && a.Fees.Cmp(b.Fees) == 0 &&
		a.CreatedAt.Equal(b.CreatedAt) && a.Sequence == b.Sequence
}

// bookSteps counts what the random steps came to, to show the generator
// reaches every kind of step and decision.
var bookSteps = struct {
	sync.Mutex
	seen map[string]int
}{seen: map[string]int{}}

func countBookStep(key string) {
	bookSteps.Lock()
	bookSteps.seen[key]++
	bookSteps.Unlock()
}

var bookAccounts = []string{"A", "B", "C", "D", "E", "F"}

func drawBookPrice(t *rapid.T, label string) decimal.Decimal {
	return decimal.MustNew(int64(rapid.IntRange(190, 210).Draw(t, label))*5, 1) // 95.0 … 105.0 by the tick
}

func drawBookQuantity(t *rapid.T, label string) decimal.Decimal {
	scale := rapid.IntRange(0, 2).Draw(t, label+" scale")
	return decimal.MustNew(int64(rapid.IntRange(1, 40).Draw(t, label)), scale)
}

// TestOrderBookAgreesWithModel drives random rests, cancels and orders
// decided by Decide through the book and through the model side by side.
// After every step the book keeps its invariants (Verify), holds the
// model's orders in the model's priority order, shows the depth and best
// prices the model's orders add up to, and lists each account's orders;
// and every order is decided the same through the book's Opposing (a
// page of the side) as through the model's whole side.
func TestOrderBookAgreesWithModel(t *testing.T) {
	rapid.Check(t, checkBookAgainstModel)
	bookSteps.Lock()
	defer bookSteps.Unlock()
	for _, key := range slices.Sorted(maps.Keys(bookSteps.seen)) {
		t.Logf("%6d %s", bookSteps.seen[key], key)
	}
}

func checkBookAgainstModel(t *rapid.T) {
	book := orders.NewOrderBook(bookUSD.Symbol)
	model := &bookModel{}
	ids := 0
	newID := func() string {
		ids++
		return fmt.Sprintf("ORD_%d", ids)
	}
	steps := rapid.IntRange(1, 200).Draw(t, "steps")
	for range steps {
		// Orders most often, rests next (they deepen the book), cancels
		// less, a cancel of all of an account's orders now and then.
		switch step := rapid.IntRange(0, 39).Draw(t, "step"); {
		case step < 22: // an order, decided through both and applied to both
			order := orders.Order{ID: newID(), Account: rapid.SampledFrom(bookAccounts).Draw(t, "account"),
				Symbol: bookUSD.Symbol, Side: rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(t, "side"),
				Type: orders.Limit, Quantity: drawBookQuantity(t, "quantity"), CreatedAt: bookCreated}
			order.ClientOrderID = "c-" + order.ID
			if rapid.IntRange(0, 5).Draw(t, "market?") == 0 {
				order.Type, order.TimeInForce = orders.Market, orders.IOC
			} else {
				price := drawBookPrice(t, "price")
				order.Price = &price
				order.TimeInForce = rapid.SampledFrom([]orders.TimeInForce{orders.GTC, orders.GTC, orders.IOC, orders.FOK, ""}).Draw(t, "tif")
				order.PostOnly = order.TimeInForce == orders.GTC && rapid.IntRange(0, 4).Draw(t, "post-only?") == 0
			}
			opposing := book.OpposingFor(order)
			got, err := orders.Decide(order, bookUSD, "", func(worst decimal.Decimal) orders.Book {
				page := opposing(worst)
				checkPage(t, model, order, worst, page)
				countBookStep(fmt.Sprintf("opposing side complete %v", page.Complete))
				return page
			}, alwaysFunded)
			if err != nil {
				t.Fatalf("Decide through the book: %v", err)
			}
			want, err := orders.Decide(order, bookUSD, "", model.opposing(order.Side), alwaysFunded)
			if err != nil {
				t.Fatalf("Decide through the model: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("order %+v decided through the book:\n%+v\nthrough the model:\n%+v", order, got, want)
			}
			makers, err := book.Apply(order, got, []orders.BookOrder{})
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(makers) != len(got.Trades) {
				t.Fatalf("Apply returned %d makers for %d trades", len(makers), len(got.Trades))
			}
			for i, m := range makers {
				tr := got.Trades[i]
				if m.ID != tr.MakerOrderID || m.Remaining.Cmp(tr.Maker.Remaining) != 0 || m.Hold.Cmp(tr.Maker.Hold) != 0 {
					t.Fatalf("Apply's maker %d is %+v after trade %+v", i, m, tr)
				}
			}
			model.apply(t, order, got)
			countBookStep(fmt.Sprintf("order %s %s%s, %d trades", got.Status, got.CancelReason, got.RejectReason, min(len(got.Trades), 3)))
		case step < 28: // a cancel, now and then of an order not in the book
			id := "ORD_none"
			if len(model.resting) > 0 && rapid.IntRange(0, 9).Draw(t, "unknown?") > 0 {
				id = rapid.SampledFrom(model.resting).Draw(t, "canceled").ID
			}
			got, ok := book.Remove(id)
			i := model.find(id)
			if ok != (i >= 0) || ok && !sameBookOrder(got, model.resting[i]) {
				t.Fatalf("Remove(%s) = %+v, %v; the model holds it at %d", id, got, ok, i)
			}
			if ok {
				model.resting = slices.Delete(model.resting, i, i+1)
			}
			countBookStep(fmt.Sprintf("cancel, found %v", ok))
		case step < 29: // a cancel of all of an account's orders
			account := rapid.SampledFrom(bookAccounts).Draw(t, "account")
			var got []string
			for o := range book.AccountOrders(account) {
				if _, ok := book.Remove(o.ID); !ok {
					t.Fatalf("%s yielded, not removed", o.ID)
				}
				got = append(got, o.ID)
			}
			var want []string
			model.resting = slices.DeleteFunc(model.resting, func(o orders.BookOrder) bool {
				if o.Account == account {
					want = append(want, o.ID)
				}
				return o.Account == account
			})
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("cancel-all of %s removed %v, the model %v", account, got, want)
			}
			countBookStep("cancel all")
		default: // a rest, as a load from PostgreSQL does: any sequence, part filled maybe
			side := rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(t, "side")
			price := drawBookPrice(t, "price")
			remaining := drawBookQuantity(t, "remaining")
			filled := decimal.Zero
			if rapid.Bool().Draw(t, "part filled?") {
				filled = drawBookQuantity(t, "filled")
			}
			o := orders.BookOrder{ID: newID(), Account: rapid.SampledFrom(bookAccounts).Draw(t, "account"), Side: side,
				TimeInForce: orders.GTC, Price: price, Remaining: remaining, Filled: filled, CreatedAt: bookCreated}
			o.ClientOrderID = "c-" + o.ID
			var err error
			if o.Quantity, err = orders.ExactAdd(filled, remaining); err != nil {
				t.Fatal(err)
			}
			if o.Notional, err = filled.Mul(price); err != nil {
				t.Fatal(err)
			}
			if o.Hold, err = orders.Hold(side, remaining, price, bookUSD.TakerFeeBps); err != nil {
				t.Fatal(err)
			}
			o.Sequence = model.sequence + 1
			if rapid.Bool().Draw(t, "an earlier sequence?") {
				o.Sequence = rapid.Int64Range(1, model.sequence+1).Draw(t, "sequence")
			}
			duplicate := slices.ContainsFunc(model.resting, func(other orders.BookOrder) bool {
				return other.Sequence == o.Sequence && other.Side == o.Side && other.Price.Cmp(o.Price) == 0
			})
			if rapid.IntRange(0, 9).Draw(t, "a resting id?") == 0 && len(model.resting) > 0 {
				o.ID, duplicate = rapid.SampledFrom(model.resting).Draw(t, "its id").ID, true
			}
			err = book.Rest(o)
			refused := duplicate || model.crosses(o)
			switch {
			case refused && !errors.Is(err, orders.ErrBookRefused):
				t.Fatalf("Rest(%+v) = %v; want it refused", o, err)
			case !refused && err != nil:
				t.Fatalf("Rest(%+v): %v", o, err)
			case !refused:
				model.resting = append(model.resting, o)
				model.sequence = max(model.sequence, o.Sequence)
			}
			countBookStep(fmt.Sprintf("rest, refused %v", refused))
		}
		checkBook(t, book, model)
	}
}

// checkPage holds what Opposing gave for order limited to worst to its
// word: the model's side best first, none past worst, through the first
// that covers the order's quantity, and Complete unless an order in reach
// was left out.
func checkPage(t *rapid.T, model *bookModel, order orders.Order, worst decimal.Decimal, page orders.Book) {
	var inReach []orders.Resting
	for _, o := range model.side(order.Side.Opposite()) {
		if order.Side == orders.Buy && o.Price.Cmp(worst) <= 0 || order.Side == orders.Sell && o.Price.Cmp(worst) >= 0 {
			inReach = append(inReach, o.Resting())
		}
	}
	if len(page.Resting) > len(inReach) || !slices.Equal(page.Resting, inReach[:len(page.Resting)]) {
		t.Fatalf("Opposing(%s, %s) gave %+v; in reach: %+v", order.Side, worst, page.Resting, inReach)
	}
	var covered decimal.Decimal
	for i, r := range page.Resting {
		if covered.Cmp(order.Quantity) >= 0 {
			t.Fatalf("Opposing(%s, %s, %s) gave %d orders past the %d that cover it", order.Side, worst,
				order.Quantity, len(page.Resting)-i, i)
		}
		covered, _ = orders.ExactAdd(covered, r.Remaining)
	}
	if page.Complete != (len(page.Resting) == len(inReach)) {
		t.Fatalf("Opposing(%s, %s) gave %d of %d orders in reach, complete %v", order.Side, worst,
			len(page.Resting), len(inReach), page.Complete)
	}
}

// checkBook holds the book to the model after a step.
func checkBook(t *rapid.T, book *orders.OrderBook, model *bookModel) {
	if err := book.Verify(); err != nil {
		t.Fatal(err)
	}
	if book.Len() != len(model.resting) || book.Sequence() != model.sequence {
		t.Fatalf("book of %d orders to sequence %d; the model %d to %d", book.Len(), book.Sequence(),
			len(model.resting), model.sequence)
	}
	depth, err := book.Depth(bookUSD, orders.MaxBookDepth)
	if err != nil {
		t.Fatal(err)
	}
	for _, side := range []orders.Side{orders.Buy, orders.Sell} {
		want := model.side(side)
		got := slices.Collect(book.Orders(side))
		if len(got) != len(want) {
			t.Fatalf("%d %s orders, the model %d", len(got), side, len(want))
		}
		for i := range got {
			if !sameBookOrder(got[i], want[i]) {
				t.Fatalf("%s order %d is %+v, the model's %+v", side, i, got[i], want[i])
			}
			if o, ok := book.Get(want[i].ID); !ok || !sameBookOrder(o, want[i]) {
				t.Fatalf("Get(%s) = %+v, %v; the model's %+v", want[i].ID, o, ok, want[i])
			}
		}
		var levels []orders.DepthLevel
		for _, o := range want {
			if n := len(levels); n > 0 && levels[n-1].Price.Cmp(o.Price) == 0 {
				levels[n-1].Quantity, _ = orders.ExactAdd(levels[n-1].Quantity, o.Remaining)
				levels[n-1].Orders++
				continue
			}
			levels = append(levels, orders.DepthLevel{Price: o.Price, Quantity: o.Remaining, Orders: 1})
		}
		shown, best := depth.Asks, book.BestAsk
		if side == orders.Buy {
			shown, best = depth.Bids, book.BestBid
		}
		if len(shown) != min(len(levels), orders.MaxBookDepth) {
			t.Fatalf("%d %s levels, the model %d", len(shown), side, len(levels))
		}
		for i := range shown {
			if shown[i].Price.Cmp(levels[i].Price) != 0 || shown[i].Quantity.Cmp(levels[i].Quantity) != 0 ||
				shown[i].Orders != levels[i].Orders {
				t.Fatalf("%s level %d is %+v, the model's %+v", side, i, shown[i], levels[i])
			}
		}
		price, ok := best()
		if ok != (len(levels) > 0) || ok && price.Cmp(levels[0].Price) != 0 {
			t.Fatalf("best %s %s, %v; the model's levels %+v", side, price, ok, levels)
		}
	}
	for _, account := range bookAccounts {
		var got, want []string
		for o := range book.AccountOrders(account) {
			got = append(got, o.ID)
		}
		for _, o := range model.resting {
			if o.Account == account {
				want = append(want, o.ID)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("account %s's orders %v, the model's %v", account, got, want)
		}
	}
}
