package orders

import (
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/google/btree"
	"github.com/govalues/decimal"
)

// The book in memory: the resting orders of one instrument as the
// instrument's owner keeps them between batches (DESIGN.md, "The engine,
// next"). Each side is a B-tree of price levels ordered best first; each
// level is a FIFO of its orders by sequence, linked through the orders so
// that a cancel unlinks one in O(1); an index by id and one by account
// find an order without a search. A fill finds its level through its
// order, so matching touches the tree only to walk from the best level
// and to drop a level it empties.
//
// What the owner will sequence besides orders fits as follows. A cancel
// and a GTD expiry are Remove (the expiries kept by the owner, in time
// order, apart from the book). An amend that lowers the quantity only
// would keep the order's place (its Remaining and its level's quantity
// lowered); any other amend is Remove and Rest with a new sequence. A stop
// order is in no book until it triggers; then it is an order like any
// other. A decision that cancels resting orders (self-trade prevention
// that cancels the maker) is removed in Apply, where its seam is marked.
// The public feed's book deltas are the levels an event changed: a level
// changes only in insert, remove and a fill (priceLevel.add and
// subtract), where the levels changed can be collected and read back
// after the event as DepthLevels; a snapshot is Depth (or Orders, for all
// of it) taken between two events.

// Errors of the book. Each is a bug (the caller's, or of what the book was
// loaded from), never a client's mistake: the owner stops using the book
// and loads it again.
var (
	// ErrBookRefused: Rest was given an order the book cannot hold: one in
	// it already, one with a field no resting order can have, or one that
	// would cross the opposite side (a book is never crossed at rest).
	ErrBookRefused = errors.New("orders: the book refuses the order")
	// ErrDecisionMismatch: Apply was given a decision that was not made
	// against the book as it stands (a fill of an order not in it, or not
	// next in priority, a maker's remaining or hold that does not follow
	// from its fill, a taker resting across the opposite side). Nothing of
	// it was applied.
	ErrDecisionMismatch = errors.New("orders: the decision does not fit the book")
)

// levelDegree is the B-tree's degree: nodes of 15 to 31 price levels.
const levelDegree = 16

// BookOrder is one resting order as the book keeps it: what matching needs
// of it, and what rendering its state and its events needs, so that its
// owner never reads it back from PostgreSQL.
type BookOrder struct {
	ID            string
	ClientOrderID string
	Account       string
	Side          Side
	// TimeInForce is gtc: nothing else rests.
	TimeInForce TimeInForce
	PostOnly    bool
	Price       decimal.Decimal
	// Quantity is what the order was placed for: Filled + Remaining.
	Quantity  decimal.Decimal
	Remaining decimal.Decimal
	// Hold is what the order still holds for its remaining quantity (quote
	// for a buy, base for a sell).
	Hold decimal.Decimal
	// Filled, Notional and Fees are what the order filled so far: base,
	// quote traded, and fees paid, in quote.
	Filled, Notional, Fees decimal.Decimal
	CreatedAt              time.Time
	// Sequence is the order's time priority: among orders of one price, the
	// lowest matches first. Unique within its price level.
	Sequence int64
}

// Status is the order's: open until it fills any, partially_filled after.
func (o *BookOrder) Status() Status {
	if o.Filled.IsZero() {
		return StatusOpen
	}
	return StatusPartiallyFilled
}

// Resting is the order as Match takes it.
func (o *BookOrder) Resting() Resting {
	return Resting{OrderID: o.ID, Account: o.Account, Price: o.Price, Remaining: o.Remaining,
		Sequence: o.Sequence, Hold: o.Hold}
}

// OrderBook is the resting orders of one instrument, in memory. Rest puts
// an order on it, Remove takes one off, Opposing shows Decide the side a
// taker meets, and Apply carries out what Decide decided; every change is
// checked first and refused whole when it does not fit, so the book is
// never left half changed. The book hands out the sequences of the orders
// that come to rest through Apply.
//
// An OrderBook is not safe for concurrent use: one owner holds it.
type OrderBook struct {
	symbol   string
	bids     bookSide // buy orders, highest price first
	asks     bookSide // sell orders, lowest price first
	byID     map[string]*bookEntry
	accounts map[string]*accountOrders
	// sequence is the highest sequence an order of the book had or was
	// given.
	sequence int64
	// Buffers reused from one call to the next: what Opposing shows, what
	// Apply checked, and entries of orders that left the book (at most
	// freeEntries), for the next to rest.
	resting []Resting
	fills   []makerFill
	free    []*bookEntry
}

