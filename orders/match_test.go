package orders_test

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

var amt = decimal.MustParse

// restingOf is a resting order of account "m"; the takers are account "t".
func restingOf(id, price, remaining string, sequence int64) orders.Resting {
	return orders.Resting{OrderID: id, Account: "m", Price: amt(price), Remaining: amt(remaining), Sequence: sequence}
}

// ownResting is r made the taker's own.
func ownResting(r orders.Resting) orders.Resting { r.Account = "t"; return r }

func limitTaker(side orders.Side, tif orders.TimeInForce, quantity, price string) orders.Taker {
	return orders.Taker{Account: "t", Side: side, Type: orders.Limit, TimeInForce: tif, Quantity: amt(quantity), Price: amt(price)}
}

func postOnlyTaker(side orders.Side, quantity, price string) orders.Taker {
	t := limitTaker(side, orders.GTC, quantity, price)
	t.PostOnly = true
	return t
}

func marketTaker(side orders.Side, quantity, protection string) orders.Taker {
	return orders.Taker{Account: "t", Side: side, Type: orders.Market, TimeInForce: orders.IOC, Quantity: amt(quantity), ProtectionPrice: amt(protection)}
}

func completeBook(resting ...orders.Resting) orders.Book {
	return orders.Book{Resting: resting, Complete: true}
}

func bookPage(resting ...orders.Resting) orders.Book { return orders.Book{Resting: resting} }

// wantFill is a fill of maker's order id at price, leaving makerRemaining.
type wantFill struct{ id, price, quantity, makerRemaining string }

// wantMatch is a MatchResult in short.
type wantMatch struct {
	outcome   orders.Outcome
	fills     []wantFill
	remaining string
	cancel    orders.CancelReason
	reject    orders.RejectReason
}

