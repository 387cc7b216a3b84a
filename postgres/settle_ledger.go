package postgres

import (
	"math/big"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// The ledger transactions a batch decided, in memory, and the balance rows
// each of their entries moves.

// The parts of a balance a ledger entry names.
const (
	partAvailable = "available"
	partHeld      = "held"
)

// Kinds of the ledger transactions settlement and cancels write.
const (
	kindHold    = "hold"
	kindRelease = "release"
	kindTrade   = "trade"
)

// ledgerScale is the decimals a NUMERIC(38,18) column holds: an amount with
// more would be rounded by the insert, and money is never rounded silently.
const ledgerScale = 18

// ledgerEntry is one entry of a ledger transaction: amount into (or, below
// zero, out of) the part of the account's balance of the asset.
type ledgerEntry struct {
	account, asset, part string
	amount               decimal.Decimal
}

// ledgerTxn is a ledger transaction the batch decided, in decision order.
type ledgerTxn struct {
	// position is the transaction's place (1-based) in the batch's
	// decision order, which names it until settle_write_ledger.sql draws
	// its id.
	position int
	kind     string
	orderID  string
	entries  []ledgerEntry
}

// tradeRow is the trades row of one fill, with its trade transaction.
type tradeRow struct {
	symbol, maker, taker, makerAccount, takerAccount string
	takerSide                                        orders.Side
	price, quantity, makerFee, takerFee              decimal.Decimal
	makerFeeBps, takerFeeBps                         decimal.Decimal
	txn                                              *ledgerTxn
}

// txn starts a ledger transaction of the kind for the order.
func (w *batchWork) txn(kind, orderID string) *ledgerTxn {
	t := &ledgerTxn{position: len(w.txns) + 1, kind: kind, orderID: orderID}
	w.txns = append(w.txns, t)
	return t
}

// move adds one entry to t and applies it to the balance. A zero amount is
// no entry (the ledger refuses those). settleTogether locks every balance
// moved before it writes.
func (w *batchWork) move(t *ledgerTxn, account, asset, part string, amount decimal.Decimal) {
	if amount.IsZero() {
		return
	}
	key := balanceKey{account, asset}
	b := w.balances[key]
	if b == nil {
		b = &lockedBalance{available: new(big.Rat), held: new(big.Rat), name: orders.BalanceName(account, asset),
			asset: asset, acc: account}
		w.balances[key] = b
	}
	target := b.available
	if part == partHeld {
		target = b.held
	}
	target.Add(target, orders.Rational(amount))
	b.entries++
	t.entries = append(t.entries, ledgerEntry{account: account, asset: asset, part: part, amount: amount})
}
