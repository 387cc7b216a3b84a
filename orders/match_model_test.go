package orders_test

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/govalues/decimal"
	"pgregory.net/rapid"

	"github.com/ordergate/ordergate/orders"
)

// modelStop is why the reference model stopped taking.
type modelStop int

const (
	modelFilled     modelStop = iota // nothing left to fill
	modelOutOfReach                  // the best maker's price is beyond the taker's
	modelSelfTrade                   // the best maker is the taker's own
	modelExhausted                   // no maker left at all
)

// modelMatch is the obviously correct reference for orders.Match: it keeps
// the makers as an unordered set and, for each fill, scans all of them for
// the best one left (best price, then lowest sequence). It returns how it
// stopped, so the test knows whether a page of the book sufficed.
func modelMatch(taker orders.Taker, makers []orders.Resting) (orders.MatchResult, modelStop) {
	worst := taker.Price
	if taker.Type == orders.Market {
		worst = taker.ProtectionPrice
	}
	reaches := func(price decimal.Decimal) bool {
		if taker.Side == orders.Buy {
			return price.Cmp(worst) <= 0
		}
		return price.Cmp(worst) >= 0
	}
	left := make([]decimal.Decimal, len(makers))
	for i, m := range makers {
		left[i] = m.Remaining
	}
	best := func() int {
		found := -1
		for i, m := range makers {
			if left[i].IsZero() {
				continue
			}
			if found < 0 {
				found = i
				continue
			}
			byPrice := m.Price.Cmp(makers[found].Price)
			if taker.Side == orders.Sell {
				byPrice = -byPrice
			}
			if byPrice < 0 || byPrice == 0 && m.Sequence < makers[found].Sequence {
				found = i
			}
		}
		return found
	}
	nothing := orders.MatchResult{Remaining: taker.Quantity}

	if taker.PostOnly {
		i := best()
		if i >= 0 && reaches(makers[i].Price) {
			nothing.Outcome, nothing.RejectReason = orders.OutcomeRejected, orders.ReasonPostOnlyWouldTake
			return nothing, modelOutOfReach
		}
		nothing.Outcome = orders.OutcomeOpen
		if i < 0 {
			return nothing, modelExhausted
		}
		return nothing, modelOutOfReach
	}

	result := orders.MatchResult{Remaining: taker.Quantity}
	stop := modelFilled
	for !result.Remaining.IsZero() {
		i := best()
		if i < 0 {
			stop = modelExhausted
			break
		}
		m := makers[i]
		if !reaches(m.Price) {
			stop = modelOutOfReach
			break
		}
		if m.Account == taker.Account {
			stop = modelSelfTrade
			break
		}
		quantity := result.Remaining.Min(left[i])
		left[i], _ = left[i].Sub(quantity)
		result.Remaining, _ = result.Remaining.Sub(quantity)
		result.Filled, _ = result.Filled.Add(quantity)
		result.Fills = append(result.Fills, orders.Fill{
			MakerOrderID: m.OrderID, MakerAccount: m.Account, Price: m.Price,
			Quantity: quantity, MakerRemaining: left[i],
		})
	}

	switch {
	case taker.TimeInForce == orders.FOK && stop != modelFilled:
		nothing.Outcome, nothing.CancelReason = orders.OutcomeCanceled, orders.CancelFOKUnfillable
		return nothing, stop
	case stop == modelFilled:
		result.Outcome = orders.OutcomeFilled
	case stop == modelSelfTrade:
		result.Outcome, result.CancelReason = orders.OutcomeCanceled, orders.CancelSelfTradePrevented
	case taker.Type == orders.Market:
		result.Outcome, result.CancelReason = orders.OutcomeCanceled, orders.CancelUnfilledMarket
	case taker.TimeInForce == orders.IOC:
		result.Outcome, result.CancelReason = orders.OutcomeCanceled, orders.CancelUnfilledIOC
	case len(result.Fills) == 0:
		result.Outcome = orders.OutcomeOpen
	default:
		result.Outcome = orders.OutcomePartiallyFilled
	}
	return result, stop
}

// A small price grid and small quantities make ties, exact fills and
// own-account orders common.
func drawPrice(t *rapid.T, label string) decimal.Decimal {
	return decimal.MustNew(int64(rapid.IntRange(190, 210).Draw(t, label))*5, 1) // 95.0 … 105.0 by 0.5
}

func drawQuantity(t *rapid.T, label string, most int) decimal.Decimal {
	scale := rapid.IntRange(0, 2).Draw(t, label+" scale")
	return decimal.MustNew(int64(rapid.IntRange(1, most).Draw(t, label)), scale)
}

