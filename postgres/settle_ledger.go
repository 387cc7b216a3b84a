package postgres

import (
	"math/big"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// The ledger transactions a batch decided (orders.Decide's, in decision
// order), in memory, and the balance rows their moves change.

// ledgerTxn is a ledger transaction the batch decided, in decision order.
type ledgerTxn struct {
	// position is the transaction's place (1-based) in the batch's
	// decision order, which names it until settle_write_ledger.sql draws
	// its id.
	position int
	orders.Transaction
}

// tradeRow is the trades row of one fill, with its trade transaction.
type tradeRow struct {
	symbol, maker, taker, makerAccount, takerAccount string
	takerSide                                        orders.Side
	price, quantity, makerFee, takerFee              decimal.Decimal
	makerFeeBps, takerFeeBps                         decimal.Decimal
	txn                                              *ledgerTxn
}

// record adds a transaction a decision made to the batch's and applies
// its moves to the balance rows. settleTogether locks every balance moved
// before it writes.
func (w *batchWork) record(t orders.Transaction) *ledgerTxn {
	recorded := &ledgerTxn{position: len(w.txns) + 1, Transaction: t}
	w.txns = append(w.txns, recorded)
	for _, m := range t.Moves {
		key := balanceKey{m.Account, m.Asset}
		b := w.balances[key]
		if b == nil {
			b = &lockedBalance{available: new(big.Rat), held: new(big.Rat), name: orders.BalanceName(m.Account, m.Asset),
				asset: m.Asset, acc: m.Account}
			w.balances[key] = b
		}
		target := b.available
		if m.Part == orders.PartHeld {
			target = b.held
		}
		target.Add(target, orders.Rational(m.Amount))
		b.entries++
	}
	return recorded
}
