package orders

import (
	"errors"
	"fmt"

	"github.com/govalues/decimal"
)

// TimeInForce says what happens to the part of an order that does not fill
// at once.
type TimeInForce string

const (
	// GTC (good till canceled) rests the remainder on the book.
	GTC TimeInForce = "gtc"
	// IOC (immediate or cancel) cancels the remainder.
	IOC TimeInForce = "ioc"
	// FOK (fill or kill) fills the whole quantity at once or nothing at all.
	FOK TimeInForce = "fok"
)

// Valid reports whether t is one of GTC, IOC and FOK.
func (t TimeInForce) Valid() bool {
	return t == GTC || t == IOC || t == FOK
}

// CancelReason says why matching canceled an order's remainder.
type CancelReason string

const (
	// CancelUnfilledIOC: an IOC limit order's remainder found nothing more
	// to match at its price.
	CancelUnfilledIOC CancelReason = "unfilled_ioc"
	// CancelUnfilledMarket: a market order's remainder found nothing more to
	// match within its protection price.
	CancelUnfilledMarket CancelReason = "unfilled_market"
	// CancelFOKUnfillable: an FOK order could not fill whole, so nothing
	// filled. Also when an own-account order is what stood in the way: FOK
	// means nothing happened, and that is what the reason says.
	CancelFOKUnfillable CancelReason = "fok_unfillable"
	// CancelSelfTradePrevented: the next order in priority belonged to the
	// taker's own account, so matching stopped there; fills before it stand.
	CancelSelfTradePrevented CancelReason = "self_trade_prevented"
)

// ReasonPostOnlyWouldTake: a post-only order would have crossed the best
// opposing price, so it was refused whole.
const ReasonPostOnlyWouldTake RejectReason = "post_only_would_take"

// Outcome is what matching made of a taker; its values are the order
// statuses the taker takes on.
type Outcome string

const (
	// OutcomeOpen: nothing filled; the whole quantity rests.
	OutcomeOpen Outcome = "open"
	// OutcomePartiallyFilled: some filled; the remainder rests.
	OutcomePartiallyFilled Outcome = "partially_filled"
	// OutcomeFilled: the whole quantity filled.
	OutcomeFilled Outcome = "filled"
	// OutcomeCanceled: the remainder was canceled (see CancelReason); fills
	// before the cancel stand.
	OutcomeCanceled Outcome = "canceled"
	// OutcomeRejected: refused whole before matching (see RejectReason);
	// nothing filled.
	OutcomeRejected Outcome = "rejected"
)

// Taker is the incoming order to match.
type Taker struct {
	Account     string
	Side        Side
	Type        OrderType
	TimeInForce TimeInForce
	// PostOnly orders only ever make: one that would take is rejected.
	// Allowed only on GTC limit orders.
	PostOnly bool
	// Quantity is what is left to match, in the base asset; > 0.
	Quantity decimal.Decimal
	// Price is a limit order's limit price; zero for market orders.
	Price decimal.Decimal
	// ProtectionPrice is a market order's worst acceptable price (the edge of
	// the instrument's band around its reference price): a buy never pays
	// more, a sell never takes less. Zero for limit orders.
	ProtectionPrice decimal.Decimal
}

// Resting is one order resting on the book, on the side opposite the taker.
type Resting struct {
	OrderID string
	Account string
	Price   decimal.Decimal
	// Remaining is the quantity still open; > 0.
	Remaining decimal.Decimal
	// Sequence orders resting orders of one price by arrival: lower is
	// earlier and so first.
	Sequence int64
	// Hold is what the order holds for its remaining quantity: Decide takes
	// a fill's cost out of it; Match does not look at it.
	Hold decimal.Decimal
}

// Book is the opposing side of the book as the caller read it.
type Book struct {
	// Resting lists opposing orders best first: best price (lowest ask for a
	// buy taker, highest bid for a sell taker), then lowest Sequence. It may
	// be only the first page of the side, and may run on past the prices
	// the taker can reach; Match stops at the first it cannot match.
	Resting []Resting
	// Complete reports that no opposing order the taker could reach was left
	// out of Resting. When it is false and Match would need an order past the
	// end of Resting, Match returns ErrIncompleteBook. The zero value is the
	// safe one.
	Complete bool
}

// Fill is one trade between the taker and one resting (maker) order.
type Fill struct {
	MakerOrderID string
	MakerAccount string
	// Price is the maker's price: trades execute at the resting price.
	Price decimal.Decimal
	// Quantity is the base amount traded; > 0.
	Quantity decimal.Decimal
	// MakerRemaining is the maker's Remaining after this fill; zero means the
	// maker is filled and leaves the book.
	MakerRemaining decimal.Decimal
}