// freeEntries bounds the entries a book keeps for reuse: a book that
// shrank gives the rest back to the garbage collector.
const freeEntries = 1024

// bookSide is one side of a book: its price levels, best first.
type bookSide struct {
	side   Side
	levels *btree.BTreeG[levelKey]
	orders int
}

// levelKey is a price level in its side's B-tree: its price is kept in the
// tree's nodes, so that a search compares prices without loading a level.
type levelKey struct {
	price decimal.Decimal
	level *priceLevel
}

// priceLevel is the orders of one side at one price, in sequence order.
type priceLevel struct {
	price      decimal.Decimal
	head, tail *bookEntry
	orders     int
	// quantity is the sum of the orders' remaining, kept exactly; when a
	// change cannot be (the sum would need more than the decimal type's 19
	// digits), recount is set and the sum is counted again when it is
	// asked for.
	quantity decimal.Decimal
	recount  bool
}

// bookEntry is a resting order in its level's FIFO and its account's list.
type bookEntry struct {
	BookOrder
	level                    *priceLevel
	prev, next               *bookEntry // in the level, by sequence
	account                  *accountOrders
	accountPrev, accountNext *bookEntry
}

// accountOrders is the resting orders of one account, in the order they
// came to rest in the book.
type accountOrders struct {
	head, tail *bookEntry
	orders     int
}

// makerFill is a fill Apply checked: the maker's entry and its totals
// after the fill.
type makerFill struct {
	entry                  *bookEntry
	trade                  *Trade
	filled, notional, fees decimal.Decimal
}

// NewOrderBook is the empty book of the instrument symbol.
func NewOrderBook(symbol string) *OrderBook {
	return &OrderBook{
		symbol:   symbol,
		bids:     newBookSide(Buy),
		asks:     newBookSide(Sell),
		byID:     make(map[string]*bookEntry),
		accounts: make(map[string]*accountOrders),
	}
}

func newBookSide(side Side) bookSide {
	better := func(a, b levelKey) bool { return a.price.Cmp(b.price) > 0 }
	if side == Sell {
		better = func(a, b levelKey) bool { return a.price.Cmp(b.price) < 0 }
	}
	return bookSide{side: side, levels: btree.NewG(levelDegree, better)}
}

// Symbol is the instrument's.
func (b *OrderBook) Symbol() string { return b.symbol }

// Len is the number of resting orders.
func (b *OrderBook) Len() int { return len(b.byID) }

// Sequence is the highest sequence of an order that rested in the book:
// the next order Apply rests gets the one after. Rest raises it to the
// sequence of each order it takes, so a book loaded from PostgreSQL goes
// on from the highest sequence loaded.
func (b *OrderBook) Sequence() int64 { return b.sequence }

// Get is the resting order id.
func (b *OrderBook) Get(id string) (BookOrder, bool) {
	e := b.byID[id]
	if e == nil {
		return BookOrder{}, false
	}
	return e.BookOrder, true
}

// BestBid is the highest price a buy order rests at; false when none does.
func (b *OrderBook) BestBid() (decimal.Decimal, bool) { return b.bids.bestPrice() }

// BestAsk is the lowest price a sell order rests at; false when none does.
func (b *OrderBook) BestAsk() (decimal.Decimal, bool) { return b.asks.bestPrice() }

