package orders

import (
	"errors"
	"fmt"

	"github.com/govalues/decimal"
)

// The settlement policy, as docs/market.md ("Settling one order") says: what
// an order does to the book and the ledger, decided before anything is
// written, by whoever holds the book (today a PostgreSQL batch, which reads
// pages of it under the instrument's lock).

// OpposingSide is the side of the book a taker meets, as the caller holds
// it: for a taker whose worst price (limit or protection price) is worst,
// the resting orders best first, with Complete set when they are every one
// the taker can reach. Decide calls it once.
type OpposingSide func(worst decimal.Decimal) Book

// FundsCheck reports whether the taker's account has amount of asset
// available. Decide runs it at most once, on the order's hold, after every
// other check but the match passed, so a caller may record what its answer
// depended on.
type FundsCheck func(asset string, amount decimal.Decimal) bool

// Decision is what settling one order does. Rejected, nothing happened:
// no hold, no fill, no ledger transaction. Otherwise the order's hold moves
// from available to held, each fill is a trade, the remainder rests or is
// canceled, and what the order no longer needs of its hold is released.
type Decision struct {
	// TimeInForce is the order's, or what a job naming none meant: gtc, and
	// ioc for a market order.
	TimeInForce TimeInForce
	// Status is open or partially_filled when the remainder rests, and
	// filled, canceled or rejected otherwise.
	Status       Status
	RejectReason RejectReason // set only when rejected
	CancelReason CancelReason // set only when the market canceled the order
	// DuplicateOf is the order that holds the order's client order id, when
	// it is rejected duplicate_client_order_id.
	DuplicateOf string

	// Hold is the worst case the whole quantity can cost, held in HoldAsset
	// while the order matches: a sell's quantity in base, a buy's quantity ×
	// its limit (or protection) price plus the taker fee on it in quote.
	// Zero when nothing was held: a rejection, or a cancel before any fill.
	Hold      decimal.Decimal
	HoldAsset string
	// Trades are the fills, in the order they executed.
	Trades []Trade
	// Filled, Notional and Fees are the order's: base filled, quote traded
	// and taker fees paid.
	Filled, Notional, Fees decimal.Decimal
	// Remaining is what did not fill: it rests when Rests, and is canceled
	// or rejected otherwise.
	Remaining decimal.Decimal
	Rests     bool
	// RestingHold is what the resting remainder holds; zero when nothing
	// rests.
	RestingHold decimal.Decimal
	// Release is what goes back to available: the hold less what the fills
	// consumed and what the remainder keeps.
	Release decimal.Decimal

	// Ledger is the ledger transactions in the order they are written: the
	// hold, each fill's trade followed by the release of a maker that left
	// the book holding more than it used, and the order's release.
	Ledger []Transaction
}

// Trade is one fill as the ledger settles it, at the maker's price.
type Trade struct {
	Fill
	// Notional is Price × Quantity, in quote.
	Notional decimal.Decimal
	// MakerFee and TakerFee are the fees on Notional at the instrument's
	// rates, in quote; both go to the venue.
	MakerFee, TakerFee decimal.Decimal
	// TakerConsumes is what the fill takes of the taker's hold: a buy's
	// notional and taker fee, a sell's quantity.
	TakerConsumes decimal.Decimal
	// Maker is the resting order after the fill.
	Maker MakerFill
	// Transaction is the index in Decision.Ledger of the fill's trade.
	Transaction int
}

// MakerFill is what one fill does to the resting order it fills.
type MakerFill struct {
	// Remaining and Hold are what the maker still has open and held.
	Remaining, Hold decimal.Decimal
	// Status is partially_filled, or filled when nothing remains: the
	// maker leaves the book.
	Status Status
	// GivesUp is what the fill consumes of the maker's hold: a sell's
	// quantity, a buy's notional and maker fee.
	GivesUp decimal.Decimal
	// Release is what a maker leaving the book held beyond its fills (a buy
	// held its fee at the taker rate, and pays the maker rate); it goes back
	// to available.
	Release decimal.Decimal
}

