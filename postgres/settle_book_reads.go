package postgres

import (
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"

	"github.com/ordergate/ordergate/orders"
)

// A batch reads of each book only what its takers can reach: the opposing
// side's best orders, up to the most aggressive taker's price and until
// their quantity covers what the batch's takers could take
// (settle_book_page.sql). When a taker needs more than the batch read (a
// taker of the batch that came to rest stands past the end of what was
// read, say), Match says so (orders.ErrIncompleteBook) and the next page is
// read. Nothing here locks a balance: the instrument's lock, taken first,
// keeps every other settler and cancel off the book.

var (
	//go:embed sql/settle_book_page.sql
	settleBookPageSQL string
	//go:embed sql/settle_takers.sql
	settleTakersSQL string
)

// pageRows bounds the orders one read of a side returns (a variable so
// that tests can make every read short).
var pageRows int32 = 256

// Prices past every order of a side, as the bounds of a read: NUMERIC(38,18)
// stays below 10^20.
const (
	pastEveryAsk = "1e21"
	pastEveryBid = "0"
)

// sideKey names one side of one book.
type sideKey struct {
	symbol string
	side   orders.Side
}

// sideRead is what the batch read of one side of a book: rows, best first,
// are every resting order of the side (all) or every one up to (price,
// sequence) in the side's priority (read); none before the first read.
type sideRead struct {
	rows     []bookOrder
	all      bool
	read     bool
	price    decimal.Decimal
	sequence int64
}

// pageRequest is one read of settle_book_page.sql.
type pageRequest struct {
	key        sideKey
	bound      string
	afterPrice string
	afterSeq   int64
	quantity   *string
	limit      int32
}

// priority compares two resting orders of a side as matching takes them:
// the better price first (lower for asks, higher for bids), then the lower
// sequence.
func priority(side orders.Side, aPrice decimal.Decimal, aSeq int64, bPrice decimal.Decimal, bSeq int64) int {
	byPrice := aPrice.Cmp(bPrice)
	if side == orders.Buy {
		byPrice = -byPrice
	}
	return cmp.Or(byPrice, cmp.Compare(aSeq, bSeq))
}

// holds reports whether every resting order of the side up to o in
// priority was read, so that o may be given to Match.
func (r *sideRead) holds(side orders.Side, o *bookOrder) bool {
	switch {
	case r.all:
		return true
	case !r.read:
		return false
	}
	return priority(side, o.price, o.sequence, r.price, r.sequence) <= 0
}

// covers reports whether every resting order of the side a taker limited
// to worst can reach was read.
func (r *sideRead) covers(side orders.Side, worst decimal.Decimal) bool {
	switch {
	case r.all:
		return true
	case !r.read:
		return false
	}
	byPrice := worst.Cmp(r.price)
	if side == orders.Buy {
		byPrice = -byPrice
	}
	return byPrice < 0 || byPrice == 0 && r.sequence == math.MaxInt64
}

// next is the read of the side that follows what was read, up to bound.
func (r *sideRead) next(key sideKey, bound string, quantity *string) pageRequest {
	req := pageRequest{key: key, bound: bound, quantity: quantity, limit: pageRows}
	switch {
	case r.read:
		req.afterPrice, req.afterSeq = r.price.String(), r.sequence
	case key.side == orders.Buy:
		req.afterPrice = pastEveryAsk
	default:
		req.afterPrice = "0"
	}
	return req
}

// apply takes in what one read returned; reached: the last row's is where
// the side's quantity reached the read's bound.
func (r *sideRead) apply(req pageRequest, rows []bookOrder, reached bool) error {
	r.rows = append(r.rows, rows...)
	switch {
	case len(rows) == int(req.limit) || reached:
		last := rows[len(rows)-1]
		r.read, r.price, r.sequence = true, last.price, last.sequence
	case req.bound == pastEveryAsk && req.key.side == orders.Sell || req.bound == pastEveryBid && req.key.side == orders.Buy:
		r.all = true
	default:
		bound, err := orders.ParseExact(req.bound)
		if err != nil {
			return err
		}
		r.read, r.price, r.sequence = true, bound, math.MaxInt64
	}
	return nil
}