// matchCase is one random book side and taker, and the part of the side the
// caller hands to Match.
type matchCase struct {
	taker orders.Taker
	side  []orders.Resting // the whole opposing side, unordered
	book  orders.Book
}

func drawMatchCase(t *rapid.T) matchCase {
	var c matchCase
	c.taker.Account = "t"
	c.taker.Side = rapid.SampledFrom([]orders.Side{orders.Buy, orders.Sell}).Draw(t, "side")
	c.taker.Quantity = drawQuantity(t, "quantity", 60)
	if rapid.IntRange(0, 3).Draw(t, "market?") == 0 {
		c.taker.Type, c.taker.TimeInForce = orders.Market, orders.IOC
		c.taker.ProtectionPrice = drawPrice(t, "protection price")
	} else {
		c.taker.Type = orders.Limit
		c.taker.TimeInForce = rapid.SampledFrom([]orders.TimeInForce{orders.GTC, orders.IOC, orders.FOK}).Draw(t, "tif")
		c.taker.Price = drawPrice(t, "price")
		c.taker.PostOnly = c.taker.TimeInForce == orders.GTC && rapid.IntRange(0, 3).Draw(t, "post-only?") == 0
	}

	n := rapid.IntRange(0, 10).Draw(t, "makers")
	sequences := make([]int64, n)
	for i := range sequences {
		sequences[i] = int64(i + 1)
	}
	sequences = rapid.Permutation(sequences).Draw(t, "sequences")
	for i := range n {
		c.side = append(c.side, orders.Resting{
			OrderID:   fmt.Sprintf("r%d", i),
			Account:   rapid.SampledFrom([]string{"t", "m1", "m1", "m2", "m2", "m3"}).Draw(t, "account"),
			Price:     drawPrice(t, "maker price"),
			Remaining: drawQuantity(t, "maker remaining", 20),
			Sequence:  sequences[i],
		})
	}

	// The caller's read: the side in priority order, as much of it as the
	// read fetched, and whether that was all the taker could reach.
	sorted := slices.Clone(c.side)
	slices.SortFunc(sorted, func(a, b orders.Resting) int { return priority(c.taker.Side, a, b) })
	switch rapid.IntRange(0, 3).Draw(t, "read") {
	case 0: // the whole side
		c.book = orders.Book{Resting: sorted, Complete: true}
	case 1: // just the prices the taker reaches
		reach := slices.IndexFunc(sorted, func(r orders.Resting) bool { return !reaches(c.taker, r.Price) })
		if reach < 0 {
			reach = len(sorted)
		}
		c.book = orders.Book{Resting: sorted[:reach], Complete: true}
	case 2: // a page, maybe all of it, not known to be complete
		c.book = orders.Book{Resting: sorted[:rapid.IntRange(0, len(sorted)).Draw(t, "page")]}
	default: // a page cut at a cumulative quantity, as settlement reads a book page
		var sum decimal.Decimal
		end := 0
		for end < len(sorted) && sum.Cmp(c.taker.Quantity) < 0 {
			sum, _ = sum.Add(sorted[end].Remaining)
			end++
		}
		c.book = orders.Book{Resting: sorted[:end], Complete: end == len(sorted)}
	}
	return c
}

// priority orders makers as they match against a taker on side.
func priority(side orders.Side, a, b orders.Resting) int {
	byPrice := a.Price.Cmp(b.Price)
	if side == orders.Sell {
		byPrice = -byPrice
	}
	if byPrice != 0 {
		return byPrice
	}
	return int(a.Sequence - b.Sequence)
}

func reaches(taker orders.Taker, price decimal.Decimal) bool {
	worst := taker.Price
	if taker.Type == orders.Market {
		worst = taker.ProtectionPrice
	}
	if taker.Side == orders.Buy {
		return price.Cmp(worst) <= 0
	}
	return price.Cmp(worst) >= 0
}

// matchOutcomes counts what the random cases came to, to show the generator
// reaches every branch.
var matchOutcomes = struct {
	sync.Mutex
	seen map[string]int
}{seen: map[string]int{}}