// Decide decides what settling order does against in's book, as
// docs/market.md says. duplicateOf is the order that holds the order's
// client order id when another one does; opposing gives the side of the
// book the order meets; funds checks the hold.
//
// In turn: a job naming no time in force means gtc (ioc for a market
// order); a quantity or price that is not above zero or has more decimals
// than the ledger keeps is malformed; a duplicate client order id, a
// halted instrument and a limit price outside the band reject the order;
// a market order's worst price is the band's edge on its side. Then Match
// decides against the opposing side; a post-only order that would take is
// rejected; a hold the account cannot pay for rejects the order
// (insufficient_funds); an order that fills nothing and does not rest is
// canceled with nothing held. Otherwise the hold, the trades and the
// release make up the ledger.
//
// Decide is pure: it changes none of its inputs. It fails with
// ErrIncompleteBook, having decided nothing and checked no funds, when
// Match needs more of the opposing side than it was given: read more and
// call it again. An order that can never settle (a malformed field, an
// amount that would need rounding) fails wrapping ErrMalformedOrder. Any
// other failure means the book it was given contradicts itself (a maker
// holding less than its fill consumes): the caller's bug.
func Decide(order Order, in Instrument, duplicateOf string, opposing OpposingSide, funds FundsCheck) (Decision, error) {
	d := Decision{TimeInForce: defaultTimeInForce(order.Type, order.TimeInForce), Remaining: order.Quantity}
	malformed := func(format string, args ...any) (Decision, error) {
		return Decision{}, fmt.Errorf("%w: order %s: %s", ErrMalformedOrder, order.ID, fmt.Sprintf(format, args...))
	}
	reject := func(reason RejectReason) (Decision, error) {
		d.Status, d.RejectReason = StatusRejected, reason
		return d, nil
	}
	if !order.Quantity.IsPos() || order.Quantity.Scale() > LedgerScale {
		return malformed("quantity %s", order.Quantity)
	}
	if duplicateOf != "" {
		d.DuplicateOf = duplicateOf
		return reject(ReasonDuplicateClientOrderID)
	}
	if in.Halted {
		return reject(ReasonInstrumentHalted)
	}
	taker, inBand, err := takerOf(order, in, d.TimeInForce)
	if err != nil {
		return malformed("%v", err)
	}
	if !inBand {
		return reject(ReasonPriceOutOfBand)
	}
	worst := taker.Price
	if taker.Type == Market {
		worst = taker.ProtectionPrice
	}

	book := opposing(worst)
	result, err := Match(taker, book)
	if errors.Is(err, ErrIncompleteBook) {
		return Decision{}, err
	}
	if err != nil {
		return malformed("%v", err)
	}
	if result.Outcome == OutcomeRejected {
		// Post-only that would take: decided before any hold.
		return reject(result.RejectReason)
	}

	// The hold: the worst case the whole quantity can cost.
	hold, err := Hold(order.Side, order.Quantity, worst, in.TakerFeeBps)
	if err != nil || hold.Scale() > LedgerScale {
		return malformed("hold %s: %v", hold, err)
	}
	holdAsset := in.Base
	if order.Side == Buy {
		holdAsset = in.Quote
	}
	if !funds(holdAsset, hold) {
		return reject(ReasonInsufficientFunds)
	}
	d.Status, d.CancelReason, d.Remaining = Status(result.Outcome), result.CancelReason, result.Remaining
	if len(result.Fills) == 0 && result.Outcome == OutcomeCanceled {
		// Nothing filled and nothing rests: a hold would be released at
		// once, so there is none.
		return d, nil
	}

	// Every amount first, so that one that does not fit fails the order
	// before anything of it is decided.
	plan, trades, err := planTrades(order, in, result.Fills)
	if err != nil {
		return malformed("%v", err)
	}
	consumed := decimal.Zero
	for _, p := range plan {
		var errs [3]error
		consumed, errs[0] = ExactAdd(consumed, p.TakerConsumes)
		d.Notional, errs[1] = ExactAdd(d.Notional, p.Notional)
		d.Fees, errs[2] = ExactAdd(d.Fees, p.TakerFee)
		if err := errors.Join(errs[:]...); err != nil {
			return malformed("fill of %s at %s: %v", p.Quantity, p.Price, err)
		}
	}
	left, err := ExactSub(hold, consumed)
	if err != nil || left.IsNeg() {
		return Decision{}, fmt.Errorf("orders: decide %s: fills consume %s of a hold of %s", order.ID, consumed, hold)
	}
	d.Rests = result.Outcome == OutcomeOpen || result.Outcome == OutcomePartiallyFilled
	d.RestingHold = decimal.Zero
	if d.Rests {
		if d.RestingHold, err = Hold(order.Side, result.Remaining, worst, in.TakerFeeBps); err != nil || d.RestingHold.Scale() > LedgerScale {
			return malformed("hold %s of the remainder: %v", d.RestingHold, err)
		}
	}
	if d.Release, err = ExactSub(left, d.RestingHold); err != nil || d.Release.IsNeg() {
		return Decision{}, fmt.Errorf("orders: decide %s: the remainder needs %s of %s left held", order.ID, d.RestingHold, left)
	}
	for i := range plan {
		if plan[i].Maker, err = fillMaker(book.Resting[i], plan[i]); err != nil {
			return Decision{}, fmt.Errorf("orders: decide %s: %w", order.ID, err)
		}
	}

	d.Hold, d.HoldAsset, d.Filled, d.Trades = hold, holdAsset, result.Filled, plan
	d.Ledger = append(d.Ledger, holdOf(order.ID, order.Account, holdAsset, hold))
	makerAsset := in.Quote
	if order.Side == Buy {
		makerAsset = in.Base
	}
	for i := range d.Trades {
		t := &d.Trades[i]
		t.Transaction = len(d.Ledger)
		d.Ledger = append(d.Ledger, trades[i])
		if t.Maker.Release.IsPos() {
			d.Ledger = append(d.Ledger, Release(t.MakerOrderID, t.MakerAccount, makerAsset, t.Maker.Release))
		}
	}
	if d.Release.IsPos() {
		d.Ledger = append(d.Ledger, Release(order.ID, order.Account, holdAsset, d.Release))
	}
	return d, nil
}