// Rest puts o on the book, behind the orders of its price with a lower
// sequence and ahead of those with a higher one (a book loaded in any
// order comes out in priority order; loaded in sequence order, each order
// goes to the back of its level at once). It refuses, wrapping
// ErrBookRefused, an order whose id is in the book already, whose
// sequence another order of its price has, that has a field no resting
// order can have (a remaining not above zero, filled + remaining ≠
// quantity, a time in force other than gtc, ...), or that would cross the
// best order of the opposite side.
func (b *OrderBook) Rest(o BookOrder) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s order %s: %s", ErrBookRefused, b.symbol, o.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case o.ID == "":
		return refuse("no id")
	case b.byID[o.ID] != nil:
		return refuse("rests in the book already")
	case o.Account == "":
		return refuse("no account")
	case o.Side != Buy && o.Side != Sell:
		return refuse("side %q", o.Side)
	case o.TimeInForce != GTC:
		return refuse("time in force %q does not rest", o.TimeInForce)
	case !o.Price.IsPos():
		return refuse("price %s is not above zero", o.Price)
	case !o.Remaining.IsPos():
		return refuse("remaining %s is not above zero", o.Remaining)
	case o.Hold.IsNeg() || o.Filled.IsNeg() || o.Notional.IsNeg() || o.Fees.IsNeg():
		return refuse("a negative amount: hold %s, filled %s, notional %s, fees %s", o.Hold, o.Filled, o.Notional, o.Fees)
	case o.Sequence <= 0:
		return refuse("sequence %d is not above zero", o.Sequence)
	}
	if total, err := exactSum(o.Filled, o.Remaining); err != nil || total.Cmp(o.Quantity) != 0 {
		return refuse("filled %s + remaining %s is not its quantity %s", o.Filled, o.Remaining, o.Quantity)
	}
	if best := b.side(o.Side.Opposite()).best(); best != nil && reaches(o.Side, o.Price, best.price) {
		return refuse("%s at %s crosses the best %s order at %s", o.Side, o.Price, best.head.Side, best.price)
	}
	s := b.side(o.Side)
	level := s.level(o.Price)
	var after *bookEntry
	if level != nil {
		after = level.tail
		for after != nil && after.Sequence > o.Sequence {
			after = after.prev
		}
		if after != nil && after.Sequence == o.Sequence {
			return refuse("order %s at its price has its sequence %d", after.ID, o.Sequence)
		}
	}
	b.insert(s, level, after, o)
	b.sequence = max(b.sequence, o.Sequence)
	return nil
}

// Remove takes the resting order id off the book (a cancel, an expiry)
// and returns it as it was; false when no order id rests.
func (b *OrderBook) Remove(id string) (BookOrder, bool) {
	e := b.byID[id]
	if e == nil {
		return BookOrder{}, false
	}
	o := e.BookOrder
	b.remove(e)
	return o, true
}

// Opposing is the side of the book a taker on side taker meets, as Decide
// takes it (see OpposingSide and Book): the resting orders best first,
// from the best through the first whose remaining, summed, covers
// quantity, and none past worst (the taker's limit or protection price).
// Complete is false only when an order the taker could reach was left
// out, so a taker that takes one or two makers costs one or two orders
// however deep the book is, and Match never needs more than it was given.
//
// Resting is a buffer of the book's: it holds until the next call of
// Opposing, and the caller must not change it.
func (b *OrderBook) Opposing(taker Side, worst, quantity decimal.Decimal) Book {
	if taker != Buy && taker != Sell {
		return Book{Complete: true} // Match refuses the taker.
	}
	resting := b.resting[:0]
	sum, covered, counting, complete := decimal.Zero, false, true, true
	b.side(taker.Opposite()).ascend(func(l *priceLevel) bool {
		if !reaches(taker, worst, l.price) {
			return false
		}
		for e := l.head; e != nil; e = e.next {
			if covered {
				complete = false
				return false
			}
			resting = append(resting, e.Resting())
			if counting {
				var err error
				if sum, err = exactSum(sum, e.Remaining); err != nil {
					// Past what a decimal holds: no cover is claimed, and
					// every order in reach is given.
					counting = false
					continue
				}
				covered = sum.Cmp(quantity) >= 0
			}
		}
		return true
	})
	b.resting = resting
	return Book{Resting: resting, Complete: complete}
}

// OpposingFor is the side of the book order meets, as Decide asks for it.
func (b *OrderBook) OpposingFor(order Order) OpposingSide {
	return func(worst decimal.Decimal) Book { return b.Opposing(order.Side, worst, order.Quantity) }
}

