package orders

import "github.com/govalues/decimal"

// LedgerScale is the decimals the ledger keeps (NUMERIC(38,18)): an amount
// with more would be rounded where it is written, and money is never
// rounded silently, so an order that would need one cannot settle.
const LedgerScale = 18

// BalancePart is one of the two parts of a balance a ledger entry moves.
type BalancePart string

const (
	// PartAvailable is what the account may spend, withdraw or hold.
	PartAvailable BalancePart = "available"
	// PartHeld is what the account's orders hold.
	PartHeld BalancePart = "held"
)

// TransactionKind says what a ledger transaction of an order does.
type TransactionKind string

// ChangesTotal reports whether a transaction of the kind changes accounts'
// totals (available + held), which only the ledger records: a trade does.
// A hold or a release moves an amount between the two parts of one
// balance and changes no total; the balance row and the order's hold
// record it, and the ledger keeps no entries of it (migration 0014,
// docs/market.md): its audit proves each balance's total is the sum of
// its entries, and its held part the sum of its resting orders' holds.
func (k TransactionKind) ChangesTotal() bool {
	return k != KindHold && k != KindRelease
}

const (
	// KindHold moves an order's worst-case cost from available to held.
	KindHold TransactionKind = "hold"
	// KindTrade settles one fill: base and quote between the taker and the
	// maker, both fees to the venue.
	KindTrade TransactionKind = "trade"
	// KindRelease moves what an order no longer needs of its hold back to
	// available.
	KindRelease TransactionKind = "release"
)

// Move is one entry of a ledger transaction: Amount into the Part of the
// Account's balance of Asset, out of it when negative; never zero (the
// ledger keeps no empty entries).
type Move struct {
	Account string
	Asset   string
	Part    BalancePart
	Amount  decimal.Decimal
}

// Transaction is one ledger transaction of an order: its moves balance,
// per asset.
type Transaction struct {
	Kind TransactionKind
	// OrderID is the order the transaction is of: the taker's for a trade,
	// the maker's for the release of a maker that left the book.
	OrderID string
	Moves   []Move
}

// Release is the transaction that gives an order's account back amount of
// asset from its hold.
func Release(orderID, account, asset string, amount decimal.Decimal) Transaction {
	t := Transaction{Kind: KindRelease, OrderID: orderID, Moves: make([]Move, 0, 2)}
	t.move(account, asset, PartHeld, amount.Neg())
	t.move(account, asset, PartAvailable, amount)
	return t
}

// holdOf is the transaction that holds amount of asset for an order.
func holdOf(orderID, account, asset string, amount decimal.Decimal) Transaction {
	t := Transaction{Kind: KindHold, OrderID: orderID, Moves: make([]Move, 0, 2)}
	t.move(account, asset, PartAvailable, amount.Neg())
	t.move(account, asset, PartHeld, amount)
	return t
}

// move adds a move to t; a zero amount is none.
func (t *Transaction) move(account, asset string, part BalancePart, amount decimal.Decimal) {
	if amount.IsZero() {
		return
	}
	t.Moves = append(t.Moves, Move{Account: account, Asset: asset, Part: part, Amount: amount})
}