// takerOf is the order as Match takes it, with its worst price: a limit
// order's own price, whether it lies in the band, or a market order's
// protection price, the band's edge on its side. It fails on a type or
// price no order can have.
func takerOf(order Order, in Instrument, tif TimeInForce) (Taker, bool, error) {
	taker := Taker{Account: order.Account, Side: order.Side, Type: order.Type, TimeInForce: tif,
		PostOnly: order.PostOnly, Quantity: order.Quantity}
	switch order.Type {
	case Limit:
		if order.Price == nil || !order.Price.IsPos() || order.Price.Scale() > LedgerScale {
			return Taker{}, false, errors.New("a limit order without a usable price")
		}
		inBand, err := in.InBand(*order.Price)
		if err != nil {
			return Taker{}, false, err
		}
		taker.Price = *order.Price
		return taker, inBand, nil
	case Market:
		if order.Price != nil {
			return Taker{}, false, errors.New("a market order with a price")
		}
		low, high, err := in.Band()
		if err != nil {
			return Taker{}, false, err
		}
		taker.ProtectionPrice = low
		if order.Side == Buy {
			taker.ProtectionPrice = high
		}
		if !taker.ProtectionPrice.IsPos() {
			return Taker{}, false, fmt.Errorf("protection price %s", taker.ProtectionPrice)
		}
		return taker, true, nil
	default:
		return Taker{}, false, fmt.Errorf("type %q", order.Type)
	}
}

