package orders

import (
	"errors"
	"fmt"

	"github.com/govalues/decimal"
)

// ErrPriceOutOfBand matches every *PriceOutOfBandError.
var ErrPriceOutOfBand = errors.New("orders: limit price outside the instrument's price band")

// PriceOutOfBandError: a limit price outside the instrument's band around
// its reference price (Instrument.Band). The gateway refuses such an order
// at the door; settlement rejects one whose reference moved meanwhile
// (reject reason price_out_of_band).
type PriceOutOfBandError struct {
	Symbol, Quote string
	Price         decimal.Decimal
	// Low and High are the band's edges, inclusive, around Reference.
	Low, High, Reference decimal.Decimal
	Percent              decimal.Decimal
}

func (e *PriceOutOfBandError) Error() string {
	return fmt.Sprintf("orders: price %s of %s is outside the price band %s to %s %s (%s%% around the reference price %s)",
		e.Price, e.Symbol, e.Low, e.High, e.Quote, e.Percent, e.Reference)
}

func (e *PriceOutOfBandError) Unwrap() error { return ErrPriceOutOfBand }

// CheckBand returns a *PriceOutOfBandError when price lies outside the
// instrument's band, or the band's own error when it cannot be computed.
func (in Instrument) CheckBand(price decimal.Decimal) error {
	low, high, err := in.Band()
	if err != nil {
		return err
	}
	if price.Cmp(low) >= 0 && price.Cmp(high) <= 0 {
		return nil
	}
	// Shown on the price grid, as prices are entered.
	scale := in.TickSize.Scale()
	return &PriceOutOfBandError{Symbol: in.Symbol, Quote: in.Quote, Price: price, Low: low.Pad(scale), High: high.Pad(scale),
		Reference: in.Reference().Pad(scale), Percent: in.PriceBandPercent.Trim(0)}
}