// Notional is the fill's value in the quote asset: Price × Quantity, exact.
// It fails with ErrInexact only if that does not fit a decimal.
func (f Fill) Notional() (decimal.Decimal, error) {
	return exactMul(f.Price, f.Quantity)
}

// MatchResult is Match's decision for one taker.
type MatchResult struct {
	Outcome Outcome
	// Fills in the order they executed: the makers' priority order.
	Fills []Fill
	// Filled is the sum of the fills' quantities.
	Filled decimal.Decimal
	// Remaining is the taker's Quantity less Filled: it rests when Outcome is
	// open or partially_filled, is canceled or rejected otherwise, and is zero
	// when filled.
	Remaining decimal.Decimal
	// CancelReason is set only when Outcome is canceled.
	CancelReason CancelReason
	// RejectReason is set only when Outcome is rejected.
	RejectReason RejectReason
}

var (
	// ErrMalformedMatch: Match was given a taker or a book it cannot decide
	// on (a missing field, a quantity not above zero, resting orders out of
	// priority order, ...), or Fee or Hold an amount out of range. It is the
	// caller's bug; retrying the same input cannot help.
	ErrMalformedMatch = errors.New("orders: malformed match input")
	// ErrIncompleteBook: the decision depends on opposing orders past the end
	// of a Book that is not Complete. Read more of the side and call Match
	// again; nothing was decided.
	ErrIncompleteBook = errors.New("orders: match needs more of the book")
)

// Match decides what a taker does against the opposing side of the book,
// under price-time priority: it takes the resting orders in the book's order
// while their price is within the taker's limit (or protection) price,
// trading at each maker's price, until the taker is filled, the next order
// is out of reach, or the next order belongs to the taker's own account
// (self-trade prevention: the taker's remainder is canceled). The remainder
// then rests (GTC limit) or is canceled (IOC, market). An FOK order fills
// whole or not at all; a post-only order that would take is rejected.
//
// Match is pure and deterministic: it neither changes its inputs nor reads
// anything else, so the caller can apply the result as it stands, or call it
// again with more of the book after ErrIncompleteBook. It fails with
// ErrMalformedMatch on input it cannot trust (book.Resting out of priority
// order included), and with ErrInexact if an amount would need rounding.
func Match(taker Taker, book Book) (MatchResult, error) {
	if err := checkMatch(taker, book); err != nil {
		return MatchResult{}, err
	}
	worst := taker.Price
	if taker.Type == Market {
		worst = taker.ProtectionPrice
	}
	reaches := func(price decimal.Decimal) bool {
		if taker.Side == Buy {
			return price.Cmp(worst) <= 0
		}
		return price.Cmp(worst) >= 0
	}
	nothing := func(outcome Outcome) MatchResult {
		return MatchResult{Outcome: outcome, Remaining: taker.Quantity}
	}

	if taker.PostOnly {
		switch {
		case len(book.Resting) == 0 && !book.Complete:
			return MatchResult{}, ErrIncompleteBook
		case len(book.Resting) > 0 && reaches(book.Resting[0].Price):
			result := nothing(OutcomeRejected)
			result.RejectReason = ReasonPostOnlyWouldTake
			return result, nil
		}
		// The best opposing order is out of reach, so all are: it rests.
		return nothing(OutcomeOpen), nil
	}

	if taker.TimeInForce == FOK {
		fillable, err := fillsWhole(taker, book, reaches)
		if err != nil {
			return MatchResult{}, err
		}
		if !fillable {
			result := nothing(OutcomeCanceled)
			result.CancelReason = CancelFOKUnfillable
			return result, nil
		}
	}

	result := MatchResult{Remaining: taker.Quantity}
	stopped, selfTrade := false, false
	for _, maker := range book.Resting {
		if result.Remaining.IsZero() {
			break
		}
		if !reaches(maker.Price) {
			stopped = true
			break
		}
		if maker.Account == taker.Account {
			stopped, selfTrade = true, true
			break
		}
		quantity := result.Remaining.Min(maker.Remaining)
		makerRemaining, err := ExactSub(maker.Remaining, quantity)
		if err != nil {
			return MatchResult{}, err
		}
		if result.Remaining, err = ExactSub(result.Remaining, quantity); err != nil {
			return MatchResult{}, err
		}
		if result.Filled, err = ExactAdd(result.Filled, quantity); err != nil {
			return MatchResult{}, err
		}
		result.Fills = append(result.Fills, Fill{
			MakerOrderID:   maker.OrderID,
			MakerAccount:   maker.Account,
			Price:          maker.Price,
			Quantity:       quantity,
			MakerRemaining: makerRemaining,
		})
	}

	switch {
	case result.Remaining.IsZero():
		result.Outcome = OutcomeFilled
	case !stopped && !book.Complete:
		// Every given order was taken and more may lie beyond them.
		return MatchResult{}, ErrIncompleteBook
	case selfTrade:
		result.Outcome, result.CancelReason = OutcomeCanceled, CancelSelfTradePrevented
	case taker.Type == Market:
		result.Outcome, result.CancelReason = OutcomeCanceled, CancelUnfilledMarket
	case taker.TimeInForce == IOC:
		result.Outcome, result.CancelReason = OutcomeCanceled, CancelUnfilledIOC
	case taker.TimeInForce == FOK:
		// fillsWhole said it would fill; reaching here is a bug in Match.
		return MatchResult{}, fmt.Errorf("orders: match: FOK checked fillable but %s is left", result.Remaining)
	case result.Filled.IsZero():
		result.Outcome = OutcomeOpen
	default:
		result.Outcome = OutcomePartiallyFilled
	}
	return result, nil
}

