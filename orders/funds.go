package orders

import "math/big"

// Funds are the available amounts of an account's two balances an order
// moves, exact: rationals of the NUMERIC values, never floats.
type Funds struct{ Base, Quote *big.Rat }

// Rejection is why an order cannot settle against the balances it moves, or
// "" when it can: the one funds rule of a lone settlement and of a batch. A
// buy needs the account's quote to cover the notional and the venue's base
// to cover the quantity; a sell the other way round.
func Rejection(halted bool, side Side, mine, venue Funds, quantity, notional *big.Rat) string {
	covers := func(available, amount *big.Rat) bool { return available.Cmp(amount) >= 0 }
	switch {
	case halted:
		return ReasonInstrumentHalted
	case side == Buy && !covers(mine.Quote, notional), side == Sell && !covers(mine.Base, quantity):
		return ReasonInsufficientFunds
	case side == Buy && !covers(venue.Base, quantity), side == Sell && !covers(venue.Quote, notional):
		return ReasonInsufficientLiquidity
	}
	return ""
}