// Apply carries out what Decide decided for order against this book: each
// trade's maker takes on its new remaining and hold and adds the fill to
// what it filled, paid and traded, and leaves the book when filled; the
// order rests, when d says so, with d's remaining and resting hold and the
// book's next sequence. It appends to makers each trade's maker as the
// fill left it (one that left the book included: this is the last of it),
// in the order of d.Trades, and returns the slice (an owner passes the
// same buffer each time, emptied).
//
// Apply checks the decision against the book before it changes anything,
// and refuses it whole, wrapping ErrDecisionMismatch, when it was not made
// against the book as it stands: the makers must be the book's first in
// priority, each filled but the last, with remaining and hold following
// from their fills; a resting order must be a gtc limit order not in the
// book, resting across nothing.
func (b *OrderBook) Apply(order Order, d Decision, makers []BookOrder) ([]BookOrder, error) {
	mismatch := func(format string, args ...any) ([]BookOrder, error) {
		clear(b.fills) // the buffer keeps no order alive
		return makers, fmt.Errorf("%w: %s order %s: %s", ErrDecisionMismatch, b.symbol, order.ID, fmt.Sprintf(format, args...))
	}
	if len(d.Trades) == 0 && !d.Rests {
		return makers, nil // rejected, or canceled with nothing filled
	}
	if order.Side != Buy && order.Side != Sell {
		return mismatch("side %q", order.Side)
	}
	if d.Rests {
		switch {
		case order.ID == "" || order.Account == "":
			return mismatch("an order without an id or an account rests")
		case b.byID[order.ID] != nil:
			return mismatch("rests in the book already")
		case order.Type != Limit || order.Price == nil || !order.Price.IsPos():
			return mismatch("a %s order without a limit price rests", order.Type)
		case d.TimeInForce != GTC || !d.Status.Resting():
			return mismatch("rests %s with time in force %s", d.Status, d.TimeInForce)
		case !d.Remaining.IsPos() || d.RestingHold.IsNeg():
			return mismatch("rests %s holding %s", d.Remaining, d.RestingHold)
		}
		if total, err := exactSum(d.Filled, d.Remaining); err != nil || total.Cmp(order.Quantity) != 0 {
			return mismatch("filled %s + remaining %s is not its quantity %s", d.Filled, d.Remaining, order.Quantity)
		}
	}

	// The makers, walked in priority from the best: the trades must take
	// them in that order, and what follows the last fill is the opposite
	// best the order would rest against.
	fills := b.fills[:0]
	var fault error
	var after *bookEntry
	b.side(order.Side.Opposite()).ascend(func(l *priceLevel) bool {
		for e := l.head; e != nil; e = e.next {
			if len(fills) == len(d.Trades) {
				after = e
				return false
			}
			f, err := checkFill(order, e, &d.Trades[len(fills)], len(fills) == len(d.Trades)-1)
			if err != nil {
				fault = err
				return false
			}
			fills = append(fills, f)
		}
		return true
	})
	b.fills = fills
	switch {
	case fault != nil:
		return mismatch("%v", fault)
	case len(fills) < len(d.Trades):
		return mismatch("trade %d fills %s, which does not rest on the book", len(fills), d.Trades[len(fills)].MakerOrderID)
	}
	if n := len(fills); n > 0 && !fills[n-1].trade.Maker.Remaining.IsZero() {
		after = fills[n-1].entry
	}
	if d.Rests && after != nil && reaches(order.Side, *order.Price, after.Price) {
		return mismatch("rests at %s across %s at %s", *order.Price, after.ID, after.Price)
	}

	// Checked: from here nothing fails.
	for i := range fills {
		f := &fills[i]
		e, m := f.entry, &f.trade.Maker
		e.level.subtract(f.trade.Quantity)
		e.Remaining, e.Hold = m.Remaining, m.Hold
		e.Filled, e.Notional, e.Fees = f.filled, f.notional, f.fees
		makers = append(makers, e.BookOrder)
		if m.Remaining.IsZero() {
			b.remove(e)
		}
	}
	clear(fills)
	// A decision that cancels resting orders (a self-trade prevention that
	// cancels the maker, say) would remove them here, each checked in the
	// walk above as a fill is: Decision has no such list yet.
	if d.Rests {
		b.sequence++
		s := b.side(order.Side)
		level := s.level(*order.Price)
		var tail *bookEntry
		if level != nil {
			tail = level.tail
		}
		b.insert(s, level, tail, BookOrder{
			ID: order.ID, ClientOrderID: order.ClientOrderID, Account: order.Account, Side: order.Side,
			TimeInForce: d.TimeInForce, PostOnly: order.PostOnly, Price: *order.Price, Quantity: order.Quantity,
			Remaining: d.Remaining, Hold: d.RestingHold, Filled: d.Filled, Notional: d.Notional, Fees: d.Fees,
			CreatedAt: order.CreatedAt, Sequence: b.sequence,
		})
	}
	return makers, nil
}

