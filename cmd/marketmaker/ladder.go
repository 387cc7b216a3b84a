package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/govalues/decimal"
)

// instrument is what the market maker needs to know of one instrument: its
// grid and where to quote. The generated client has no instruments listing
// yet, so these are the instruments the migrations seed.
type instrument struct {
	symbol string
	// tick and lot are the instrument's price and quantity grids.
	tick, lot decimal.Decimal
	// reference is the seeded reference price the walk starts from and
	// stays near.
	reference decimal.Decimal
	// bandPercent is the instrument's price band around its reference.
	bandPercent int64
	// size is the quantity of each quote, on the lot grid and above the
	// minimum notional at every price the walk reaches.
	size decimal.Decimal
}

// seeded are the instruments migrations/0001 seeds, with the schema's
// default band (0005).
var seeded = map[string]instrument{
	"BTC-USD": {symbol: "BTC-USD", tick: decimal.MustParse("0.01"), lot: decimal.MustParse("0.00001"),
		reference: decimal.MustParse("50000.00"), bandPercent: 10, size: decimal.MustParse("0.01000")},
	"ETH-USD": {symbol: "ETH-USD", tick: decimal.MustParse("0.05"), lot: decimal.MustParse("0.001"),
		reference: decimal.MustParse("3000.00"), bandPercent: 10, size: decimal.MustParse("0.100")},
	"ETH-BTC": {symbol: "ETH-BTC", tick: decimal.MustParse("0.00001"), lot: decimal.MustParse("0.005"),
		reference: decimal.MustParse("0.06000"), bandPercent: 10, size: decimal.MustParse("0.500")},
}

// instrumentsOf resolves a comma-separated list of symbols.
func instrumentsOf(list string) ([]instrument, error) {
	var out []instrument
	for symbol := range strings.SplitSeq(list, ",") {
		symbol = strings.ToUpper(strings.TrimSpace(symbol))
		if symbol == "" {
			continue
		}
		in, ok := seeded[symbol]
		if !ok {
			known := make([]string, 0, len(seeded))
			for s := range seeded {
				known = append(known, s)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("unknown symbol %q (known: %s)", symbol, strings.Join(known, ", "))
		}
		out = append(out, in)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no symbols to quote")
	}
	return out, nil
}

// quote is one order of a ladder.
type quote struct {
	side            string
	price, quantity decimal.Decimal
}

// walk is one instrument's reference price as a whole number of ticks,
// moving at random by small steps and kept where every quote of the ladder
// stays inside half the price band around the seeded reference. The
// exchange's band is around its own reference (the last trade), which the
// quotes themselves keep near the seeded one; half the band leaves room for
// the two to differ.
type walk struct {
	in             instrument
	levels         int
	mid            int64 // ticks
	low, high      int64 // the mid's bounds, in ticks
	spacing, drift int64 // ticks between levels; largest step of the walk
}

func newWalk(in instrument, levels int) (*walk, error) {
	if levels < 1 {
		return nil, fmt.Errorf("%s: levels must be at least 1, got %d", in.symbol, levels)
	}
	ref, err := ticksOf(in.reference, in.tick)
	if err != nil {
		return nil, fmt.Errorf("%s: reference: %w", in.symbol, err)
	}
	w := &walk{in: in, levels: levels, mid: ref,
		spacing: max(1, ref/1000), // 0.1% between levels
		drift:   max(1, ref/2000), // at most 0.05% a step
	}
	half := ref * in.bandPercent / 200 // half the band, in ticks
	w.low = ref - half + int64(levels)*w.spacing
	w.high = ref + half - int64(levels)*w.spacing
	if w.low > ref || w.high < ref {
		return nil, fmt.Errorf("%s: %d levels %d ticks apart do not fit half the %d%% band", in.symbol, levels, w.spacing, in.bandPercent)
	}
	return w, nil
}

// ticksOf is price / tick, which must be whole.
func ticksOf(price, tick decimal.Decimal) (int64, error) {
	q, r, err := price.QuoRem(tick)
	if err != nil {
		return 0, err
	}
	if !r.IsZero() {
		return 0, fmt.Errorf("%s is not on the %s grid", price, tick)
	}
	whole, _, ok := q.Int64(0)
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
		quotes = append(quotes, quote{"buy", bid, w.in.size}, quote{"sell", ask, w.in.size})
	}
	return quotes, nil
}