func checkMatchAgainstModel(t *rapid.T) {
	c := drawMatchCase(t)
	before := slices.Clone(c.book.Resting)
	got, err := orders.Match(c.taker, c.book)
	if !reflect.DeepEqual(c.book.Resting, before) {
		t.Fatalf("Match changed the book")
	}

	// A page is enough exactly when the model, given only the page, stops
	// for a reason other than running out of makers.
	_, pageStop := modelMatch(c.taker, c.book.Resting)
	if !c.book.Complete && pageStop == modelExhausted {
		if !errors.Is(err, orders.ErrIncompleteBook) {
			t.Fatalf("Match on a page the model ran through = %+v, %v; want ErrIncompleteBook", got, err)
		}
		// Told the page is all there is, Match decides as the model does on it.
		pageWant, _ := modelMatch(c.taker, c.book.Resting)
		pageGot, err := orders.Match(c.taker, orders.Book{Resting: c.book.Resting, Complete: true})
		if err != nil || !sameResult(pageGot, pageWant) {
			t.Fatalf("Match on the page as complete = %s, %v; model %s", describe(pageGot), err, describe(pageWant))
		}
		countOutcome("incomplete book")
		return
	}
	if err != nil {
		t.Fatalf("Match: %v", err)
	}
	want, _ := modelMatch(c.taker, c.side)
	if !sameResult(got, want) {
		t.Fatalf("Match disagrees with the model\n got %s\nwant %s", describe(got), describe(want))
	}
	checkInvariants(t, c, got)
	key := string(got.Outcome) + " " + string(got.CancelReason) + string(got.RejectReason)
	if c.taker.Type == orders.Market {
		key = "market " + key
	} else {
		key = string(c.taker.TimeInForce) + " " + key
	}
	countOutcome(key)
}

func countOutcome(key string) {
	matchOutcomes.Lock()
	matchOutcomes.seen[key]++
	matchOutcomes.Unlock()
}

// checkInvariants holds a result to the market's rules directly, apart from
// the model, so that a bug shared by both still shows.
func checkInvariants(t *rapid.T, c matchCase, got orders.MatchResult) {
	taker := c.taker
	byID := map[string]orders.Resting{}
	after := map[string]decimal.Decimal{} // each maker's remaining after the fills
	for _, m := range c.side {
		byID[m.OrderID], after[m.OrderID] = m, m.Remaining
	}

	if (got.Outcome == orders.OutcomeCanceled) != (got.CancelReason != "") ||
		(got.Outcome == orders.OutcomeRejected) != (got.RejectReason != "") {
		t.Fatalf("outcome %s with cancel reason %q, reject reason %q", got.Outcome, got.CancelReason, got.RejectReason)
	}

	// Quantity is conserved: the taker's is filled or remains, a maker's
	// fill comes out of its remaining.
	var filled decimal.Decimal
	for i, f := range got.Fills {
		m, ok := byID[f.MakerOrderID]
		switch {
		case !ok:
			t.Fatalf("fill %d names unknown maker %s", i, f.MakerOrderID)
		case !f.Quantity.IsPos():
			t.Fatalf("fill %d quantity %s", i, f.Quantity)
		case f.Quantity.Cmp(after[m.OrderID]) > 0:
			t.Fatalf("fill %d of %s takes %s of its remaining %s", i, m.OrderID, f.Quantity, after[m.OrderID])
		case f.Price.Cmp(m.Price) != 0:
			t.Fatalf("fill %d at %s, maker %s rests at %s", i, f.Price, m.OrderID, m.Price)
		case !reaches(taker, f.Price):
			t.Fatalf("fill %d at %s is beyond the taker's price", i, f.Price)
		case f.MakerAccount != m.Account || f.MakerAccount == taker.Account:
			t.Fatalf("fill %d: maker account %s (resting %s), taker %s", i, f.MakerAccount, m.Account, taker.Account)
		case i > 0 && priority(taker.Side, byID[got.Fills[i-1].MakerOrderID], m) >= 0:
			t.Fatalf("fill %d of %s comes after %s, which has no priority over it", i, m.OrderID, got.Fills[i-1].MakerOrderID)
		}
		after[m.OrderID], _ = after[m.OrderID].Sub(f.Quantity)
		if f.MakerRemaining.Cmp(after[m.OrderID]) != 0 {
			t.Fatalf("fill %d leaves %s with %s, says %s", i, m.OrderID, after[m.OrderID], f.MakerRemaining)
		}
		filled, _ = filled.Add(f.Quantity)
	}
	if total, _ := got.Filled.Add(got.Remaining); got.Filled.Cmp(filled) != 0 || total.Cmp(taker.Quantity) != 0 || got.Remaining.IsNeg() {
		t.Fatalf("filled %s (fills %s) + remaining %s ≠ quantity %s", got.Filled, filled, got.Remaining, taker.Quantity)
	}
	if (got.Outcome == orders.OutcomeFilled) != got.Remaining.IsZero() {
		t.Fatalf("outcome %s with %s remaining", got.Outcome, got.Remaining)
	}

	// Priority: no maker that comes before a filled one is left with any
	// quantity, own or not (passing an own order would be a self-trade
	// skipped, not prevented).
	// The best maker left, for the stop checks below.
	var bestLeft *orders.Resting
	for _, m := range c.side {
		if after[m.OrderID].IsZero() {
			continue
		}
		for _, f := range got.Fills {
			if priority(taker.Side, m, byID[f.MakerOrderID]) < 0 {
				t.Fatalf("%s was passed over for %s, which comes after it", m.OrderID, f.MakerOrderID)
			}
		}
		if bestLeft == nil || priority(taker.Side, m, *bestLeft) < 0 {
			bestLeft = &m
		}
	}

	// Why matching stopped must be true of the book it left.
	switch got.Outcome {
	case orders.OutcomeOpen, orders.OutcomePartiallyFilled:
		// The taker rests: the book is not left crossed.
		if taker.Type != orders.Limit || taker.TimeInForce != orders.GTC {
			t.Fatalf("a %s %s order rests", taker.Type, taker.TimeInForce)
		}
		if bestLeft != nil && reaches(taker, bestLeft.Price) {
			t.Fatalf("the taker rests at %s crossing %s at %s", taker.Price, bestLeft.OrderID, bestLeft.Price)
		}
	case orders.OutcomeRejected:
		if !taker.PostOnly || bestLeft == nil || !reaches(taker, bestLeft.Price) {
			t.Fatalf("rejected %s, post-only %v, best left %v", got.RejectReason, taker.PostOnly, bestLeft)
		}
	case orders.OutcomeCanceled:
		switch got.CancelReason {
		case orders.CancelSelfTradePrevented:
			if bestLeft == nil || bestLeft.Account != taker.Account || !reaches(taker, bestLeft.Price) {
				t.Fatalf("self-trade prevented, but the best maker left is %v", bestLeft)
			}
		case orders.CancelUnfilledIOC, orders.CancelUnfilledMarket:
			if bestLeft != nil && reaches(taker, bestLeft.Price) {
				t.Fatalf("%s with %s still in reach at %s", got.CancelReason, bestLeft.OrderID, bestLeft.Price)
			}
		}
	}

	if taker.TimeInForce == orders.FOK && got.Outcome != orders.OutcomeFilled &&
		(len(got.Fills) > 0 || got.CancelReason != orders.CancelFOKUnfillable) {
		t.Fatalf("fok: %s (%s) with %d fills", got.Outcome, got.CancelReason, len(got.Fills))
	}
	if taker.PostOnly && len(got.Fills) > 0 {
		t.Fatalf("post-only took %d fills", len(got.Fills))
	}
}