// planTrades computes every amount of the fills of order, the taker, and
// their trade transactions: each amount exact and within the ledger's
// scale.
func planTrades(order Order, in Instrument, fills []Fill) ([]Trade, []Transaction, error) {
	plan, trades := make([]Trade, len(fills)), make([]Transaction, len(fills))
	for i, fill := range fills {
		t := Trade{Fill: fill}
		// What the seller receives (the notional less its fee), and the
		// venue (both fees).
		var proceeds, fees decimal.Decimal
		var errs [6]error
		t.Notional, errs[0] = fill.Notional()
		t.TakerFee, errs[1] = Fee(t.Notional, in.TakerFeeBps)
		t.MakerFee, errs[2] = Fee(t.Notional, in.MakerFeeBps)
		if order.Side == Buy {
			t.TakerConsumes, errs[3] = ExactAdd(t.Notional, t.TakerFee)
			t.Maker.GivesUp = fill.Quantity
			proceeds, errs[4] = ExactSub(t.Notional, t.MakerFee)
		} else {
			t.TakerConsumes = fill.Quantity
			t.Maker.GivesUp, errs[3] = ExactAdd(t.Notional, t.MakerFee)
			proceeds, errs[4] = ExactSub(t.Notional, t.TakerFee)
		}
		fees, errs[5] = ExactAdd(t.TakerFee, t.MakerFee)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, nil, fmt.Errorf("fill of %s at %s: %v", fill.Quantity, fill.Price, err)
		}
		for _, amount := range []decimal.Decimal{t.Notional, t.TakerFee, t.MakerFee, t.Maker.GivesUp} {
			if amount.Scale() > LedgerScale {
				return nil, nil, fmt.Errorf("fill amount %s has more decimals than the ledger holds", amount)
			}
		}
		plan[i], trades[i] = t, tradeOf(order, in, t, proceeds, fees)
	}
	return plan, trades, nil
}

// fillMaker is what a planned trade does to its maker, resting as given:
// its hold gives up what the fill consumes, and a maker filled whole leaves
// the book and releases what it still holds.
func fillMaker(maker Resting, t Trade) (MakerFill, error) {
	if maker.OrderID != t.MakerOrderID {
		return MakerFill{}, fmt.Errorf("fill of %s where %s rests", t.MakerOrderID, maker.OrderID)
	}
	m := t.Maker
	m.Remaining, m.Status = t.MakerRemaining, StatusPartiallyFilled
	hold, err := ExactSub(maker.Hold, m.GivesUp)
	if err != nil || hold.IsNeg() {
		return MakerFill{}, fmt.Errorf("maker %s holds less than its fill consumes (%s): %v", maker.OrderID, m.GivesUp, err)
	}
	m.Hold, m.Release = hold, decimal.Zero
	if m.Remaining.IsZero() {
		m.Status, m.Release, m.Hold = StatusFilled, hold, decimal.Zero
	}
	return m, nil
}

// tradeOf is the ledger transaction of one trade of order (the taker): base
// from the seller to the buyer, quote the other way out of the buyer's hold,
// the seller's proceeds (the notional less its fee) to the seller, and both
// fees to the venue.
func tradeOf(order Order, in Instrument, t Trade, proceeds, fees decimal.Decimal) Transaction {
	base, quote := in.Base, in.Quote
	tx := Transaction{Kind: KindTrade, OrderID: order.ID}
	if order.Side == Buy {
		tx.move(order.Account, quote, PartHeld, t.TakerConsumes.Neg())
		tx.move(order.Account, base, PartAvailable, t.Quantity)
		tx.move(t.MakerAccount, base, PartHeld, t.Quantity.Neg())
		tx.move(t.MakerAccount, quote, PartAvailable, proceeds)
	} else {
		tx.move(order.Account, base, PartHeld, t.Quantity.Neg())
		tx.move(order.Account, quote, PartAvailable, proceeds)
		tx.move(t.MakerAccount, quote, PartHeld, t.Maker.GivesUp.Neg())
		tx.move(t.MakerAccount, base, PartAvailable, t.Quantity)
	}
	tx.move(VenueAccount, quote, PartAvailable, fees)
	return tx
}
