package orders

import (
	_ "embed"
	"errors"
	"fmt"
	"math/big"
	"math/bits"

	"github.com/govalues/decimal"
)

// Instrument is a tradable pair and the rules its orders must follow.
type Instrument struct {
	Symbol string
	Base   string
	Quote  string
	// TickSize is the price grid; its decimals are the price's allowed decimals.
	TickSize decimal.Decimal
	// LotSize is the quantity grid; its decimals are the quantity's allowed decimals.
	LotSize decimal.Decimal
	// MinNotional is the least quantity × price an order may have, in the quote asset.
	MinNotional decimal.Decimal
	// ReferencePrice is the seeded reference, the center of the price band
	// until the first trade.
	ReferencePrice decimal.Decimal
	// LastPrice is the price of the last trade; zero before the first.
	LastPrice decimal.Decimal
	// MakerFeeBps and TakerFeeBps are the fees in basis points of a trade's
	// notional, paid in the quote asset; the maker's never exceeds the taker's.
	MakerFeeBps decimal.Decimal
	TakerFeeBps decimal.Decimal
	// PriceBandPercent is how far from the reference a limit price may be,
	// and how far a market order may fill.
	PriceBandPercent decimal.Decimal
	Halted           bool
}

// Reference is the price the band is centered on: the last trade's, or the
// seeded reference before the first trade.
func (in Instrument) Reference() decimal.Decimal {
	if in.LastPrice.IsPos() {
		return in.LastPrice
	}
	return in.ReferencePrice
}

// Band is the lowest and highest price the instrument accepts now:
// reference × (1 ∓ band/100), on the tick grid and inside it.
func (in Instrument) Band() (low, high decimal.Decimal, err error) {
	reference := in.Reference()
	hundred := decimal.MustNew(100, 0)
	width, err := reference.Mul(in.PriceBandPercent)
	if err == nil {
		width, err = width.Quo(hundred)
	}
	if err == nil {
		low, err = reference.Sub(width)
	}
	if err == nil {
		high, err = reference.Add(width)
	}
	if err != nil {
		return decimal.Decimal{}, decimal.Decimal{}, fmt.Errorf("orders: price band of %s: %w", in.Symbol, err)
	}
	// Rounded inward to the grid, so every price in the band is one an order may name.
	if !in.TickSize.IsPos() {
		return low, high, nil
	}
	exactLow := low
	steps, _, err := low.QuoRem(in.TickSize)
	if err == nil {
		if low, err = steps.Mul(in.TickSize); err == nil && low.Cmp(exactLow) < 0 {
			low, err = low.Add(in.TickSize)
		}
	}
	if err == nil {
		steps, _, err = high.QuoRem(in.TickSize)
		if err == nil {
			high, err = steps.Mul(in.TickSize)
		}
	}
	if err != nil {
		return decimal.Decimal{}, decimal.Decimal{}, fmt.Errorf("orders: price band of %s: %w", in.Symbol, err)
	}
	return low.Trim(0), high.Trim(0), nil
}

// InBand reports whether price lies within the band (inclusive).
func (in Instrument) InBand(price decimal.Decimal) (bool, error) {
	low, high, err := in.Band()
	if err != nil {
		return false, err
	}
	return price.Cmp(low) >= 0 && price.Cmp(high) <= 0, nil
}

// Check applies the instrument's rules to a command whose fields are already
// well-formed, and returns every rule it breaks: halted, off the grids,
// under the minimum notional (a limit order's at its price, a market
// order's at the reference). The price band (CheckBand) and the digit
// budget (CheckAmounts) have errors of their own.
func (in Instrument) Check(cmd PlaceCommand) []FieldError {
	var refused []FieldError
	refuse := func(field, format string, args ...any) {
		refused = append(refused, FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if in.Halted {
		refuse("symbol", "instrument %s is halted; it accepts no orders", in.Symbol)
	}
	onGrid := func(field string, amount, grid decimal.Decimal, gridName string) bool {
		switch {
		case !amount.IsPos():
			refuse(field, "must be greater than zero")
		case !grid.IsPos():
			refuse(field, "cannot be checked: %s has no %s", in.Symbol, gridName)
		case amount.Scale() > grid.Scale():
			refuse(field, "has %d decimals; %s allows at most %d", amount.Scale(), in.Symbol, grid.Scale())
		case !onGridExactly(amount, grid):
			// Exactly, however large: an amount too large to settle is
			// CheckAmounts's to refuse, naming the limit.
			refuse(field, "must be a multiple of the %s %s", gridName, grid)
		default:
			return true
		}
		return false
	}
	quantityOK := onGrid("quantity", cmd.Quantity, in.LotSize, "lot size")
	// A market order's notional at the reference the band is centered on:
	// the last trade's, as near as the door can know the price it trades
	// at (settlement checks it again at its first fill's).
	price, priceOK := in.Reference(), true
	if cmd.Type == Limit {
		price, priceOK = cmd.Price, onGrid("price", cmd.Price, in.TickSize, "tick size")
	}
	if quantityOK && priceOK && underMinimum(cmd.Quantity, price, in.MinNotional) {
		// Below the minimum, so small enough to multiply exactly.
		shown, _ := cmd.Quantity.Mul(price)
		refuse("quantity", "quantity × price is %s %s, under the minimum notional %s %s",
			shown.Trim(0), in.Quote, in.MinNotional.Trim(0), in.Quote)
	}
	return refused
}

// onGridExactly reports whether amount is a whole multiple of grid, both
// above zero and amount with no more decimals than grid: amount's
// coefficient brought to grid's scale, modulo grid's coefficient, in 128
// bits. Exact for every pair of decimals, without the allocations of a
// big.Rat quotient, which every admission paid twice.
func onGridExactly(amount, grid decimal.Decimal) bool {
	hi, lo := bits.Mul64(amount.Coef(), powersOfTen64[grid.Scale()-amount.Scale()])
	return bits.Rem64(hi, lo, grid.Coef()) == 0
}

// underMinimum reports whether quantity × price is below minimum, exactly:
// in the decimal type when the product fits it (the common case, no
// allocation), as a big.Rat otherwise.
func underMinimum(quantity, price, minimum decimal.Decimal) bool {
	if notional, err := exactMul(quantity, price); err == nil {
		return notional.Cmp(minimum) < 0
	}
	return new(big.Rat).Mul(Rational(quantity), Rational(price)).Cmp(Rational(minimum)) < 0
}

// ErrUnknownInstrument: no instrument has the symbol.
var ErrUnknownInstrument = errors.New("orders: unknown instrument")