// checkFill checks trade t of taker against e, the maker next in
// priority, and returns the maker's totals after it. Every maker but the
// last is filled whole: Match takes the next only when one is.
func checkFill(taker Order, e *bookEntry, t *Trade, last bool) (makerFill, error) {
	m := &t.Maker
	switch {
	case e.ID != t.MakerOrderID:
		return makerFill{}, fmt.Errorf("a trade fills %s where %s is next in priority", t.MakerOrderID, e.ID)
	case e.Account != t.MakerAccount:
		return makerFill{}, fmt.Errorf("%s is of account %s, its trade says %s", e.ID, e.Account, t.MakerAccount)
	case e.Account == taker.Account:
		return makerFill{}, fmt.Errorf("a trade with %s, of the taker's own account", e.ID)
	case e.Price.Cmp(t.Price) != 0:
		return makerFill{}, fmt.Errorf("%s rests at %s, its trade is at %s", e.ID, e.Price, t.Price)
	case !t.Quantity.IsPos():
		return makerFill{}, fmt.Errorf("a trade of %s with %s", t.Quantity, e.ID)
	case !last && !m.Remaining.IsZero():
		return makerFill{}, fmt.Errorf("%s keeps %s and a later trade passes it", e.ID, m.Remaining)
	}
	remaining, err := exactDifference(e.Remaining, t.Quantity)
	switch {
	case err != nil || remaining.IsNeg():
		return makerFill{}, fmt.Errorf("%s has %s left, its trade takes %s", e.ID, e.Remaining, t.Quantity)
	case remaining.Cmp(m.Remaining) != 0 || remaining.Cmp(t.MakerRemaining) != 0:
		return makerFill{}, fmt.Errorf("%s is left with %s, its trade says %s", e.ID, remaining, m.Remaining)
	case (m.Status == StatusFilled) != remaining.IsZero() || m.Status != StatusFilled && m.Status != StatusPartiallyFilled:
		return makerFill{}, fmt.Errorf("%s is left with %s in status %s", e.ID, remaining, m.Status)
	}
	// The hold gives up what the fill consumes; a filled maker releases the
	// rest of it.
	left, err := exactDifference(e.Hold, m.GivesUp)
	keeps, releases := left, decimal.Zero
	if remaining.IsZero() {
		keeps, releases = decimal.Zero, left
	}
	if err != nil || left.IsNeg() || keeps.Cmp(m.Hold) != 0 || releases.Cmp(m.Release) != 0 {
		return makerFill{}, fmt.Errorf("%s holds %s and gives up %s: its trade says it keeps %s and releases %s",
			e.ID, e.Hold, m.GivesUp, m.Hold, m.Release)
	}
	f := makerFill{entry: e, trade: t}
	var errs [3]error
	f.filled, errs[0] = exactSum(e.Filled, t.Quantity)
	f.notional, errs[1] = exactSum(e.Notional, t.Notional)
	f.fees, errs[2] = exactSum(e.Fees, t.MakerFee)
	if err := errors.Join(errs[:]...); err != nil {
		return makerFill{}, fmt.Errorf("%s's totals: %w", e.ID, err)
	}
	return f, nil
}

