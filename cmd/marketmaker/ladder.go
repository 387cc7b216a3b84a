package main

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/api/client"
)

// instrument is what the market maker needs to know of one instrument, as
// GET /v1/instruments answers it: its grids, its minimum notional, and the
// band around its reference price that limit prices must stay in.
type instrument struct {
	symbol string
	// tick and lot are the instrument's price and quantity grids.
	tick, lot decimal.Decimal
	// minNotional is the least quantity × price an order may have.
	minNotional decimal.Decimal
	// reference is the exchange's reference price (the last trade's, the
	// seeded one before the first): the band is around it.
	reference decimal.Decimal
	// bandPercent is the instrument's price band around its reference.
	bandPercent decimal.Decimal
	halted      bool
}

// instrumentOf reads one instrument of the listing. The grids are trimmed
// of trailing zeros, so a price printed at the tick's scale never has more
// decimals than the gateway takes.
func instrumentOf(in client.Instrument) (instrument, error) {
	out := instrument{symbol: in.Symbol, halted: in.Status == client.InstrumentStatusHalted}
	for _, field := range []struct {
		name, text string
		into       *decimal.Decimal
	}{
		{"tick_size", in.TickSize, &out.tick}, {"lot_size", in.LotSize, &out.lot},
		{"min_notional", in.MinNotional, &out.minNotional}, {"reference_price", in.ReferencePrice, &out.reference},
		{"price_band_percent", in.PriceBandPercent, &out.bandPercent},
	} {
		d, err := decimal.Parse(field.text)
		if err != nil {
			return instrument{}, fmt.Errorf("%s: %s %q: %w", in.Symbol, field.name, field.text, err)
		}
		*field.into = d
	}
	out.tick, out.lot = out.tick.Trim(0), out.lot.Trim(0)
	if !out.tick.IsPos() || !out.lot.IsPos() || !out.reference.IsPos() || !out.bandPercent.IsPos() || out.minNotional.IsNeg() {
		return instrument{}, fmt.Errorf("%s: tick %s, lot %s, reference %s, band %s%%, min notional %s: cannot quote",
			in.Symbol, out.tick, out.lot, out.reference, out.bandPercent, out.minNotional)
	}
	return out, nil
}

var symbolPattern = regexp.MustCompile(`^[A-Z0-9]{2,10}-[A-Z0-9]{2,10}$`)

// symbolsOf reads -symbols, a comma-separated list: which of the listed
// instruments to quote. Empty means all of them.
func symbolsOf(list string) ([]string, error) {
	var out []string
	for symbol := range strings.SplitSeq(list, ",") {
		symbol = strings.ToUpper(strings.TrimSpace(symbol))
		if symbol == "" {
			continue
		}
		if !symbolPattern.MatchString(symbol) {
			return nil, fmt.Errorf("-symbols: %q is not a symbol such as BTC-USD", symbol)
		}
		out = append(out, symbol)
	}
	return out, nil
}

// quote is one order of a ladder.
type quote struct {
	side            string
	price, quantity decimal.Decimal
}

// walk is one instrument's mid price as a whole number of ticks, moving at
// random by small steps and kept where every quote of the ladder stays
// inside half the price band around the exchange's reference price. The
// gateway checks the band against its cached reference and settlement
// against the reference of the moment: half the band leaves room for the
// two to differ, and for the reference to move between two refreshes.
type walk struct {
	in     instrument
	levels int
	// sizeMultiple is each quote's notional at the reference price, in
	// minimum notionals.
	sizeMultiple   int64
	mid            int64 // ticks
	low, high      int64 // the mid's bounds, in ticks
	spacing, drift int64 // ticks between levels; largest step of the walk
	size           decimal.Decimal
}

func newWalk(in instrument, levels int, sizeMultiple int64) (*walk, error) {
	if levels < 1 {
		return nil, fmt.Errorf("%s: levels must be at least 1, got %d", in.symbol, levels)
	}
	if sizeMultiple < 1 {
		return nil, fmt.Errorf("%s: size multiple must be at least 1, got %d", in.symbol, sizeMultiple)
	}
	ref, err := floorTicks(in.reference, in.tick)
	if err != nil {
		return nil, fmt.Errorf("%s: reference: %w", in.symbol, err)
	}
	w := &walk{levels: levels, sizeMultiple: sizeMultiple, mid: ref}
	if err := w.follow(in); err != nil {
		return nil, err
	}
	return w, nil
}

