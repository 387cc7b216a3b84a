package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// The decision of a batch: each order in turn, in memory, against the
// books and balances as the orders before it left them.

// errDecision: deciding one order of a batch failed (a planning error,
// not PostgreSQL's), so the batch is settled order by order and only that
// order meets it again.
var errDecision = errors.New("deciding an order failed")

// batchOutcome is what a batch decided for one of its orders.
type batchOutcome struct {
	result settlement
	err    error
	alone  bool
}

// clientOrderKey is an account's client order id, which one order holds.
type clientOrderKey struct{ account, clientOrderID string }

// takerRow is the row of an order the batch took, as it will be inserted.
type takerRow struct {
	req          *settleRequest
	order        orders.Order
	timeInForce  orders.TimeInForce
	status       orders.Status
	rejectReason orders.RejectReason
	cancelReason orders.CancelReason
	filled       decimal.Decimal
	notional     decimal.Decimal
	fees         decimal.Decimal
	hold         decimal.Decimal
	// duplicateOf is the order that holds the order's client order id, when
	// another does.
	duplicateOf string
	// rests: the order is on the book when the batch ends. Takers come to
	// rest in the order they are decided, and their rows draw their
	// sequences in that order.
	rests bool
}

// batchWork is what a batch decided so far, in memory, before one round
// trip writes it all.
type batchWork struct {
	// ctx and tx read more of a book when a taker needs it.
	ctx      context.Context
	tx       sender
	reads    map[sideKey]*sideRead
	books    map[string]*instrumentBook
	balances map[balanceKey]*lockedBalance
	takers   []*takerRow
	makers   []*bookOrder
	txns     []*ledgerTxn
	trades   []*tradeRow
	// holders are the orders holding their account's client order ids: as
	// read (another order's row), then each taker of the batch written as
	// the first with its pair.
	holders map[clientOrderKey]string
	// provisional is the next sequence of a taker coming to rest in the
	// batch's books: above every sequence drawn before, as the one it
	// draws when its row is inserted will be.
	provisional int64
}

// decideBatch decides every order of the batch in memory, on the books as
// read and the balances given (copied: the decision moves its own).
func decideBatch(ctx context.Context, tx sender, batch []*settleRequest, instruments map[string]orders.Instrument,
	reads map[sideKey]*sideRead, balances map[balanceKey]*lockedBalance, existing map[string]bool,
	holders map[clientOrderKey]string,
) (*batchWork, []batchOutcome, error) {
	w := &batchWork{
		ctx:         ctx,
		tx:          tx,
		reads:       reads,
		holders:     make(map[clientOrderKey]string, len(holders)),
		books:       make(map[string]*instrumentBook, len(instruments)),
		balances:    make(map[balanceKey]*lockedBalance, len(balances)),
		provisional: 1 << 62,
	}
	for symbol, in := range instruments {
		book := &instrumentBook{in: in}
		for _, side := range []orders.Side{orders.Buy, orders.Sell} {
			if r := reads[sideKey{symbol, side}]; r != nil {
				resting := make([]*bookOrder, len(r.rows))
				for i := range r.rows {
					o := r.rows[i]
					resting[i] = &o
				}
				*book.side(side) = resting
			}
		}
		w.books[symbol] = book
	}
	for key, b := range balances {
		w.balances[key] = &lockedBalance{available: new(big.Rat).Set(b.available),
			held: new(big.Rat).Set(b.held), known: true, name: b.name, asset: b.asset, acc: b.acc,
			start: b.available}
	}
	maps.Copy(w.holders, holders)
	outcomes := make([]batchOutcome, len(batch))
	for i, req := range batch {
		written := len(w.takers)
		outcome, err := w.decide(req, existing[req.order.ID])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: order %s: %w", errDecision, req.order.ID, err)
		}
		outcomes[i] = outcome
		if len(w.takers) > written && w.takers[written].duplicateOf == "" {
			// Its row will hold its client order id: a later order of the
			// batch with the same is its duplicate.
			w.holders[clientOrderKey{req.order.Account, req.order.ClientOrderID}] = req.order.ID
		}
	}
	return w, outcomes, nil
}