// fillsWhole reports whether the taker's whole quantity can fill before
// matching would stop (out of reach, or an own-account order). It counts
// down what is still needed rather than summing the makers' quantities, so
// no sum can outgrow the decimal type.
func fillsWhole(taker Taker, book Book, reaches func(decimal.Decimal) bool) (bool, error) {
	need := taker.Quantity
	for _, maker := range book.Resting {
		if !reaches(maker.Price) || maker.Account == taker.Account {
			return false, nil
		}
		if maker.Remaining.Cmp(need) >= 0 {
			return true, nil
		}
		var err error
		if need, err = ExactSub(need, maker.Remaining); err != nil {
			return false, err
		}
	}
	if !book.Complete {
		return false, ErrIncompleteBook
	}
	return false, nil
}

// checkMatch refuses input Match cannot decide on; malformed input is the
// caller's bug, and guessing would write a wrong trade.
func checkMatch(taker Taker, book Book) error {
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformedMatch, fmt.Sprintf(format, args...))
	}
	switch {
	case taker.Account == "":
		return malformed("taker has no account")
	case taker.Side != Buy && taker.Side != Sell:
		return malformed("taker side %q", taker.Side)
	case !taker.TimeInForce.Valid():
		return malformed("taker time in force %q", taker.TimeInForce)
	case !taker.Quantity.IsPos():
		return malformed("taker quantity %s is not above zero", taker.Quantity)
	}
	switch taker.Type {
	case Limit:
		switch {
		case !taker.Price.IsPos():
			return malformed("limit price %s is not above zero", taker.Price)
		case !taker.ProtectionPrice.IsZero():
			return malformed("a limit order has no protection price")
		case taker.PostOnly && taker.TimeInForce != GTC:
			return malformed("post-only needs time in force gtc, not %s", taker.TimeInForce)
		}
	case Market:
		switch {
		case !taker.ProtectionPrice.IsPos():
			return malformed("protection price %s is not above zero", taker.ProtectionPrice)
		case !taker.Price.IsZero():
			return malformed("a market order has no limit price")
		case taker.TimeInForce != IOC:
			return malformed("a market order is ioc, not %s", taker.TimeInForce)
		case taker.PostOnly:
			return malformed("a market order cannot be post-only")
		}
	default:
		return malformed("taker type %q", taker.Type)
	}

	seen := make(map[string]bool, len(book.Resting))
	for i, maker := range book.Resting {
		switch {
		case maker.OrderID == "":
			return malformed("resting order %d has no id", i)
		case seen[maker.OrderID]:
			return malformed("resting order %s is listed twice", maker.OrderID)
		case maker.Account == "":
			return malformed("resting order %s has no account", maker.OrderID)
		case !maker.Price.IsPos():
			return malformed("resting order %s price %s is not above zero", maker.OrderID, maker.Price)
		case !maker.Remaining.IsPos():
			return malformed("resting order %s remaining %s is not above zero", maker.OrderID, maker.Remaining)
		}
		seen[maker.OrderID] = true
		if i > 0 && !before(taker.Side, book.Resting[i-1], maker) {
			return malformed("resting order %s is listed after %s but has priority over it",
				maker.OrderID, book.Resting[i-1].OrderID)
		}
	}
	return nil
}

// before reports whether maker a has strict priority over maker b for a taker
// on side: the better price, or the same price and the lower sequence.
func before(side Side, a, b Resting) bool {
	byPrice := a.Price.Cmp(b.Price)
	if side == Sell {
		byPrice = -byPrice // a sell taker meets bids, highest first
	}
	return byPrice < 0 || byPrice == 0 && a.Sequence < b.Sequence
}
