package postgres

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// An owner's book as it holds it in memory, for a checker to compare with
// PostgreSQL's resting orders (issue 24, point 6: the book in PostgreSQL is
// the one the next owner loads, and the one the owner held).

// RestingOrder is one order of a book, as an owner holds it or as a reader
// of PostgreSQL's resting orders sees it.
type RestingOrder struct {
	ID, Account string
	Side        orders.Side
	Price       decimal.Decimal
	// Remaining is the quantity left to fill, Hold the funds it holds.
	Remaining, Hold decimal.Decimal
	// Sequence is the order's time priority: PostgreSQL's book sequence,
	// or, for an order the owner rested itself, a provisional one above
	// every sequence PostgreSQL drew (its rank on its side is what counts).
	Sequence int64
}

// OwnerBook is an instrument's resting orders, each side best first: bids by
// price descending, asks ascending, then by sequence.
type OwnerBook struct {
	Symbol     string
	Bids, Asks []RestingOrder
}

// Orders counts the book's resting orders.
func (b OwnerBook) Orders() int { return len(b.Bids) + len(b.Asks) }

// Digest is a hash of the book without its sequences: each side's orders in
// priority order with their account, price, remaining quantity and hold.
// Equal digests mean equal books, whether an order's sequence is
// PostgreSQL's or the owner's provisional one.
func (b OwnerBook) Digest() string {
	h := sha256.New()
	for _, side := range [][]RestingOrder{b.Bids, b.Asks} {
		for _, o := range side {
			fmt.Fprintf(h, "%s %s %s %s %s %s\n", o.Side, o.ID, o.Account, o.Price.Trim(0), o.Remaining.Trim(0), o.Hold.Trim(0))
		}
		h.Write([]byte("|\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// OwnedBook is the book of symbol as the settler, its owner, holds it
// between batches (every batch decided has landed); false when the settler
// does not own symbol, has not loaded its book yet, is deciding or writing
// a batch, or holds a book a failed write left, to be loaded again.
func (s *Settler) OwnedBook(symbol string) (OwnerBook, bool) {
	s.owned.mu.Lock()
	st := s.owned.books[symbol]
	s.owned.mu.Unlock()
	if st == nil {
		return OwnerBook{}, false
	}
	select {
	case <-st.ready:
	default:
		return OwnerBook{}, false
	}
	// The driver swaps st.book under no lock while it runs: read it only
	// when no driver runs (and none can start: st.mu held).
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.driving || !st.bookCommitted() {
		return OwnerBook{}, false
	}
	return bookOf(symbol, st.book), true
}

// bookCommitted reports whether st's book is PostgreSQL's: loaded, every
// write of it committed (not stale) and the owner not fenced. st.mu held.
func (st *ownedBook) bookCommitted() bool {
	return st.book != nil && !st.stale && st.fenced == nil
}

// bookOf copies an owner's in-memory book.
func bookOf(symbol string, b *instrumentBook) OwnerBook {
	book := OwnerBook{Symbol: symbol}
	copySide := func(side []*bookOrder) []RestingOrder {
		out := make([]RestingOrder, 0, len(side))
		for _, o := range side {
			out = append(out, RestingOrder{ID: o.id, Account: o.account, Side: o.side, Price: o.price,
				Remaining: o.remaining, Hold: o.hold, Sequence: o.sequence})
		}
		return out
	}
	book.Bids, book.Asks = copySide(b.bids), copySide(b.asks)
	return book
}

// logGivenUpBook logs the book an owner gives up, its digest and size, so
// that a checker can compare it with PostgreSQL's (testkit/chaos): only a
// book every write of which committed. The driver has exited.
func (s *Settler) logGivenUpBook(st *ownedBook) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.bookCommitted() {
		return
	}
	book := bookOf(st.symbol, st.book)
	s.logger.Info("gave an instrument up", "symbol", st.symbol, "epoch", st.epoch,
		"book_orders", book.Orders(), "book_digest", book.Digest())
}