// decide settles one order of the batch in memory. The outcome's err is the
// order's own failure (nothing of it is written); the error returned is the
// batch's, which nothing of the batch survives.
func (w *batchWork) decide(req *settleRequest, duplicate bool) (batchOutcome, error) {
	order := req.order
	book := w.books[order.Symbol]
	malformed := func(format string, args ...any) (batchOutcome, error) {
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: order %s: %s", orders.ErrMalformedOrder, order.ID,
			fmt.Sprintf(format, args...)))}, nil
	}
	switch {
	case duplicate:
		return batchOutcome{result: settlement{duplicate: true}}, nil
	case book == nil:
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrUnknownInstrument, order.Symbol, order.ID))}, nil
	}
	in := book.in
	baseRow, quoteRow := w.balances[balanceKey{order.Account, in.Base}], w.balances[balanceKey{order.Account, in.Quote}]
	if baseRow == nil || quoteRow == nil || !baseRow.known || !quoteRow.known {
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrNoAccount, order.Account, order.ID))}, nil
	}
	if err := req.ctx.Err(); err != nil {
		return batchOutcome{err: fmt.Errorf("orders: settle %s: %w", order.ID, context.Cause(req.ctx))}, nil
	}

	row := &takerRow{req: req, order: order, timeInForce: order.TimeInForce}
	if row.timeInForce == "" {
		// A job admitted before the market names none: what it meant.
		row.timeInForce = orders.GTC
		if order.Type == orders.Market {
			row.timeInForce = orders.IOC
		}
	}
	if !order.Quantity.IsPos() || order.Quantity.Scale() > ledgerScale {
		return malformed("quantity %s", order.Quantity)
	}
	reject := func(reason orders.RejectReason) (batchOutcome, error) {
		row.status, row.rejectReason = orders.StatusRejected, reason
		w.takers = append(w.takers, row)
		return batchOutcome{result: settlement{status: orders.StatusRejected, reason: string(reason)}}, nil
	}
	pair := clientOrderKey{order.Account, order.ClientOrderID}
	if holder, taken := w.holders[pair]; taken {
		row.duplicateOf = holder
		return reject(orders.ReasonDuplicateClientOrderID)
	}
	if in.Halted {
		return reject(orders.ReasonInstrumentHalted)
	}

	taker := orders.Taker{Account: order.Account, Side: order.Side, Type: order.Type, TimeInForce: row.timeInForce,
		PostOnly: order.PostOnly, Quantity: order.Quantity}
	var worst decimal.Decimal // the limit or protection price: what the hold is at
	switch order.Type {
	case orders.Limit:
		if order.Price == nil || !order.Price.IsPos() || order.Price.Scale() > ledgerScale {
			return malformed("a limit order without a usable price")
		}
		inBand, err := in.InBand(*order.Price)
		if err != nil {
			return malformed("%v", err)
		}
		if !inBand {
			return reject(orders.ReasonPriceOutOfBand)
		}
		taker.Price, worst = *order.Price, *order.Price
	case orders.Market:
		if order.Price != nil {
			return malformed("a market order with a price")
		}
		low, high, err := in.Band()
		if err != nil {
			return malformed("%v", err)
		}
		taker.ProtectionPrice = low
		if order.Side == orders.Buy {
			taker.ProtectionPrice = high
		}
		if !taker.ProtectionPrice.IsPos() {
			return malformed("protection price %s", taker.ProtectionPrice)
		}
		worst = taker.ProtectionPrice
	default:
		return malformed("type %q", order.Type)
	}

	// The opposing side as the batch read it, and more of it if the taker
	// can reach past that.
	side := order.Side.Opposite()
	var result orders.MatchResult
	var byID map[string]*bookOrder
	for {
		opposing, complete := w.bookPage(book, side, worst)
		resting := make([]orders.Resting, len(opposing))
		byID = make(map[string]*bookOrder, len(opposing))
		for i, o := range opposing {
			resting[i] = orders.Resting{OrderID: o.id, Account: o.account, Price: o.price, Remaining: o.remaining, Sequence: o.sequence}
			byID[o.id] = o
		}
		var err error
		result, err = orders.Match(taker, orders.Book{Resting: resting, Complete: complete})
		if errors.Is(err, orders.ErrIncompleteBook) {
			if err := w.readMore(book, side, worst, order.Quantity); err != nil {
				return batchOutcome{}, err
			}
			continue
		}
		if err != nil {
			return malformed("%v", err)
		}
		break
	}
	if result.Outcome == orders.OutcomeRejected {
		// Post-only that would take: decided before any hold.
		return reject(result.RejectReason)
	}

	// The hold: the worst case the whole quantity can cost.
	holdAsset, holdRow := in.Base, baseRow
	if order.Side == orders.Buy {
		holdAsset, holdRow = in.Quote, quoteRow
	}
	hold, err := orders.Hold(order.Side, order.Quantity, worst, in.TakerFeeBps)
	if err != nil || hold.Scale() > ledgerScale {
		return malformed("hold %s: %v", hold, err)
	}
	if !holdRow.funds(orders.Rational(hold)) {
		return reject(orders.ReasonInsufficientFunds)
	}
	if len(result.Fills) == 0 && result.Outcome == orders.OutcomeCanceled {
		// Nothing filled and nothing rests: a hold would be released at
		// once, so neither is written.
		row.status, row.cancelReason = orders.StatusCanceled, result.CancelReason
		w.takers = append(w.takers, row)
		return batchOutcome{result: settlement{status: orders.StatusCanceled, reason: string(result.CancelReason)}}, nil
	}

	// Plan every amount first, so that a fee or hold that does not fit
	// fails the order before anything of it is applied.
	type planned struct {
		fill               orders.Fill
		maker              *bookOrder
		notional           decimal.Decimal
		makerFee, takerFee decimal.Decimal
		makerGivesUp       decimal.Decimal // the maker's hold the fill consumes
		makerRelease       decimal.Decimal // the maker's hold released as it leaves the book
	}
	plan := make([]planned, len(result.Fills))
	consumed := decimal.Zero
	var notionalSum, feeSum decimal.Decimal
	for i, fill := range result.Fills {
		p := planned{fill: fill, maker: byID[fill.MakerOrderID]}
		if p.maker == nil {
			return batchOutcome{}, fmt.Errorf("match filled %s, which is not in the book", fill.MakerOrderID)
		}
		var errs [8]error
		p.notional, errs[0] = fill.Notional()
		p.takerFee, errs[1] = orders.Fee(p.notional, in.TakerFeeBps)
		p.makerFee, errs[2] = orders.Fee(p.notional, in.MakerFeeBps)
		if order.Side == orders.Buy {
			var takerCost decimal.Decimal
			takerCost, errs[3] = orders.ExactAdd(p.notional, p.takerFee)
			consumed, errs[4] = orders.ExactAdd(consumed, takerCost)
			p.makerGivesUp = fill.Quantity
		} else {
			consumed, errs[3] = orders.ExactAdd(consumed, fill.Quantity)
			p.makerGivesUp, errs[4] = orders.ExactAdd(p.notional, p.makerFee)
		}
		notionalSum, errs[5] = orders.ExactAdd(notionalSum, p.notional)
		feeSum, errs[6] = orders.ExactAdd(feeSum, p.takerFee)
		if err := errors.Join(errs[:]...); err != nil {
			return malformed("fill of %s at %s: %v", fill.Quantity, fill.Price, err)
		}
		for _, amount := range []decimal.Decimal{p.notional, p.takerFee, p.makerFee, p.makerGivesUp} {
			if amount.Scale() > ledgerScale {
				return malformed("fill amount %s has more decimals than the ledger holds", amount)
			}
		}
		plan[i] = p
	}
	left, err := orders.ExactSub(hold, consumed)
	if err != nil || left.IsNeg() {
		return batchOutcome{}, fmt.Errorf("fills consume %s of a hold of %s", consumed, hold)
	}
	rests := result.Outcome == orders.OutcomeOpen || result.Outcome == orders.OutcomePartiallyFilled
	keep := decimal.Zero
	if rests {
		if keep, err = orders.Hold(order.Side, result.Remaining, worst, in.TakerFeeBps); err != nil || keep.Scale() > ledgerScale {
			return malformed("hold %s of the remainder: %v", keep, err)
		}
	}
	release, err := orders.ExactSub(left, keep)
	if err != nil || release.IsNeg() {
		return batchOutcome{}, fmt.Errorf("the remainder needs %s of %s left held", keep, left)
	}

	// Apply: nothing below can fail for the order's sake.
	base, quote := in.Base, in.Quote
	holdTxn := w.txn(kindHold, order.ID)
	w.move(holdTxn, order.Account, holdAsset, partAvailable, hold.Neg())
	w.move(holdTxn, order.Account, holdAsset, partHeld, hold)
	for _, p := range plan {
		maker, fill := p.maker, p.fill
		feesToVenue := mustAdd(p.takerFee, p.makerFee)
		t := w.txn(kindTrade, order.ID)
		if order.Side == orders.Buy {
			w.move(t, order.Account, quote, partHeld, mustAdd(p.notional, p.takerFee).Neg())
			w.move(t, order.Account, base, partAvailable, fill.Quantity)
			w.move(t, maker.account, base, partHeld, fill.Quantity.Neg())
			w.move(t, maker.account, quote, partAvailable, mustSub(p.notional, p.makerFee))
		} else {
			w.move(t, order.Account, base, partHeld, fill.Quantity.Neg())
			w.move(t, order.Account, quote, partAvailable, mustSub(p.notional, p.takerFee))
			w.move(t, maker.account, quote, partHeld, mustAdd(p.notional, p.makerFee).Neg())
			w.move(t, maker.account, base, partAvailable, fill.Quantity)
		}
		w.move(t, orders.VenueAccount, quote, partAvailable, feesToVenue)
		w.trades = append(w.trades, &tradeRow{
			symbol: in.Symbol, maker: maker.id, taker: order.ID, makerAccount: maker.account, takerAccount: order.Account,
			takerSide: order.Side, price: fill.Price, quantity: fill.Quantity, makerFee: p.makerFee, takerFee: p.takerFee,
			makerFeeBps: in.MakerFeeBps, takerFeeBps: in.TakerFeeBps, txn: t,
		})
		if err := w.fillMaker(book, maker, fill, p.notional, p.makerFee, p.makerGivesUp); err != nil {
			return batchOutcome{}, err
		}
		book.in.LastPrice, book.traded = fill.Price, true
	}
	if release.IsPos() {
		t := w.txn(kindRelease, order.ID)
		w.move(t, order.Account, holdAsset, partHeld, release.Neg())
		w.move(t, order.Account, holdAsset, partAvailable, release)
	}

	row.status = orders.Status(result.Outcome)
	row.cancelReason = result.CancelReason
	row.filled, row.notional, row.fees, row.hold = result.Filled, notionalSum, feeSum, keep
	w.takers = append(w.takers, row)
	if rests {
		row.rests = true
		book.rest(&bookOrder{id: order.ID, account: order.Account, side: order.Side, price: *order.Price,
			remaining: result.Remaining, hold: keep, sequence: w.provisional, taker: row})
		w.provisional++
	}
	return batchOutcome{result: settlement{status: row.status, reason: string(row.cancelReason), trades: len(plan)}}, nil
}