func TestMatchRules(t *testing.T) {
	asks := []orders.Resting{
		restingOf("a1", "100", "1", 5),
		restingOf("a2", "100", "2", 7), // same price, later: after a1
		restingOf("a3", "101", "3", 1), // earlier but worse: after the 100s
		restingOf("a4", "103", "4", 2),
	}
	bids := []orders.Resting{
		restingOf("b1", "99", "1", 9),
		restingOf("b2", "98", "2", 3),
		restingOf("b3", "97", "5", 4),
	}
	tests := []struct {
		name  string
		taker orders.Taker
		book  orders.Book
		want  wantMatch
	}{
		{"gtc rests on an empty side", limitTaker(orders.Buy, orders.GTC, "1", "100"), completeBook(),
			wantMatch{outcome: orders.OutcomeOpen, remaining: "1"}},
		{"gtc rests when the best ask is out of reach", limitTaker(orders.Buy, orders.GTC, "1", "99.9"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeOpen, remaining: "1"}},
		{"buy fills at the makers' prices in price-time order", limitTaker(orders.Buy, orders.GTC, "5", "102"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}, {"a3", "101", "2", "1"}}}},
		{"sell meets the highest bid first, at its price", limitTaker(orders.Sell, orders.GTC, "2", "90"), completeBook(bids...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0",
				fills: []wantFill{{"b1", "99", "1", "0"}, {"b2", "98", "1", "1"}}}},
		{"partial fill leaves the maker's remainder", limitTaker(orders.Buy, orders.GTC, "0.25", "100"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0", fills: []wantFill{{"a1", "100", "0.25", "0.75"}}}},
		{"gtc rests its remainder at its limit", limitTaker(orders.Buy, orders.GTC, "4", "100"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomePartiallyFilled, remaining: "1",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}}}},
		{"gtc rests when the complete side runs out", limitTaker(orders.Sell, orders.GTC, "10", "1"), completeBook(bids...),
			wantMatch{outcome: orders.OutcomePartiallyFilled, remaining: "2",
				fills: []wantFill{{"b1", "99", "1", "0"}, {"b2", "98", "2", "0"}, {"b3", "97", "5", "0"}}}},
		{"ioc cancels its remainder", limitTaker(orders.Buy, orders.IOC, "4", "100"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelUnfilledIOC, remaining: "1",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}}}},
		{"ioc with nothing in reach cancels all", limitTaker(orders.Sell, orders.IOC, "1", "99.5"), completeBook(bids...),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelUnfilledIOC, remaining: "1"}},
		{"fok that can fill whole fills", limitTaker(orders.Buy, orders.FOK, "6", "101"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}, {"a3", "101", "3", "0"}}}},
		{"fok short by a fraction does nothing", limitTaker(orders.Buy, orders.FOK, "6.01", "101"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelFOKUnfillable, remaining: "6.01"}},
		{"fok on an empty side does nothing", limitTaker(orders.Sell, orders.FOK, "1", "1"), completeBook(),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelFOKUnfillable, remaining: "1"}},
		{"fok counts only what fills before an own order", limitTaker(orders.Buy, orders.FOK, "2", "101"),
			completeBook(restingOf("a1", "100", "1", 1), ownResting(restingOf("o1", "100", "5", 2)), restingOf("a3", "101", "9", 3)),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelFOKUnfillable, remaining: "2"}},
		{"fok filled before an own order fills", limitTaker(orders.Buy, orders.FOK, "1", "101"),
			completeBook(restingOf("a1", "100", "1", 1), ownResting(restingOf("o1", "100", "5", 2))),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0", fills: []wantFill{{"a1", "100", "1", "0"}}}},
		{"post-only that would take is rejected", postOnlyTaker(orders.Buy, "1", "100"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeRejected, reject: orders.ReasonPostOnlyWouldTake, remaining: "1"}},
		{"post-only that would take an own order is rejected", postOnlyTaker(orders.Sell, "1", "99"),
			completeBook(ownResting(restingOf("o1", "99", "1", 1))),
			wantMatch{outcome: orders.OutcomeRejected, reject: orders.ReasonPostOnlyWouldTake, remaining: "1"}},
		{"post-only below the best ask rests", postOnlyTaker(orders.Buy, "1", "99.99"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeOpen, remaining: "1"}},
		{"post-only on an empty side rests", postOnlyTaker(orders.Sell, "1", "5"), completeBook(),
			wantMatch{outcome: orders.OutcomeOpen, remaining: "1"}},
		{"market buy fills within its protection price", marketTaker(orders.Buy, "3", "100"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}}}},
		{"market buy never pays above its protection price", marketTaker(orders.Buy, "9", "101"), completeBook(asks...),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelUnfilledMarket, remaining: "3",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}, {"a3", "101", "3", "0"}}}},
		{"market sell never sells below its protection price", marketTaker(orders.Sell, "9", "98"), completeBook(bids...),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelUnfilledMarket, remaining: "6",
				fills: []wantFill{{"b1", "99", "1", "0"}, {"b2", "98", "2", "0"}}}},
		{"market on an empty side cancels all", marketTaker(orders.Sell, "1", "1"), completeBook(),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelUnfilledMarket, remaining: "1"}},
		{"an own order first: nothing fills, all canceled", limitTaker(orders.Buy, orders.GTC, "1", "100"),
			completeBook(ownResting(restingOf("o1", "100", "1", 1)), restingOf("a2", "100", "1", 2)),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelSelfTradePrevented, remaining: "1"}},
		{"an own order next: fills before it stand", limitTaker(orders.Sell, orders.GTC, "3", "97"),
			completeBook(restingOf("b1", "99", "1", 1), ownResting(restingOf("o1", "98", "1", 2)), restingOf("b3", "97", "5", 3)),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelSelfTradePrevented, remaining: "2",
				fills: []wantFill{{"b1", "99", "1", "0"}}}},
		{"self-trade prevention beats ioc's own reason", limitTaker(orders.Buy, orders.IOC, "3", "100"),
			completeBook(restingOf("a1", "100", "1", 1), ownResting(restingOf("o1", "100", "1", 2))),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelSelfTradePrevented, remaining: "2",
				fills: []wantFill{{"a1", "100", "1", "0"}}}},
		{"self-trade prevention stops a market order", marketTaker(orders.Buy, "3", "200"),
			completeBook(ownResting(restingOf("o1", "100", "1", 1))),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelSelfTradePrevented, remaining: "3"}},
		{"an own order out of reach is no self-trade", limitTaker(orders.Buy, orders.GTC, "3", "100"),
			completeBook(restingOf("a1", "100", "1", 1), ownResting(restingOf("o1", "101", "1", 2))),
			wantMatch{outcome: orders.OutcomePartiallyFilled, remaining: "2", fills: []wantFill{{"a1", "100", "1", "0"}}}},
		{"an own order after the taker filled is no self-trade", limitTaker(orders.Buy, orders.GTC, "1", "100"),
			completeBook(restingOf("a1", "100", "1", 1), ownResting(restingOf("o1", "100", "1", 2))),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0", fills: []wantFill{{"a1", "100", "1", "0"}}}},
		{"a page that fills the taker is enough", limitTaker(orders.Buy, orders.GTC, "3", "100"), bookPage(asks[:2]...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}}}},
		{"a page ending out of reach is enough", limitTaker(orders.Buy, orders.GTC, "9", "100"), bookPage(asks[:3]...),
			wantMatch{outcome: orders.OutcomePartiallyFilled, remaining: "6",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "2", "0"}}}},
		{"a page ending at an own order is enough", limitTaker(orders.Buy, orders.IOC, "9", "100"),
			bookPage(restingOf("a1", "100", "1", 1), ownResting(restingOf("o1", "100", "1", 2))),
			wantMatch{outcome: orders.OutcomeCanceled, cancel: orders.CancelSelfTradePrevented, remaining: "8",
				fills: []wantFill{{"a1", "100", "1", "0"}}}},
		{"fok fillable within a page fills", limitTaker(orders.Buy, orders.FOK, "2", "100"), bookPage(asks[:2]...),
			wantMatch{outcome: orders.OutcomeFilled, remaining: "0",
				fills: []wantFill{{"a1", "100", "1", "0"}, {"a2", "100", "1", "1"}}}},
		{"post-only needs only the best of a page", postOnlyTaker(orders.Buy, "1", "99"), bookPage(asks[:1]...),
			wantMatch{outcome: orders.OutcomeOpen, remaining: "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.book.Resting)
			got, err := orders.Match(tt.taker, tt.book)
			if err != nil {
				t.Fatalf("Match: %v", err)
			}
			if !reflect.DeepEqual(tt.book.Resting, before) {
				t.Errorf("Match changed the book: %v, was %v", tt.book.Resting, before)
			}
			checkMatchResult(t, got, tt.want)
		})
	}
}

