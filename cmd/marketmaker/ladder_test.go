package main

import (
	"math/rand/v2"
	"testing"

	"github.com/govalues/decimal"
)

// minNotional is each seeded instrument's minimum notional (migrations/0001).
var minNotional = map[string]decimal.Decimal{
	"BTC-USD": decimal.MustParse("10"), "ETH-USD": decimal.MustParse("10"), "ETH-BTC": decimal.MustParse("0.0001"),
}

// TestLadderStaysOnTheGridInsideTheBand walks every seeded instrument far
// longer than its bounds are wide and checks every ladder on the way.
func TestLadderStaysOnTheGridInsideTheBand(t *testing.T) {
	for _, levels := range []int{1, 3, 10} {
		for _, in := range seeded {
			w, err := newWalk(in, levels)
			if err != nil {
				t.Fatal(err)
			}
			// half the band around the seeded reference: reference ± band% / 2
			band, _ := in.reference.Mul(decimal.MustNew(in.bandPercent, 2))
			inner, _ := band.Quo(decimal.MustNew(2, 0))
			low, _ := in.reference.Sub(inner)
			high, _ := in.reference.Add(inner)
			r := rand.New(rand.NewPCG(uint64(levels), 7))
			moved := false
			for step := range 20000 {
				before := w.mid
				w.step(r)
				moved = moved || w.mid != before
				quotes, err := w.ladder()
				if err != nil {
					t.Fatal(err)
				}
				if len(quotes) != 2*levels {
					t.Fatalf("%s: %d quotes, want %d", in.symbol, len(quotes), 2*levels)
				}
				var bestBid, bestAsk decimal.Decimal
				var lastBid, lastAsk decimal.Decimal
				for i, q := range quotes {
					if _, err := ticksOf(q.price, in.tick); err != nil {
						t.Fatalf("%s step %d: price off the grid: %v", in.symbol, step, err)
					}
					if _, err := ticksOf(q.quantity, in.lot); err != nil || !q.quantity.IsPos() {
						t.Fatalf("%s: quantity %s off the lot grid: %v", in.symbol, q.quantity, err)
					}
					if q.price.Scale() > in.tick.Scale() {
						t.Fatalf("%s: price %s has more decimals than the tick %s", in.symbol, q.price, in.tick)
					}
					if q.price.Cmp(low) < 0 || q.price.Cmp(high) > 0 {
						t.Fatalf("%s step %d: %s %s outside [%s, %s]", in.symbol, step, q.side, q.price, low, high)
					}
					notional, _ := q.price.Mul(q.quantity)
					if notional.Cmp(minNotional[in.symbol]) < 0 {
						t.Fatalf("%s: notional %s below the minimum", in.symbol, notional)
					}
					switch q.side {
					case "buy":
						if i > 1 && q.price.Cmp(lastBid) >= 0 {
							t.Fatalf("%s: bids not nearest first: %s after %s", in.symbol, q.price, lastBid)
						}
						lastBid = q.price
						if bestBid.IsZero() || q.price.Cmp(bestBid) > 0 {
							bestBid = q.price
						}
					case "sell":
						if i > 1 && q.price.Cmp(lastAsk) <= 0 {
							t.Fatalf("%s: asks not nearest first: %s after %s", in.symbol, q.price, lastAsk)
						}
						lastAsk = q.price
						if bestAsk.IsZero() || q.price.Cmp(bestAsk) < 0 {
							bestAsk = q.price
						}
					default:
						t.Fatalf("side %q", q.side)
					}
				}
				if bestBid.Cmp(bestAsk) >= 0 {
					t.Fatalf("%s step %d: best bid %s not below best ask %s", in.symbol, step, bestBid, bestAsk)
				}
			}
			if !moved {
				t.Errorf("%s: the reference never moved", in.symbol)
			}
		}
	}
}

func TestWalkIsSeeded(t *testing.T) {
	in := seeded["ETH-USD"]
	mids := func(seed uint64) []int64 {
		w, err := newWalk(in, 3)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 1))
		var out []int64
		for range 50 {
			w.step(r)
			out = append(out, w.mid)
		}
		return out
	}
	a, b, c := mids(1), mids(1), mids(2)
	same := func(x, y []int64) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Errorf("one seed, two walks")
	}
	if same(a, c) {
		t.Errorf("seeds 1 and 2 walked alike")
	}
}

func TestInstrumentsOf(t *testing.T) {
	got, err := instrumentsOf(" btc-usd, ETH-BTC ,")
	if err != nil || len(got) != 2 || got[0].symbol != "BTC-USD" || got[1].symbol != "ETH-BTC" {
		t.Errorf("instrumentsOf = %v, %v", got, err)
	}
	for _, list := range []string{"", "DOGE-USD", "BTC-USD,XRP-USD"} {
		if _, err := instrumentsOf(list); err == nil {
			t.Errorf("instrumentsOf(%q) took it", list)
		}
	}
}
