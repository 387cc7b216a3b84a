package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"

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
	// filled, notional and fees sum the order's fills as the taker and,
	// once it rests, as a maker of later takers of the batch.
	filled, notional, fees ledgerAmount
	hold                   decimal.Decimal
	// protection is a market order's protection price; zero for a limit
	// order.
	protection decimal.Decimal
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
	// owned is the owner's fence when the batch decides on a book an owner
	// keeps in memory (settle_owned.go); nil when it locked the instrument
	// and read the book.
	owned *ownedFence
	// seen are the resting orders an owner's decisions relied on without
	// changing them (settle_owned.go, relyOn).
	seen []*bookOrder
	// generation marks the resting orders this batch may change in place:
	// an owner's book shares the others with the batches before, and the
	// batch copies one before it changes it (claim).
	generation int64
}

// decideBatch decides every order of the batch in memory, on the books as
// read and the balances given (copied: the decision moves its own).
func decideBatch(ctx context.Context, tx sender, batch []*settleRequest, instruments map[string]orders.Instrument,
	reads map[sideKey]*sideRead, balances map[balanceKey]*lockedBalance, existing map[string]bool,
	holders map[clientOrderKey]string,
) (*batchWork, []batchOutcome, error) {
	w := newBatchWork(ctx, tx, reads, balances, holders)
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
	outcomes, err := w.decideAll(batch, existing)
	if err != nil {
		return nil, nil, err
	}
	return w, outcomes, nil
}

// newBatchWork is a batch about to decide, with no book yet, on copies of
// the balances and client order id holders given.
func newBatchWork(ctx context.Context, tx sender, reads map[sideKey]*sideRead, balances map[balanceKey]*lockedBalance,
	holders map[clientOrderKey]string,
) *batchWork {
	w := &batchWork{
		ctx:         ctx,
		tx:          tx,
		reads:       reads,
		holders:     make(map[clientOrderKey]string, len(holders)),
		books:       make(map[string]*instrumentBook, 1),
		balances:    make(map[balanceKey]*lockedBalance, len(balances)),
		provisional: 1 << 62,
	}
	for key, b := range balances {
		w.balances[key] = &lockedBalance{available: new(ledgerAmount).set(b.available),
			held: new(ledgerAmount).set(b.held), known: true, name: b.name, asset: b.asset, acc: b.acc,
			start: b.available}
	}
	maps.Copy(w.holders, holders)
	return w
}

// decideAll decides each order of the batch in turn.
func (w *batchWork) decideAll(batch []*settleRequest, existing map[string]bool) ([]batchOutcome, error) {
	outcomes := make([]batchOutcome, len(batch))
	for i, req := range batch {
		written := len(w.takers)
		outcome, err := w.decide(req, existing[req.order.ID])
		if err != nil {
			return nil, fmt.Errorf("%w: order %s: %w", errDecision, req.order.ID, err)
		}
		outcomes[i] = outcome
		if len(w.takers) > written && w.takers[written].duplicateOf == "" {
			// Its row will hold its client order id: a later order of the
			// batch with the same is its duplicate.
			w.holders[clientOrderKey{req.order.Account, req.order.ClientOrderID}] = req.order.ID
		}
	}
	return outcomes, nil
}

// decide settles one order of the batch in memory: orders.Decide decides,
// on the book and balances as the batch left them, and what it decided is
// recorded in the batch. The outcome's err is the order's own failure
// (nothing of it is written); the error returned is the batch's, which
// nothing of the batch survives.
func (w *batchWork) decide(req *settleRequest, duplicate bool) (batchOutcome, error) {
	if req.command != nil {
		return w.decideCommand(req)
	}
	order := req.order
	book := w.books[order.Symbol]
	switch {
	case duplicate:
		return batchOutcome{result: settlement{duplicate: true}}, nil
	case book == nil:
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrUnknownInstrument, order.Symbol, order.ID))}, nil
	}
	baseRow, quoteRow := w.balances[balanceKey{order.Account, book.in.Base}], w.balances[balanceKey{order.Account, book.in.Quote}]
	if baseRow == nil || quoteRow == nil || !baseRow.known || !quoteRow.known {
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrNoAccount, order.Account, order.ID))}, nil
	}
	if err := req.ctx.Err(); err != nil {
		return batchOutcome{err: fmt.Errorf("postgres: settle %s: %w", order.ID, context.Cause(req.ctx))}, nil
	}

	// The opposing side as the batch read it, and more of it if the taker
	// can reach past that.
	side := order.Side.Opposite()
	var reach decimal.Decimal
	var byID map[string]*bookOrder
	var page []*bookOrder
	opposing := func(worst decimal.Decimal) orders.Book {
		reach = worst
		var complete bool
		page, complete = w.bookPage(book, side, worst)
		resting := make([]orders.Resting, len(page))
		byID = make(map[string]*bookOrder, len(page))
		for i, o := range page {
			resting[i] = orders.Resting{OrderID: o.id, Account: o.account, Price: o.price, Remaining: o.remaining,
				Sequence: o.sequence, Hold: o.hold}
			byID[o.id] = o
		}
		return orders.Book{Resting: resting, Complete: complete}
	}
	// The funds check records on the row what its answer depended on: the
	// guard of the batch's locks (lockedBalance.funds).
	funds := func(asset string, amount decimal.Decimal) bool {
		return w.balances[balanceKey{order.Account, asset}].funds(amountOf(amount))
	}
	holder := w.holders[clientOrderKey{order.Account, order.ClientOrderID}]
	for {
		d, err := orders.Decide(order, book.in, holder, opposing, funds)
		switch {
		case errors.Is(err, orders.ErrIncompleteBook):
			if err := w.readMore(book, side, reach, order.Quantity); err != nil {
				return batchOutcome{}, err
			}
			continue
		case errors.Is(err, orders.ErrMalformedOrder):
			return batchOutcome{err: unsettleable(err)}, nil
		case err != nil:
			return batchOutcome{}, err
		}
		if w.owned != nil {
			w.relyOn(order, d, page)
		}
		return w.apply(req, book, d, byID)
	}
}

