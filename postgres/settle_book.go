package postgres

import (
	"slices"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// The book of an instrument as a batch holds it in memory: the resting
// orders it read of it (settle_book_reads.go) and the takers of the batch that
// came to rest.

// bookOrder is a resting order of a book the batch holds: one read from the
// table, or a taker of the batch that came to rest (taker is then its row,
// written at the end with what happened to it since).
type bookOrder struct {
	id, account string
	side        orders.Side
	price       decimal.Decimal
	remaining   decimal.Decimal
	hold        decimal.Decimal
	sequence    int64
	taker       *takerRow

	// What the batch did to an order read from the table, written as
	// deltas by settle_update_makers.sql: summed exactly, however many
	// fills, as ledger amounts (an old order beyond the digit budget may have
	// sums the decimal type cannot hold).
	touched                         bool
	filled, notional, fees, givenUp ledgerAmount
	status                          orders.Status
	cancelReason                    orders.CancelReason

	// generation is the batch that may change the order in place (0 on the
	// locked path, where every batch reads its own). An owner's batch
	// changes a copy (batchWork.claim), which keeps in believed what the
	// owner's book held before: the guard of its update
	// (settle_owned_makers.sql).
	generation                      int64
	believedRemaining, believedHold decimal.Decimal
}

// instrumentBook is an instrument locked by the batch and its book, both
// sides best first.
type instrumentBook struct {
	in         orders.Instrument
	bids, asks []*bookOrder
	traded     bool
}

// side is the side of the book a resting order of side s rests on.
func (b *instrumentBook) side(s orders.Side) *[]*bookOrder {
	if s == orders.Buy {
		return &b.bids
	}
	return &b.asks
}

// remove takes a resting order off its side.
func (b *instrumentBook) remove(o *bookOrder) {
	side := b.side(o.side)
	*side = slices.DeleteFunc(*side, func(other *bookOrder) bool { return other == o })
}

// rest puts an order on its side behind every order of its price: its
// sequence is the newest.
func (b *instrumentBook) rest(o *bookOrder) {
	side := b.side(o.side)
	at := len(*side)
	for i, other := range *side {
		if o.side == orders.Buy && other.price.Cmp(o.price) < 0 || o.side == orders.Sell && other.price.Cmp(o.price) > 0 {
			at = i
			break
		}
	}
	*side = slices.Insert(*side, at, o)
}

// share is a book for the next batch of an owner: the sides are its own,
// the orders shared until the batch claims one.
func (b *instrumentBook) share() *instrumentBook {
	return &instrumentBook{in: b.in, bids: slices.Clone(b.bids), asks: slices.Clone(b.asks)}
}

// claim is the maker a decision changes: itself when the batch may change
// it in place, or else its copy, which replaces it in the book and in byID
// and leaves the batches before (in flight, with the order in their
// writes) theirs.
func (w *batchWork) claim(book *instrumentBook, maker *bookOrder, byID map[string]*bookOrder) *bookOrder {
	if maker.generation == w.generation {
		return maker
	}
	own := &bookOrder{id: maker.id, account: maker.account, side: maker.side, price: maker.price,
		remaining: maker.remaining, hold: maker.hold, sequence: maker.sequence, generation: w.generation,
		believedRemaining: maker.remaining, believedHold: maker.hold}
	side := *book.side(maker.side)
	if i := slices.Index(side, maker); i >= 0 {
		side[i] = own
	}
	byID[own.id] = own
	return own
}
