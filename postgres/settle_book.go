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
	// deltas by settle_update_makers.sql.
	touched                         bool
	filled, notional, fees, givenUp decimal.Decimal
	status                          orders.Status
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