// apply records a decision in the batch: the taker's row, the ledger, the
// trades, the makers' fills and, when the taker rests, its place in the
// book.
func (w *batchWork) apply(req *settleRequest, book *instrumentBook, d orders.Decision, byID map[string]*bookOrder) (batchOutcome, error) {
	order := req.order
	row := &takerRow{req: req, order: order, timeInForce: d.TimeInForce, status: d.Status, rejectReason: d.RejectReason,
		cancelReason: d.CancelReason, duplicateOf: d.DuplicateOf, hold: d.RestingHold, protection: d.ProtectionPrice}
	row.filled.add(d.Filled)
	row.notional.add(d.Notional)
	row.fees.add(d.Fees)
	txns := make([]*ledgerTxn, len(d.Ledger))
	for i, t := range d.Ledger {
		txns[i] = w.record(t)
	}
	for _, c := range d.Canceled {
		maker := byID[c.OrderID]
		if maker == nil {
			return batchOutcome{}, fmt.Errorf("decided to cancel %s, which is not in the book", c.OrderID)
		}
		maker = w.claim(book, maker, byID)
		w.cancelMaker(book, maker, c)
	}
	in := book.in
	for _, t := range d.Trades {
		maker := byID[t.MakerOrderID]
		if maker == nil {
			return batchOutcome{}, fmt.Errorf("match filled %s, which is not in the book", t.MakerOrderID)
		}
		maker = w.claim(book, maker, byID)
		w.trades = append(w.trades, &tradeRow{
			symbol: in.Symbol, maker: maker.id, taker: order.ID, makerAccount: maker.account, takerAccount: order.Account,
			takerSide: order.Side, price: t.Price, quantity: t.Quantity, makerFee: t.MakerFee, takerFee: t.TakerFee,
			makerFeeBps: in.MakerFeeBps, takerFeeBps: in.TakerFeeBps, txn: txns[t.Transaction],
		})
		if err := w.fillMaker(book, maker, t); err != nil {
			return batchOutcome{}, err
		}
		book.in.LastPrice, book.traded = t.Price, true
	}
	w.takers = append(w.takers, row)
	if d.Rests {
		row.rests = true
		book.rest(&bookOrder{id: order.ID, account: order.Account, side: order.Side, price: *order.Price,
			remaining: d.Remaining, hold: d.RestingHold, sequence: w.provisional, taker: row,
			generation: w.generation})
		w.provisional++
	}
	reason := string(d.CancelReason)
	if d.Status == orders.StatusRejected {
		reason = string(d.RejectReason)
	}
	return batchOutcome{result: settlement{status: d.Status, reason: reason, trades: len(d.Trades)}}, nil
}

// fillMaker records one trade's fill of a resting order: what it filled,
// paid and gave up of its hold (orders.Decide decided each); a filled maker
// leaves the book. The sums are exact whatever their size.
func (w *batchWork) fillMaker(book *instrumentBook, maker *bookOrder, t orders.Trade) error {
	m := t.Maker
	maker.remaining, maker.hold = m.Remaining, m.Hold
	if m.Status == orders.StatusFilled {
		book.remove(maker)
	}
	if row := maker.taker; row != nil {
		// A taker of this batch, resting since: its row is still to be
		// inserted, with all of this in it.
		row.status, row.hold = m.Status, m.Hold
		row.filled.add(t.Quantity)
		row.notional.add(t.Notional)
		row.fees.add(t.MakerFee)
		if m.Status == orders.StatusFilled {
			row.rests = false
		}
		return nil
	}
	w.touch(maker)
	maker.status = m.Status
	maker.filled.add(t.Quantity)
	maker.notional.add(t.Notional)
	maker.fees.add(t.MakerFee)
	// What left its hold: consumed by the fill, or released.
	maker.givenUp.add(m.GivesUp)
	maker.givenUp.add(m.Release)
	return nil
}

// cancelMaker records that the decision canceled a resting order (a maker
// whose fill the decimal type could not hold): it leaves the book, what
// filled before stays filled, and its whole hold is released (the
// decision's release transaction moves it).
func (w *batchWork) cancelMaker(book *instrumentBook, maker *bookOrder, c orders.CanceledMaker) {
	book.remove(maker)
	maker.hold = decimal.Zero
	if row := maker.taker; row != nil {
		row.status, row.cancelReason, row.hold, row.rests = orders.StatusCanceled, c.Reason, decimal.Zero, false
		return
	}
	w.touch(maker)
	maker.status, maker.cancelReason = orders.StatusCanceled, c.Reason
	maker.givenUp.add(c.Release)
}

// touch lists a resting order read from the table among those the batch
// writes.
func (w *batchWork) touch(maker *bookOrder) {
	if !maker.touched {
		maker.touched = true
		w.makers = append(w.makers, maker)
	}
}