// follow takes the instrument as the exchange lists it now: the bounds move
// with its reference and band, the mid is kept inside them, and the size is
// worked out again. On an error the walk is left as it was.
func (w *walk) follow(in instrument) error {
	ref, err := floorTicks(in.reference, in.tick)
	if err != nil {
		return fmt.Errorf("%s: reference: %w", in.symbol, err)
	}
	// half the band, in ticks, rounded inward: ref × band% / 2
	halfBand, err := decimal.MustNew(ref, 0).Mul(in.bandPercent)
	if err == nil {
		halfBand, err = halfBand.Quo(decimal.MustNew(200, 0))
	}
	if err != nil {
		return fmt.Errorf("%s: band: %w", in.symbol, err)
	}
	half, _, ok := halfBand.Floor(0).Int64(0)
	if !ok {
		return fmt.Errorf("%s: band of %s ticks does not fit", in.symbol, halfBand)
	}
	spacing := max(1, ref/1000) // 0.1% between levels
	drift := max(1, ref/2000)   // at most 0.05% a step
	low := ref - half + int64(w.levels)*spacing
	high := ref + half - int64(w.levels)*spacing
	if low > ref || high < ref || ref-half < 1 {
		return fmt.Errorf("%s: %d levels %d ticks apart do not fit half the %s%% band around %s",
			in.symbol, w.levels, spacing, in.bandPercent, in.reference)
	}
	lowest, err := in.tick.Mul(decimal.MustNew(ref-half, 0)) // the lowest bid's price
	if err != nil {
		return fmt.Errorf("%s: %w", in.symbol, err)
	}
	size, err := sizeOf(in, w.sizeMultiple, lowest)
	if err != nil {
		return err
	}
	w.in, w.spacing, w.drift, w.low, w.high, w.size = in, spacing, drift, low, high, size
	w.mid = min(max(w.mid, w.low), w.high)
	return nil
}

// sizeOf is each quote's quantity: sizeMultiple minimum notionals at the
// reference price, and at least one minimum notional at the lowest bid,
// rounded up to two significant digits (a size a reader takes in at a
// glance) and then up to the lot grid.
func sizeOf(in instrument, sizeMultiple int64, lowest decimal.Decimal) (decimal.Decimal, error) {
	atReference, err := in.minNotional.Mul(decimal.MustNew(sizeMultiple, 0))
	if err == nil {
		atReference, err = atReference.Quo(in.reference)
	}
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%s: size: %w", in.symbol, err)
	}
	atLowest, err := in.minNotional.Quo(lowest)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%s: size: %w", in.symbol, err)
	}
	need := atReference.Max(atLowest).Max(in.lot)
	// the exponent of need's leading digit is Prec - Scale - 1
	need = need.Ceil(max(0, 1-(need.Prec()-need.Scale()-1)))
	lots, err := need.Quo(in.lot)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%s: size: %w", in.symbol, err)
	}
	size, err := in.lot.Mul(lots.Ceil(0))
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%s: size: %w", in.symbol, err)
	}
	return size.Pad(in.lot.Scale()), nil
}

// floorTicks is price / tick, rounded down to a whole number of ticks.
func floorTicks(price, tick decimal.Decimal) (int64, error) {
	q, err := price.Quo(tick)
	if err != nil {
		return 0, err
	}
	whole, _, ok := q.Floor(0).Int64(0)
	if !ok {
		return 0, fmt.Errorf("%s / %s does not fit", price, tick)
	}
	return whole, nil
}

// step moves the mid by a random number of ticks in [-drift, drift], kept
// within bounds.
func (w *walk) step(r *rand.Rand) {
	w.mid += r.Int64N(2*w.drift+1) - w.drift
	w.mid = min(max(w.mid, w.low), w.high)
}

// price is ticks × tick, at the tick's scale.
func (w *walk) price(ticks int64) (decimal.Decimal, error) {
	return w.in.tick.Mul(decimal.MustNew(ticks, 0))
}

// ladder is the quotes around the mid: levels bids below it and levels asks
// above it, spacing ticks apart, nearest first. Every bid is below every ask.
func (w *walk) ladder() ([]quote, error) {
	quotes := make([]quote, 0, 2*w.levels)
	for i := int64(1); i <= int64(w.levels); i++ {
		bid, err := w.price(w.mid - i*w.spacing)
		if err != nil {
			return nil, err
		}
		ask, err := w.price(w.mid + i*w.spacing)
		if err != nil {
			return nil, err
		}
		quotes = append(quotes, quote{"buy", bid, w.size}, quote{"sell", ask, w.size})
	}
	return quotes, nil
}