func sameResult(a, b orders.MatchResult) bool {
	if a.Outcome != b.Outcome || a.CancelReason != b.CancelReason || a.RejectReason != b.RejectReason ||
		a.Filled.Cmp(b.Filled) != 0 || a.Remaining.Cmp(b.Remaining) != 0 || len(a.Fills) != len(b.Fills) {
		return false
	}
	for i := range a.Fills {
		x, y := a.Fills[i], b.Fills[i]
		if x.MakerOrderID != y.MakerOrderID || x.MakerAccount != y.MakerAccount || x.Price.Cmp(y.Price) != 0 ||
			x.Quantity.Cmp(y.Quantity) != 0 || x.MakerRemaining.Cmp(y.MakerRemaining) != 0 {
			return false
		}
	}
	return true
}

func describe(r orders.MatchResult) string {
	s := fmt.Sprintf("%s %s%s filled %s remaining %s:", r.Outcome, r.CancelReason, r.RejectReason, r.Filled, r.Remaining)
	for _, f := range r.Fills {
		s += fmt.Sprintf(" %s(%s)@%s×%s→%s", f.MakerOrderID, f.MakerAccount, f.Price, f.Quantity, f.MakerRemaining)
	}
	return s
}

// TestMatchAgreesWithModel runs random sides and takers through Match and the
// reference model (-rapid.checks=N for more than the default 100).
func TestMatchAgreesWithModel(t *testing.T) {
	rapid.Check(t, checkMatchAgainstModel)
	matchOutcomes.Lock()
	defer matchOutcomes.Unlock()
	for _, key := range slices.Sorted(maps.Keys(matchOutcomes.seen)) {
		t.Logf("%6d %s", matchOutcomes.seen[key], key)
	}
}

// FuzzMatch is the model check driven by go test -fuzz.
func FuzzMatch(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(checkMatchAgainstModel))
}