// Depth is the book as GET /v1/instruments/{symbol}/book serves it, as
// postgres.Book.Levels reads it from the table: at most depth price levels
// a side, best first, each its remaining quantity summed and its orders
// counted, amounts on in's grid (prices with the tick size's decimals,
// quantities with the lot size's). It costs the levels it shows. It fails
// with ErrInvalidQuery on a depth outside 1..MaxBookDepth, and with
// ErrInexact when a level's quantity does not fit a decimal.
func (b *OrderBook) Depth(in Instrument, depth int) (Depth, error) {
	book := Depth{Symbol: b.symbol, Bids: []DepthLevel{}, Asks: []DepthLevel{}}
	if depth < 1 || depth > MaxBookDepth {
		return book, fmt.Errorf("%w: depth %d is outside 1..%d", ErrInvalidQuery, depth, MaxBookDepth)
	}
	priceScale, quantityScale := in.TickSize.Scale(), in.LotSize.Scale()
	for _, side := range []*bookSide{&b.bids, &b.asks} {
		levels := make([]DepthLevel, 0, min(depth, side.levels.Len()))
		var err error
		side.ascend(func(l *priceLevel) bool {
			if len(levels) == depth {
				return false
			}
			var quantity decimal.Decimal
			if quantity, err = l.total(); err != nil {
				return false
			}
			levels = append(levels, DepthLevel{Price: l.price.Trim(0).Pad(priceScale),
				Quantity: quantity.Trim(0).Pad(quantityScale), Orders: l.orders})
			return true
		})
		if err != nil {
			return book, fmt.Errorf("orders: book of %s: %w", b.symbol, err)
		}
		if side.side == Buy {
			book.Bids = levels
		} else {
			book.Asks = levels
		}
	}
	return book, nil
}

// Orders yields the resting orders of side in priority order: best price
// first, then lowest sequence. The book must not change while it does.
func (b *OrderBook) Orders(side Side) iter.Seq[BookOrder] {
	return func(yield func(BookOrder) bool) {
		if side != Buy && side != Sell {
			return
		}
		b.side(side).ascend(func(l *priceLevel) bool {
			for e := l.head; e != nil; e = e.next {
				if !yield(e.BookOrder) {
					return false
				}
			}
			return true
		})
	}
}

// AccountOrders yields the account's resting orders, in the order they
// came to rest in this book. Removing the order just yielded is allowed
// (a cancel of all the account's orders); no other change is.
func (b *OrderBook) AccountOrders(account string) iter.Seq[BookOrder] {
	return func(yield func(BookOrder) bool) {
		a := b.accounts[account]
		if a == nil {
			return
		}
		for e := a.head; e != nil; {
			next := e.accountNext
			if !yield(e.BookOrder) {
				return
			}
			e = next
		}
	}
}

// Verify checks every invariant of the book, in time linear in its
// orders: each side's levels strictly best first and none empty, each
// level's orders at its price in rising sequence, its count and its
// quantity theirs, the book not crossed, and the indexes by id and by
// account holding exactly the orders of the levels. For tests, and for an
// owner's check of a book it loaded.
func (b *OrderBook) Verify() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("orders: book of %s: %s", b.symbol, fmt.Sprintf(format, args...))
	}
	seen := 0
	for _, s := range []*bookSide{&b.bids, &b.asks} {
		var prev *priceLevel
		var fault error
		orders := 0
		s.ascend(func(l *priceLevel) bool {
			if prev != nil && !s.better(prev.price, l.price) {
				fault = fail("%s level %s follows %s", s.side, l.price, prev.price)
				return false
			}
			prev = l
			if fault = b.verifyLevel(s, l); fault != nil {
				return false
			}
			orders += l.orders
			return true
		})
		switch {
		case fault != nil:
			return fault
		case orders != s.orders:
			return fail("%s side counts %d orders, its levels hold %d", s.side, s.orders, orders)
		}
		seen += orders
	}
	if seen != len(b.byID) {
		return fail("%d orders by id, %d in the levels", len(b.byID), seen)
	}
	if bid, ask := b.bids.best(), b.asks.best(); bid != nil && ask != nil && bid.price.Cmp(ask.price) >= 0 {
		return fail("crossed: best bid %s, best ask %s", bid.price, ask.price)
	}
	byAccount := 0
	for account, a := range b.accounts {
		n := 0
		var prev *bookEntry
		for e := a.head; e != nil; e = e.accountNext {
			switch {
			case e.Account != account:
				return fail("order %s of %s is listed under %s", e.ID, e.Account, account)
			case b.byID[e.ID] != e:
				return fail("order %s of account %s is not the one by id", e.ID, account)
			case e.accountPrev != prev || e.account != a:
				return fail("order %s's account links are broken", e.ID)
			}
			prev = e
			n++
		}
		if n != a.orders || n == 0 || a.tail != prev {
			return fail("account %s counts %d orders, lists %d", account, a.orders, n)
		}
		byAccount += n
	}
	if byAccount != len(b.byID) {
		return fail("%d orders by account, %d by id", byAccount, len(b.byID))
	}
	for _, e := range b.byID {
		if e.Sequence > b.sequence {
			return fail("order %s has sequence %d, above the book's %d", e.ID, e.Sequence, b.sequence)
		}
	}
	return nil
}

