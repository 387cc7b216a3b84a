package postgres

import (
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
// before it writes. A hold or a release changes no total: it moves the
// balance row's parts and is no ledger transaction (nil), one change of
// the row's version; a trade is one, each entry a change.
func (w *batchWork) record(t orders.Transaction) *ledgerTxn {
	var recorded *ledgerTxn
	ledger := t.Kind.ChangesTotal()
	if ledger {
		recorded = &ledgerTxn{position: len(w.txns) + 1, Transaction: t}
		w.txns = append(w.txns, recorded)
	}
	var last *lockedBalance
	for _, m := range t.Moves {
		key := balanceKey{m.Account, m.Asset}
		b := w.balances[key]
		if b == nil {
			b = &lockedBalance{available: new(ledgerAmount), held: new(ledgerAmount), name: orders.BalanceName(m.Account, m.Asset),
				asset: m.Asset, acc: m.Account}
			w.balances[key] = b
		}
		target, moved := b.available, &b.movedAvailable
		if m.Part == orders.PartHeld {
			target, moved = b.held, &b.movedHeld
		}
		target.add(m.Amount)
		moved.add(m.Amount)
		switch {
		case ledger:
			b.entries++
			b.changes++
		case b != last:
			// A hold's or a release's two moves are one change of one row.
			b.changes++
		}
		last = b
	}
	return recorded
}