// fillMaker applies one fill to a resting order: what it filled, paid and
// gave up of its hold; a filled maker leaves the book, and a filled buy
// releases what is left of its hold (it held its fee at the taker rate).
func (w *batchWork) fillMaker(book *instrumentBook, maker *bookOrder, fill orders.Fill, notional, fee, givesUp decimal.Decimal) error {
	var errs [3]error
	maker.remaining = fill.MakerRemaining
	maker.hold, errs[0] = orders.ExactSub(maker.hold, givesUp)
	if err := errors.Join(errs[:]...); err != nil || maker.hold.IsNeg() {
		return fmt.Errorf("maker %s holds less than its fill consumes (%s): %v", maker.id, givesUp, err)
	}
	status := orders.StatusPartiallyFilled
	release := decimal.Zero
	if maker.remaining.IsZero() {
		status, release, maker.hold = orders.StatusFilled, maker.hold, decimal.Zero
		side := book.side(maker.side)
		*side = slices.DeleteFunc(*side, func(o *bookOrder) bool { return o == maker })
	}
	if release.IsPos() {
		asset := book.in.Base
		if maker.side == orders.Buy {
			asset = book.in.Quote
		}
		t := w.txn(kindRelease, maker.id)
		w.move(t, maker.account, asset, partHeld, release.Neg())
		w.move(t, maker.account, asset, partAvailable, release)
	}
	if row := maker.taker; row != nil {
		// A taker of this batch, resting since: its row is still to be
		// inserted, with all of this in it.
		row.status, row.hold = status, maker.hold
		row.filled = mustAdd(row.filled, fill.Quantity)
		row.notional = mustAdd(row.notional, notional)
		row.fees = mustAdd(row.fees, fee)
		if status == orders.StatusFilled {
			row.rests = false
		}
		return nil
	}
	if !maker.touched {
		maker.touched = true
		w.makers = append(w.makers, maker)
	}
	maker.status = status
	maker.filled = mustAdd(maker.filled, fill.Quantity)
	maker.notional = mustAdd(maker.notional, notional)
	maker.fees = mustAdd(maker.fees, fee)
	maker.givenUp = mustAdd(maker.givenUp, mustAdd(givesUp, release))
	return nil
}

// mustAdd and mustSub are for sums of amounts already checked to fit; a
// failure is a bug.
func mustAdd(a, b decimal.Decimal) decimal.Decimal {
	got, err := orders.ExactAdd(a, b)
	if err != nil {
		panic(fmt.Sprintf("postgres: settle: %s + %s: %v", a, b, err))
	}
	return got
}

func mustSub(a, b decimal.Decimal) decimal.Decimal {
	got, err := orders.ExactSub(a, b)
	if err != nil {
		panic(fmt.Sprintf("postgres: settle: %s - %s: %v", a, b, err))
	}
	return got
}
