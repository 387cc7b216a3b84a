package orders

import (
	_ "embed"
	"errors"
	"fmt"

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
	// ReferencePrice prices market orders.
	ReferencePrice decimal.Decimal
	Halted         bool
}

// Check applies the instrument's rules to a command whose fields are already
// well-formed, and returns every rule it breaks.
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
		case amount.Scale() > grid.Scale():
			refuse(field, "has %d decimals; %s allows at most %d", amount.Scale(), in.Symbol, grid.Scale())
		default:
			_, remainder, err := amount.QuoRem(grid)
			switch {
			case err != nil: // the quotient overflows the decimal type
				refuse(field, "is too large for %s", in.Symbol)
			case !remainder.IsZero():
				refuse(field, "must be a multiple of the %s %s", gridName, grid)
			default:
				return true
			}
		}
		return false
	}
	quantityOK := onGrid("quantity", cmd.Quantity, in.LotSize, "lot size")
	price, priceOK := in.ReferencePrice, true
	if cmd.Type == Limit {
		price, priceOK = cmd.Price, onGrid("price", cmd.Price, in.TickSize, "tick size")
	}
	if quantityOK && priceOK {
		notional, err := cmd.Quantity.Mul(price)
		switch {
		case err != nil:
			refuse("quantity", "quantity × price is too large")
		case notional.Cmp(in.MinNotional) < 0:
			refuse("quantity", "quantity × price is %s %s, under the minimum notional %s %s",
				notional.Trim(0), in.Quote, in.MinNotional.Trim(0), in.Quote)
		}
	}
	return refused
}

// ErrUnknownInstrument: no instrument has the symbol.
var ErrUnknownInstrument = errors.New("orders: unknown instrument")
