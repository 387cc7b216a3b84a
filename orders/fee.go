package orders

import (
	"fmt"

	"github.com/govalues/decimal"
)

// bpsPerUnit is how many basis points make the whole.
var bpsPerUnit = decimal.MustNew(10000, 0)

// Fee is rateBps basis points of notional: rateBps × notional / 10000,
// exact. Fee never rounds: a fee with more digits than the decimal type
// holds fails with ErrInexact, and rounding it to the quote asset's scale is
// the caller's decision. Both arguments must be ≥ 0.
func Fee(notional, rateBps decimal.Decimal) (decimal.Decimal, error) {
	if notional.IsNeg() || rateBps.IsNeg() {
		return decimal.Decimal{}, fmt.Errorf("%w: fee of %s at %s bps: neither may be negative",
			ErrMalformedMatch, notional, rateBps)
	}
	scaled, err := exactMul(notional, rateBps)
	if err != nil {
		return decimal.Decimal{}, err
	}
	return perBasisPoint(scaled)
}

// Hold is the worst case an order's remaining quantity can cost its account,
// which is what moves from available to held while the order rests or
// matches. A buy holds quote: remaining × price plus the fee on that at
// feeBps. A sell holds base: the remaining quantity (its fee comes out of
// the quote it receives). price is the limit price, or a market order's
// protection price: no fill is worse, so no fill costs more. feeBps must be
// the highest rate the order can pay (the taker rate, which is never below
// the maker rate). Exact, like Fee.
func Hold(side Side, remaining, price, feeBps decimal.Decimal) (decimal.Decimal, error) {
	if remaining.IsNeg() {
		return decimal.Decimal{}, fmt.Errorf("%w: hold of remaining %s: negative", ErrMalformedMatch, remaining)
	}
	switch side {
	case Sell:
		return remaining, nil
	case Buy:
		if !price.IsPos() {
			return decimal.Decimal{}, fmt.Errorf("%w: hold at price %s: not above zero", ErrMalformedMatch, price)
		}
		notional, err := exactMul(remaining, price)
		if err != nil {
			return decimal.Decimal{}, err
		}
		fee, err := Fee(notional, feeBps)
		if err != nil {
			return decimal.Decimal{}, err
		}
		return ExactAdd(notional, fee)
	default:
		return decimal.Decimal{}, fmt.Errorf("%w: hold for side %q", ErrMalformedMatch, side)
	}
}