// verifyLevel checks one level of side s: its FIFO, its count, its
// quantity, and that each of its orders is the one indexed by id.
func (b *OrderBook) verifyLevel(s *bookSide, l *priceLevel) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("orders: book of %s: %s level %s: %s", b.symbol, s.side, l.price, fmt.Sprintf(format, args...))
	}
	n, sum := 0, decimal.Zero
	var prev *bookEntry
	for e := l.head; e != nil; e = e.next {
		switch {
		case e.level != l || e.prev != prev:
			return fail("order %s's links are broken", e.ID)
		case e.Side != s.side || e.Price.Cmp(l.price) != 0:
			return fail("holds order %s, a %s at %s", e.ID, e.Side, e.Price)
		case prev != nil && prev.Sequence >= e.Sequence:
			return fail("order %s (sequence %d) follows %s (sequence %d)", e.ID, e.Sequence, prev.ID, prev.Sequence)
		case !e.Remaining.IsPos():
			return fail("order %s has %s remaining", e.ID, e.Remaining)
		case b.byID[e.ID] != e:
			return fail("order %s is not the one by id", e.ID)
		}
		var err error
		if sum, err = ExactAdd(sum, e.Remaining); err != nil {
			return fail("%v", err)
		}
		prev = e
		n++
	}
	switch {
	case n == 0:
		return fail("empty")
	case n != l.orders || l.tail != prev:
		return fail("counts %d orders, holds %d", l.orders, n)
	case !l.recount && l.quantity.Cmp(sum) != 0:
		return fail("counts %s, its orders hold %s", l.quantity, sum)
	}
	return nil
}

func (b *OrderBook) side(side Side) *bookSide {
	if side == Buy {
		return &b.bids
	}
	return &b.asks
}

// insert puts o on side s at level (nil: a new level at its price), after
// the entry after (nil: at the level's head), and into the indexes.
func (b *OrderBook) insert(s *bookSide, level *priceLevel, after *bookEntry, o BookOrder) {
	if level == nil {
		level = &priceLevel{price: o.Price, quantity: decimal.Zero}
		s.levels.ReplaceOrInsert(levelKey{price: level.price, level: level})
	}
	var e *bookEntry
	if n := len(b.free); n > 0 {
		e, b.free = b.free[n-1], b.free[:n-1]
		*e = bookEntry{BookOrder: o, level: level, prev: after}
	} else {
		e = &bookEntry{BookOrder: o, level: level, prev: after}
	}
	if after == nil {
		e.next, level.head = level.head, e
	} else {
		e.next, after.next = after.next, e
	}
	if e.next == nil {
		level.tail = e
	} else {
		e.next.prev = e
	}
	level.orders++
	level.add(o.Remaining)
	s.orders++
	b.byID[o.ID] = e

	a := b.accounts[o.Account]
	if a == nil {
		a = &accountOrders{}
		b.accounts[o.Account] = a
	}
	e.account = a
	if e.accountPrev = a.tail; a.tail == nil {
		a.head = e
	} else {
		a.tail.accountNext = e
	}
	a.tail = e
	a.orders++
}