// firstReads are the reads of the sides the batch's takers meet: per
// instrument and side, up to the most aggressive price of the takers
// meeting it (past every order when one of them is a market order) and
// through the quantity they could take together.
func firstReads(batch []*settleRequest) []pageRequest {
	type want struct {
		bound    decimal.Decimal
		pastAll  bool
		quantity decimal.Decimal
		exact    bool
	}
	wants := make(map[sideKey]*want)
	var keys []sideKey
	for _, req := range batch {
		order := req.order
		if order.Side != orders.Buy && order.Side != orders.Sell {
			continue
		}
		key := sideKey{order.Symbol, order.Side.Opposite()}
		w := wants[key]
		if w == nil {
			w = &want{exact: true}
			wants[key] = w
			keys = append(keys, key)
		}
		switch {
		case order.Type != orders.Limit || order.Price == nil:
			w.pastAll = true
		case w.bound.IsZero() || order.Side == orders.Buy && order.Price.Cmp(w.bound) > 0 ||
			order.Side == orders.Sell && order.Price.Cmp(w.bound) < 0:
			w.bound = *order.Price
		}
		sum, err := orders.ExactAdd(w.quantity, order.Quantity)
		if err != nil || !order.Quantity.IsPos() {
			w.exact = false
		}
		w.quantity = sum
	}
	reads := make([]pageRequest, 0, len(keys))
	for _, key := range keys {
		w := wants[key]
		bound := pastEveryAsk
		if key.side == orders.Buy {
			bound = pastEveryBid
		}
		if !w.pastAll {
			bound = w.bound.String()
		}
		var quantity *string
		if w.exact {
			text := w.quantity.String()
			quantity = &text
		}
		reads = append(reads, (&sideRead{}).next(key, bound, quantity))
	}
	return reads
}

// queueReads queues the reads on b; each answer is applied to its side in
// reads, and a value that does not parse to *readErr.
func queueReads(b *pgx.Batch, requests []pageRequest, reads map[sideKey]*sideRead, readErr *error) {
	n := len(requests)
	symbols, sides, bounds, afterPrices := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	afterSeqs, limits := make([]int64, n), make([]int32, n)
	quantities := make([]*string, n)
	for i, req := range requests {
		symbols[i], sides[i], bounds[i] = req.key.symbol, string(req.key.side), req.bound
		afterPrices[i], afterSeqs[i], quantities[i], limits[i] = req.afterPrice, req.afterSeq, req.quantity, req.limit
	}
	b.Queue(settleBookPageSQL, symbols, sides, bounds, afterPrices, afterSeqs, quantities, limits).Query(func(rows pgx.Rows) error {
		got := make([][]bookOrder, n)
		reached := make([]bool, n)
		for rows.Next() {
			var i int64
			var o bookOrder
			var price, remaining, hold string
			var last bool
			if err := rows.Scan(&i, &o.id, &o.account, &price, &remaining, &o.sequence, &hold, &last); err != nil {
				return err
			}
			if i < 1 || int(i) > n {
				return fmt.Errorf("a book page read answered request %d of %d", i, n)
			}
			o.side = requests[i-1].key.side
			var errs [3]error
			o.price, errs[0] = orders.ParseExact(price)
			o.remaining, errs[1] = orders.ParseExact(remaining)
			o.hold, errs[2] = orders.ParseExact(hold)
			if err := errors.Join(errs[:]...); err != nil {
				*readErr = fmt.Errorf("resting order %s: %w", o.id, err)
			}
			got[i-1] = append(got[i-1], o)
			reached[i-1] = last
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for i, req := range requests {
			r := reads[req.key]
			if r == nil {
				r = &sideRead{}
				reads[req.key] = r
			}
			if err := r.apply(req, got[i], reached[i]); err != nil {
				*readErr = err
			}
		}
		return nil
	})
}

// bookPage is what Match may be given of the side for a taker limited to
// worst: the orders of the book whose predecessors were all read, and
// whether they are every order the taker can reach.
func (w *batchWork) bookPage(book *instrumentBook, side orders.Side, worst decimal.Decimal) ([]*bookOrder, bool) {
	if w.owned != nil {
		// An owner's book is whole: every order in reach, and nothing past.
		return ownedPage(*book.side(side), side, worst), true
	}
	r := w.reads[sideKey{book.in.Symbol, side}]
	if r == nil {
		r = &sideRead{}
	}
	all := *book.side(side)
	end := len(all)
	for i, o := range all {
		if !r.holds(side, o) {
			end = i
			break
		}
	}
	return all[:end], r.covers(side, worst)
}

// readMore reads the next page of the side, up to worst and through
// quantity, into the reads and the book.
func (w *batchWork) readMore(book *instrumentBook, side orders.Side, worst, quantity decimal.Decimal) error {
	key := sideKey{book.in.Symbol, side}
	r := w.reads[key]
	if r == nil {
		r = &sideRead{}
		w.reads[key] = r
	}
	before := len(r.rows)
	text := quantity.String()
	req := r.next(key, worst.String(), &text)
	var readErr error
	b := &pgx.Batch{}
	queueReads(b, []pageRequest{req}, w.reads, &readErr)
	if err := w.tx.SendBatch(w.ctx, b).Close(); err != nil {
		return fmt.Errorf("read the book of %s: %w", key.symbol, err)
	}
	if readErr != nil {
		return readErr
	}
	if len(r.rows) == before && !r.covers(side, worst) {
		return fmt.Errorf("reading more of the %s side of %s found nothing and covers nothing more", side, key.symbol)
	}
	resting := book.side(side)
	for i := before; i < len(r.rows); i++ {
		o := r.rows[i]
		*resting = append(*resting, &o)
	}
	slices.SortStableFunc(*resting, func(a, b *bookOrder) int {
		return priority(side, a.price, a.sequence, b.price, b.sequence)
	})
	return nil
}
