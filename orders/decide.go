package orders

import (
	"errors"
	"fmt"
	"math/big"
	"slices"

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

	// ProtectionPrice is a market order's: the band's edge on its side
	// around the reference it settled at, past which it never trades. Zero
	// for a limit order, and for one rejected before its band was known.
	ProtectionPrice decimal.Decimal
	// Canceled are the resting orders the decision canceled, in the order
	// it met them: makers whose fill the decimal type could not hold.
	Canceled []CanceledMaker

	// Ledger is the balance moves in the order they happen: the releases
	// of the canceled makers, the hold, each fill's trade followed by the
	// release of a maker that left the book holding more than it used, and
	// the order's release. Only the trades change totals and are ledger
	// transactions (TransactionKind.ChangesTotal); holds and releases move
	// between the parts of one balance.
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

// CancelBelowMinNotional: a market order's quantity at the price of its
// first fill came to less than the instrument's minimum notional; nothing
// traded.
const CancelBelowMinNotional CancelReason = "below_min_notional"

// CanceledMaker is a resting order a decision canceled: one whose fill the
// decimal type could not hold exactly (CancelAmountTooLarge). It leaves the
// book with what it filled before, and its whole hold goes back to
// available.
type CanceledMaker struct {
	OrderID, Account string
	Reason           CancelReason
	// Release is what it held, in Asset; Transaction is the index in
	// Decision.Ledger of its release, or -1 when it held nothing.
	Release     decimal.Decimal
	Asset       string
	Transaction int
}

// Decide decides what settling order does against in's book, as
// docs/market.md says. duplicateOf is the order that holds the order's
// client order id when another one does; opposing gives the side of the
// book the order meets; funds checks the hold.
//
// In turn: a job naming no time in force means gtc (ioc for a market
// order); a quantity that is not above zero or has more decimals than the
// ledger keeps is malformed; a duplicate client order id, a halted
// instrument, a limit price outside the band and a worst case the decimal
// type cannot hold (amount_too_large, see CheckAmounts) reject the order;
// a market order's worst price is the band's edge on its side. Then Match
// decides against the opposing side; a maker whose fill has an amount the
// decimal type cannot hold exactly is canceled (amount_too_large), and
// Match decides again without it; a post-only order that would take is
// rejected; a hold the account cannot pay for rejects the order
// (insufficient_funds); a market order whose quantity at its first fill's
// price is under the minimum notional is canceled (below_min_notional), as
// is an order that fills nothing and does not rest, with nothing held.
// Otherwise the hold, the trades and the release make up the ledger. The
// makers it canceled stand whatever the taker does but a rejection: a
// rejected order changes nothing.
//
// Decide is pure: it changes none of its inputs. It fails with
// ErrIncompleteBook, having decided nothing and checked no funds, when
// Match needs more of the opposing side than it was given: read more and
// call it again. An order that can never settle (a malformed field) fails
// wrapping ErrMalformedOrder. Any other failure means the book it was
// given contradicts itself (a maker holding less than its fill consumes):
// the caller's bug.
func Decide(order Order, in Instrument, duplicateOf string, opposing OpposingSide, funds FundsCheck) (Decision, error) {
	d := Decision{TimeInForce: defaultTimeInForce(order.Type, order.TimeInForce), Remaining: order.Quantity}
	malformed := func(format string, args ...any) (Decision, error) {
		return Decision{}, fmt.Errorf("%w: order %s: %s", ErrMalformedOrder, order.ID, fmt.Sprintf(format, args...))
	}
	reject := func(reason RejectReason) (Decision, error) {
		// Nothing happened, to the order or to any maker.
		return Decision{TimeInForce: d.TimeInForce, Status: StatusRejected, RejectReason: reason,
			DuplicateOf: d.DuplicateOf, Remaining: order.Quantity, ProtectionPrice: d.ProtectionPrice}, nil
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
		d.ProtectionPrice = worst
	}

	// The digit budget, at the reference of the moment: every amount of
	// the order, and every sum of them, exact.
	budget, _, err := in.BudgetPrice(order.Side, order.Type, taker.Price)
	if err != nil {
		return malformed("%v", err)
	}
	decimals := in.AmountDecimals() + max(0, order.Quantity.Scale()-in.LotSize.Trim(0).Scale()) +
		max(0, budget.Scale()-in.TickSize.Trim(0).Scale())
	if !in.fits(order.Quantity, budget, decimals) {
		return reject(ReasonAmountTooLarge)
	}
	// The hold: the worst case the whole quantity can cost.
	hold, err := Hold(order.Side, order.Quantity, worst, in.TakerFeeBps)
	if err != nil || hold.Scale() > LedgerScale {
		return reject(ReasonAmountTooLarge)
	}
	holdAsset, makerAsset := in.Base, in.Quote
	if order.Side == Buy {
		holdAsset, makerAsset = in.Quote, in.Base
	}

	// Match, and plan every amount of the fills, so that one that does not
	// fit is found before anything is decided: a maker whose fill does not
	// fit is canceled, and the taker matches again without it.
	book := opposing(worst)
	var (
		result   MatchResult
		plan     []Trade
		trades   []Transaction
		sums     fillSums
		canceled []Resting
	)
	for {
		if result, err = Match(taker, book); errors.Is(err, ErrIncompleteBook) {
			return Decision{}, err
		} else if err != nil {
			return malformed("%v", err)
		}
		if result.Outcome == OutcomeRejected {
			// Post-only that would take: decided before any hold.
			return reject(result.RejectReason)
		}
		var bad int
		if plan, trades, sums, bad, err = planTrades(order, in, hold, book.Resting, result.Fills); err != nil {
			return Decision{}, fmt.Errorf("orders: decide %s: %w", order.ID, err)
		}
		if bad < 0 {
			break
		}
		canceled = append(canceled, book.Resting[bad])
		book.Resting = slices.Delete(slices.Clone(book.Resting), bad, bad+1)
	}

	if !funds(holdAsset, hold) {
		return reject(ReasonInsufficientFunds)
	}
	for _, maker := range canceled {
		c := CanceledMaker{OrderID: maker.OrderID, Account: maker.Account, Reason: CancelAmountTooLarge,
			Release: maker.Hold, Asset: makerAsset, Transaction: -1}
		if maker.Hold.IsPos() {
			c.Transaction = len(d.Ledger)
			d.Ledger = append(d.Ledger, Release(maker.OrderID, maker.Account, makerAsset, maker.Hold))
		}
		d.Canceled = append(d.Canceled, c)
	}
	d.Status, d.CancelReason, d.Remaining = Status(result.Outcome), result.CancelReason, result.Remaining
	if taker.Type == Market && len(result.Fills) > 0 {
		if belowMinNotional(order.Quantity, result.Fills[0].Price, in.MinNotional) {
			d.Status, d.CancelReason, d.Remaining = StatusCanceled, CancelBelowMinNotional, order.Quantity
			return d, nil
		}
	}
	if len(result.Fills) == 0 && result.Outcome == OutcomeCanceled {
		// Nothing filled and nothing rests: a hold would be released at
		// once, so there is none.
		return d, nil
	}

	d.Rests = result.Outcome == OutcomeOpen || result.Outcome == OutcomePartiallyFilled
	d.RestingHold = decimal.Zero
	if d.Rests {
		if d.RestingHold, err = Hold(order.Side, result.Remaining, worst, in.TakerFeeBps); err != nil || d.RestingHold.Scale() > LedgerScale {
			return reject(ReasonAmountTooLarge)
		}
	}
	if d.Release, err = ExactSub(sums.left, d.RestingHold); err != nil {
		return reject(ReasonAmountTooLarge)
	}
	if d.Release.IsNeg() {
		return Decision{}, fmt.Errorf("orders: decide %s: the remainder needs %s of %s left held", order.ID, d.RestingHold, sums.left)
	}

	d.Hold, d.HoldAsset, d.Filled, d.Trades = hold, holdAsset, result.Filled, plan
	d.Notional, d.Fees = sums.notional, sums.fees
	d.Ledger = append(d.Ledger, holdOf(order.ID, order.Account, holdAsset, hold))
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

// belowMinNotional reports whether quantity × price is below minimum,
// exactly: in the decimal type when the product fits it, as a big.Rat
// otherwise.
func belowMinNotional(quantity, price, minimum decimal.Decimal) bool {
	if notional, err := exactMul(quantity, price); err == nil {
		return notional.Cmp(minimum) < 0
	}
	return new(big.Rat).Mul(Rational(quantity), Rational(price)).Cmp(Rational(minimum)) < 0
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

// fillSums are the taker's sums over its fills: what they consume of its
// hold, their notional and its fees, and what is left of the hold.
type fillSums struct{ consumed, notional, fees, left decimal.Decimal }

// planTrades computes every amount of the fills of order, the taker holding
// hold, and their trade transactions: each amount exact and within the
// ledger's scale, and so each of the taker's sums and what each fill leaves
// its maker (fill i's maker is makers[i], as Match takes them). bad is the
// index of the first fill with an amount the decimal type cannot hold
// exactly, or -1 when every one fits; an error means the book contradicts
// itself.
func planTrades(order Order, in Instrument, hold decimal.Decimal, makers []Resting, fills []Fill) (plan []Trade, trades []Transaction, sums fillSums, bad int, err error) {
	plan, trades = make([]Trade, len(fills)), make([]Transaction, len(fills))
	sums.left = hold
	for i, fill := range fills {
		t, proceeds, fees, ok := tradeAmounts(order, in, fill)
		if !ok {
			return nil, nil, fillSums{}, i, nil
		}
		var errs [4]error
		var next fillSums
		next.consumed, errs[0] = ExactAdd(sums.consumed, t.TakerConsumes)
		next.notional, errs[1] = ExactAdd(sums.notional, t.Notional)
		next.fees, errs[2] = ExactAdd(sums.fees, t.TakerFee)
		next.left, errs[3] = ExactSub(hold, next.consumed)
		if errors.Join(errs[:]...) != nil {
			return nil, nil, fillSums{}, i, nil
		}
		if next.left.IsNeg() {
			return nil, nil, fillSums{}, -1, fmt.Errorf("fills consume %s of a hold of %s", next.consumed, hold)
		}
		if t.Maker, err = fillMaker(makers[i], t); errors.Is(err, ErrInexact) {
			return nil, nil, fillSums{}, i, nil
		} else if err != nil {
			return nil, nil, fillSums{}, -1, err
		}
		sums, plan[i], trades[i] = next, t, tradeOf(order, in, t, proceeds, fees)
	}
	return plan, trades, sums, -1, nil
}

// tradeAmounts computes the amounts of one fill of order, the taker: its
// notional, both fees, what it takes of the taker's hold and of the
// maker's, and what the seller receives (proceeds, the notional less its
// fee) and the venue (fees, both fees). ok is false when one of them is not
// exact within the ledger's scale.
func tradeAmounts(order Order, in Instrument, fill Fill) (t Trade, proceeds, fees decimal.Decimal, ok bool) {
	t = Trade{Fill: fill}
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
	if errors.Join(errs[:]...) != nil {
		return Trade{}, decimal.Decimal{}, decimal.Decimal{}, false
	}
	for _, amount := range []decimal.Decimal{t.Notional, t.TakerFee, t.MakerFee, t.TakerConsumes, t.Maker.GivesUp, proceeds, fees} {
		if amount.Scale() > LedgerScale {
			return Trade{}, decimal.Decimal{}, decimal.Decimal{}, false
		}
	}
	return t, proceeds, fees, true
}

// fillMaker is what a planned trade does to its maker, resting as given:
// its hold gives up what the fill consumes, and a maker filled whole leaves
// the book and releases what it still holds. It fails wrapping ErrInexact
// when what the maker keeps held is not exact.
func fillMaker(maker Resting, t Trade) (MakerFill, error) {
	if maker.OrderID != t.MakerOrderID {
		return MakerFill{}, fmt.Errorf("fill of %s where %s rests", t.MakerOrderID, maker.OrderID)
	}
	m := t.Maker
	m.Remaining, m.Status = t.MakerRemaining, StatusPartiallyFilled
	hold, err := ExactSub(maker.Hold, m.GivesUp)
	if err != nil {
		return MakerFill{}, fmt.Errorf("maker %s: %w", maker.OrderID, err)
	}
	if hold.IsNeg() {
		return MakerFill{}, fmt.Errorf("maker %s holds less than its fill consumes (%s)", maker.OrderID, m.GivesUp)
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
	// Five moves at most: one allocation.
	tx := Transaction{Kind: KindTrade, OrderID: order.ID, Moves: make([]Move, 0, 5)}
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