// remove takes e off its level (and the level off its side when it was
// the last) and out of the indexes.
func (b *OrderBook) remove(e *bookEntry) {
	s, level := b.side(e.Side), e.level
	if e.prev == nil {
		level.head = e.next
	} else {
		e.prev.next = e.next
	}
	if e.next == nil {
		level.tail = e.prev
	} else {
		e.next.prev = e.prev
	}
	level.orders--
	level.subtract(e.Remaining)
	s.orders--
	if level.orders == 0 {
		s.levels.Delete(levelKey{price: level.price})
	}
	delete(b.byID, e.ID)

	a := e.account
	if e.accountPrev == nil {
		a.head = e.accountNext
	} else {
		e.accountPrev.accountNext = e.accountNext
	}
	if e.accountNext == nil {
		a.tail = e.accountPrev
	} else {
		e.accountNext.accountPrev = e.accountPrev
	}
	if a.orders--; a.orders == 0 {
		delete(b.accounts, e.Account)
	}
	*e = bookEntry{}
	if len(b.free) < freeEntries {
		b.free = append(b.free, e)
	}
}

// level is the side's level at price, or nil.
func (s *bookSide) level(price decimal.Decimal) *priceLevel {
	k, _ := s.levels.Get(levelKey{price: price})
	return k.level
}

// best is the side's best level, or nil.
func (s *bookSide) best() *priceLevel {
	k, _ := s.levels.Min()
	return k.level
}

func (s *bookSide) bestPrice() (decimal.Decimal, bool) {
	if l := s.best(); l != nil {
		return l.price, true
	}
	return decimal.Decimal{}, false
}

// ascend calls yield with each level of the side, best first, until it
// returns false.
func (s *bookSide) ascend(yield func(*priceLevel) bool) {
	s.levels.Ascend(func(k levelKey) bool { return yield(k.level) })
}

// better reports whether price a comes before price b on the side.
func (s *bookSide) better(a, b decimal.Decimal) bool {
	if s.side == Buy {
		return a.Cmp(b) > 0
	}
	return a.Cmp(b) < 0
}

func (l *priceLevel) add(quantity decimal.Decimal) {
	if !l.recount {
		var err error
		l.quantity, err = exactSum(l.quantity, quantity)
		l.recount = err != nil
	}
}

func (l *priceLevel) subtract(quantity decimal.Decimal) {
	if !l.recount {
		var err error
		l.quantity, err = exactDifference(l.quantity, quantity)
		l.recount = err != nil
	}
}

// total is the level's quantity: its orders' remaining, summed.
func (l *priceLevel) total() (decimal.Decimal, error) {
	if l.recount {
		sum := decimal.Zero
		for e := l.head; e != nil; e = e.next {
			var err error
			if sum, err = exactSum(sum, e.Remaining); err != nil {
				return decimal.Decimal{}, err
			}
		}
		l.quantity, l.recount = sum, false
	}
	return l.quantity, nil
}

// reaches reports whether a taker on side taker limited to worst can take
// an order resting at price (and so whether an order at worst resting on
// side taker would cross it).
func reaches(taker Side, worst, price decimal.Decimal) bool {
	if taker == Buy {
		return price.Cmp(worst) <= 0
	}
	return price.Cmp(worst) >= 0
}

// exactSum is a + b, or ErrInexact, as ExactAdd, without its allocations:
// the sum kept to the finer scale of the two is exact, and the decimal
// type refuses it rather than round it.
func exactSum(a, b decimal.Decimal) (decimal.Decimal, error) {
	sum, err := a.AddExact(b, max(a.Scale(), b.Scale()))
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%w: %s + %s", ErrInexact, a, b)
	}
	return sum, nil
}

// exactDifference is a - b, or ErrInexact, as ExactSub.
func exactDifference(a, b decimal.Decimal) (decimal.Decimal, error) {
	difference, err := a.SubExact(b, max(a.Scale(), b.Scale()))
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%w: %s - %s", ErrInexact, a, b)
	}
	return difference, nil
}