func checkMatchResult(t *testing.T, got orders.MatchResult, want wantMatch) {
	t.Helper()
	if got.Outcome != want.outcome || got.CancelReason != want.cancel || got.RejectReason != want.reject {
		t.Errorf("outcome %s (cancel %q, reject %q), want %s (cancel %q, reject %q)",
			got.Outcome, got.CancelReason, got.RejectReason, want.outcome, want.cancel, want.reject)
	}
	if got.Remaining.Cmp(amt(want.remaining)) != 0 {
		t.Errorf("remaining %s, want %s", got.Remaining, want.remaining)
	}
	filled := decimal.Decimal{}
	var gotFills []wantFill
	for _, f := range got.Fills {
		gotFills = append(gotFills, wantFill{f.MakerOrderID, f.Price.Trim(0).String(), f.Quantity.Trim(0).String(), f.MakerRemaining.Trim(0).String()})
		if f.MakerAccount == "t" {
			t.Errorf("fill %s trades with the taker's own account", f.MakerOrderID)
		}
		filled, _ = filled.Add(f.Quantity)
	}
	if !slices.Equal(gotFills, want.fills) {
		t.Errorf("fills %v, want %v", gotFills, want.fills)
	}
	if got.Filled.Cmp(filled) != 0 {
		t.Errorf("filled %s, fills add up to %s", got.Filled, filled)
	}
}

func TestMatchNeedsMoreOfAnIncompleteBook(t *testing.T) {
	asks := []orders.Resting{restingOf("a1", "100", "1", 1), restingOf("a2", "100", "1", 2)}
	tests := []struct {
		name  string
		taker orders.Taker
		book  orders.Book
	}{
		{"gtc past the page", limitTaker(orders.Buy, orders.GTC, "3", "100"), bookPage(asks...)},
		{"ioc past the page", limitTaker(orders.Buy, orders.IOC, "3", "100"), bookPage(asks...)},
		{"market past the page", marketTaker(orders.Buy, "3", "100"), bookPage(asks...)},
		{"fok past the page", limitTaker(orders.Buy, orders.FOK, "3", "100"), bookPage(asks...)},
		{"an empty page", limitTaker(orders.Buy, orders.GTC, "1", "100"), bookPage()},
		{"post-only on an empty page", postOnlyTaker(orders.Buy, "1", "100"), bookPage()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := orders.Match(tt.taker, tt.book)
			if !errors.Is(err, orders.ErrIncompleteBook) {
				t.Fatalf("Match = %+v, %v; want ErrIncompleteBook", got, err)
			}
			tt.book.Complete = true
			if _, err := orders.Match(tt.taker, tt.book); err != nil {
				t.Errorf("on the complete book: %v", err)
			}
		})
	}
}

func TestMatchRefusesMalformedInput(t *testing.T) {
	good := limitTaker(orders.Buy, orders.GTC, "1", "100")
	taker := func(change func(*orders.Taker)) orders.Taker {
		t := good
		change(&t)
		return t
	}
	asks := completeBook(restingOf("a1", "100", "1", 1))
	tests := []struct {
		name  string
		taker orders.Taker
		book  orders.Book
	}{
		{"no account", taker(func(t *orders.Taker) { t.Account = "" }), asks},
		{"unknown side", taker(func(t *orders.Taker) { t.Side = "hold" }), asks},
		{"unknown type", taker(func(t *orders.Taker) { t.Type = "stop" }), asks},
		{"unknown time in force", taker(func(t *orders.Taker) { t.TimeInForce = "day" }), asks},
		{"no time in force", taker(func(t *orders.Taker) { t.TimeInForce = "" }), asks},
		{"zero quantity", taker(func(t *orders.Taker) { t.Quantity = amt("0") }), asks},
		{"negative quantity", taker(func(t *orders.Taker) { t.Quantity = amt("-1") }), asks},
		{"limit without price", taker(func(t *orders.Taker) { t.Price = amt("0") }), asks},
		{"limit with protection price", taker(func(t *orders.Taker) { t.ProtectionPrice = amt("101") }), asks},
		{"post-only ioc", taker(func(t *orders.Taker) { t.PostOnly, t.TimeInForce = true, orders.IOC }), asks},
		{"post-only fok", taker(func(t *orders.Taker) { t.PostOnly, t.TimeInForce = true, orders.FOK }), asks},
		{"market without protection price", marketTaker(orders.Buy, "1", "0"), asks},
		{"market with limit price", func() orders.Taker { t := marketTaker(orders.Buy, "1", "100"); t.Price = amt("100"); return t }(), asks},
		{"market gtc", func() orders.Taker { t := marketTaker(orders.Buy, "1", "100"); t.TimeInForce = orders.GTC; return t }(), asks},
		{"market fok", func() orders.Taker { t := marketTaker(orders.Buy, "1", "100"); t.TimeInForce = orders.FOK; return t }(), asks},
		{"market post-only", func() orders.Taker { t := marketTaker(orders.Buy, "1", "100"); t.PostOnly = true; return t }(), asks},
		{"maker without id", good, completeBook(restingOf("", "100", "1", 1))},
		{"maker without account", good, completeBook(orders.Resting{OrderID: "a1", Price: amt("100"), Remaining: amt("1")})},
		{"maker listed twice", good, completeBook(restingOf("a1", "100", "1", 1), restingOf("a1", "100", "1", 2))},
		{"maker without price", good, completeBook(restingOf("a1", "0", "1", 1))},
		{"maker with nothing remaining", good, completeBook(restingOf("a1", "100", "0", 1))},
		{"asks worst first", good, completeBook(restingOf("a1", "101", "1", 1), restingOf("a2", "100", "1", 2))},
		{"bids worst first", limitTaker(orders.Sell, orders.GTC, "1", "1"), completeBook(restingOf("b1", "99", "1", 1), restingOf("b2", "100", "1", 2))},
		{"one price later first", good, completeBook(restingOf("a1", "100", "1", 2), restingOf("a2", "100", "1", 1))},
		{"one price one sequence", good, completeBook(restingOf("a1", "100", "1", 1), restingOf("a2", "100", "1", 1))},
		// Past the prices the taker reaches, still checked: the order is the
		// caller's promise about the whole list.
		{"out of order out of reach", good, completeBook(restingOf("a1", "200", "1", 1), restingOf("a2", "150", "1", 2))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := orders.Match(tt.taker, tt.book)
			if !errors.Is(err, orders.ErrMalformedMatch) {
				t.Fatalf("Match = %+v, %v; want ErrMalformedMatch", got, err)
			}
		})
	}
}

func TestMatchRefusesInexactArithmetic(t *testing.T) {
	// 10^18 - 0.01 needs 20 digits; the decimal type would round it.
	taker := limitTaker(orders.Buy, orders.GTC, "1000000000000000000", "100")
	_, err := orders.Match(taker, completeBook(restingOf("a1", "100", "0.01", 1)))
	if !errors.Is(err, orders.ErrInexact) {
		t.Fatalf("Match: %v, want ErrInexact", err)
	}
}

func TestTimeInForceValid(t *testing.T) {
	for _, tif := range []orders.TimeInForce{orders.GTC, orders.IOC, orders.FOK} {
		if !tif.Valid() {
			t.Errorf("%q is not valid", tif)
		}
	}
	for _, tif := range []orders.TimeInForce{"", "GTC", "day", "gtd"} {
		if tif.Valid() {
			t.Errorf("%q is valid", tif)
		}
	}
}

func TestFee(t *testing.T) {
	tests := []struct{ notional, bps, want string }{
		{"1000", "10", "1"},
		{"0.01", "1", "0.000001"},
		{"123.45", "2.5", "0.03086250"},
		{"50000", "0", "0"},
		{"0", "10", "0"},
		{"9999999999.99999999", "7", "6999999.999999999993"},
	}
	for _, tt := range tests {
		got, err := orders.Fee(amt(tt.notional), amt(tt.bps))
		if err != nil || got.Cmp(amt(tt.want)) != 0 {
			t.Errorf("Fee(%s, %s bps) = %s, %v; want %s", tt.notional, tt.bps, got, err, tt.want)
		}
	}
	// The exact fee has 22 decimals: refused, never rounded.
	if got, err := orders.Fee(amt("0.123456789012345678"), amt("3")); !errors.Is(err, orders.ErrInexact) {
		t.Errorf("Fee of an overlong result = %s, %v; want ErrInexact", got, err)
	}
	for _, bad := range [][2]string{{"-1", "10"}, {"1", "-10"}} {
		if got, err := orders.Fee(amt(bad[0]), amt(bad[1])); !errors.Is(err, orders.ErrMalformedMatch) {
			t.Errorf("Fee(%s, %s) = %s, %v; want ErrMalformedMatch", bad[0], bad[1], got, err)
		}
	}
}

func TestFeeOfAFill(t *testing.T) {
	f := orders.Fill{Price: amt("50000.12"), Quantity: amt("0.00012345")}
	notional, err := f.Notional()
	if err != nil || notional.Cmp(amt("6.1725148140")) != 0 {
		t.Fatalf("Notional = %s, %v", notional, err)
	}
	fee, err := orders.Fee(notional, amt("10"))
	if err != nil || fee.Cmp(amt("0.0061725148140")) != 0 {
		t.Fatalf("Fee = %s, %v", fee, err)
	}
}

func TestHold(t *testing.T) {
	tests := []struct {
		side                           orders.Side
		remaining, price, feeBps, want string
	}{
		{orders.Buy, "2", "100", "10", "200.2"},
		{orders.Buy, "0.5", "30000.5", "0", "15000.25"},
		{orders.Buy, "0", "100", "10", "0"},
		{orders.Sell, "2", "100", "10", "2"},
		{orders.Sell, "0.001", "0", "10", "0.001"}, // a sell's hold needs no price
	}
	for _, tt := range tests {
		got, err := orders.Hold(tt.side, amt(tt.remaining), amt(tt.price), amt(tt.feeBps))
		if err != nil || got.Cmp(amt(tt.want)) != 0 {
			t.Errorf("Hold(%s %s @ %s, %s bps) = %s, %v; want %s", tt.side, tt.remaining, tt.price, tt.feeBps, got, err, tt.want)
		}
	}
	bad := []struct {
		side                     orders.Side
		remaining, price, feeBps string
	}{
		{"hold", "1", "100", "10"},
		{orders.Buy, "-1", "100", "10"},
		{orders.Buy, "1", "0", "10"},
		{orders.Buy, "1", "100", "-10"},
	}
	for _, tt := range bad {
		if got, err := orders.Hold(tt.side, amt(tt.remaining), amt(tt.price), amt(tt.feeBps)); !errors.Is(err, orders.ErrMalformedMatch) {
			t.Errorf("Hold(%s %s @ %s, %s bps) = %s, %v; want ErrMalformedMatch", tt.side, tt.remaining, tt.price, tt.feeBps, got, err)
		}
	}
	if got, err := orders.Hold(orders.Buy, amt("100000000000"), amt("100000000"), amt("10")); !errors.Is(err, orders.ErrInexact) {
		t.Errorf("Hold overflowing = %s, %v; want ErrInexact", got, err)
	}
}
