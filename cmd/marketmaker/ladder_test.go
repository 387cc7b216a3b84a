package main

import (
	"math/rand/v2"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/api/client"
)

// listing is GET /v1/instruments as the gateway answers it on a fresh
// database (migrations/0001 and 0005), and one instrument with a coarse
// tick, a narrow fractional band and a grid written with trailing zeros.
var listing = []client.Instrument{
	{Symbol: "BTC-USD", Base: "BTC", Quote: "USD", TickSize: "0.01", LotSize: "0.00001", MinNotional: "10",
		PriceBandPercent: "10", MakerFeeBps: "10", TakerFeeBps: "20", Status: client.InstrumentStatusTrading, ReferencePrice: "50000.00"},
	{Symbol: "ETH-BTC", Base: "ETH", Quote: "BTC", TickSize: "0.00001", LotSize: "0.005", MinNotional: "0.0001",
		PriceBandPercent: "10", MakerFeeBps: "10", TakerFeeBps: "20", Status: client.InstrumentStatusTrading, ReferencePrice: "0.06000"},
	{Symbol: "ETH-USD", Base: "ETH", Quote: "USD", TickSize: "0.05", LotSize: "0.001", MinNotional: "10",
		PriceBandPercent: "10", MakerFeeBps: "10", TakerFeeBps: "20", Status: client.InstrumentStatusTrading, ReferencePrice: "3000.00"},
	{Symbol: "SOL-USD", Base: "SOL", Quote: "USD", TickSize: "0.50", LotSize: "0.10", MinNotional: "25",
		PriceBandPercent: "7.5", MakerFeeBps: "5", TakerFeeBps: "10", Status: client.InstrumentStatusTrading, ReferencePrice: "150.5"},
}

func instrumentsOfListing(t testing.TB) map[string]instrument {
	t.Helper()
	out := map[string]instrument{}
	for _, l := range listing {
		in, err := instrumentOf(l)
		if err != nil {
			t.Fatal(err)
		}
		out[in.symbol] = in
	}
	return out
}

// checkLadder checks one ladder: 2 × levels quotes on the grids, above the
// minimum notional, inside half the band around the instrument's reference,
// nearest first, every bid below every ask.
func checkLadder(t *testing.T, in instrument, levels int, quotes []quote) {
	t.Helper()
	// half the band around the reference: reference ± band% / 2
	band, _ := in.reference.Mul(in.bandPercent)
	inner, _ := band.Quo(decimal.MustNew(200, 0))
	low, _ := in.reference.Sub(inner)
	high, _ := in.reference.Add(inner)
	if len(quotes) != 2*levels {
		t.Fatalf("%s: %d quotes, want %d", in.symbol, len(quotes), 2*levels)
	}
	var bestBid, bestAsk, lastBid, lastAsk decimal.Decimal
	for i, q := range quotes {
		if _, r, _ := q.price.QuoRem(in.tick); !r.IsZero() || q.price.Scale() > in.tick.Scale() {
			t.Fatalf("%s: price %s off the %s grid", in.symbol, q.price, in.tick)
		}
		if _, r, _ := q.quantity.QuoRem(in.lot); !r.IsZero() || !q.quantity.IsPos() || q.quantity.Scale() > in.lot.Scale() {
			t.Fatalf("%s: quantity %s off the %s lot grid", in.symbol, q.quantity, in.lot)
		}
		if q.price.Cmp(low) < 0 || q.price.Cmp(high) > 0 {
			t.Fatalf("%s: %s %s outside [%s, %s]", in.symbol, q.side, q.price, low, high)
		}
		if notional, _ := q.price.Mul(q.quantity); notional.Cmp(in.minNotional) < 0 {
			t.Fatalf("%s: notional %s below the minimum %s", in.symbol, notional, in.minNotional)
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
		t.Fatalf("%s: best bid %s not below best ask %s", in.symbol, bestBid, bestAsk)
	}
}

// TestLadderStaysOnTheGridInsideTheBand walks every instrument far longer
// than its bounds are wide and checks every ladder on the way; then moves
// the reference (as trades do) and walks again.
func TestLadderStaysOnTheGridInsideTheBand(t *testing.T) {
	for _, levels := range []int{1, 3, 10} {
		for _, in := range instrumentsOfListing(t) {
			w, err := newWalk(in, levels, 50)
			if err != nil {
				t.Fatal(err)
			}
			r := rand.New(rand.NewPCG(uint64(levels), 7))
			walkAndCheck := func(in instrument) {
				t.Helper()
				moved := false
				for range 10000 {
					before := w.mid
					w.step(r)
					moved = moved || w.mid != before
					quotes, err := w.ladder()
					if err != nil {
						t.Fatal(err)
					}
					checkLadder(t, in, levels, quotes)
				}
				if !moved {
					t.Errorf("%s: the mid never moved", in.symbol)
				}
			}
			walkAndCheck(in)
			// The reference moves 4% up: the walk follows at once.
			moved := in
			moved.reference, _ = in.reference.Mul(decimal.MustParse("1.04"))
			moved.reference = moved.reference.Floor(in.tick.Scale())
			if err := w.follow(moved); err != nil {
				t.Fatal(err)
			}
			quotes, err := w.ladder()
			if err != nil {
				t.Fatal(err)
			}
			checkLadder(t, moved, levels, quotes)
			walkAndCheck(moved)
		}
	}
}

// The quotes' size is a round number, on the lot grid, about 50 minimum
// notionals at the reference; prices print at the tick's scale.
func TestQuoteSizes(t *testing.T) {
	ins := instrumentsOfListing(t)
	for symbol, want := range map[string]string{"BTC-USD": "0.01000", "ETH-USD": "0.170", "ETH-BTC": "0.085", "SOL-USD": "8.4"} {
		w, err := newWalk(ins[symbol], 1, 50)
		if err != nil {
			t.Fatal(err)
		}
		if w.size.String() != want {
			t.Errorf("%s: size %s, want %s", symbol, w.size, want)
		}
	}
	w, err := newWalk(ins["BTC-USD"], 1, 50)
	if err != nil {
		t.Fatal(err)
	}
	quotes, err := w.ladder()
	if err != nil {
		t.Fatal(err)
	}
	if quotes[0].price.String() != "49950.00" || quotes[1].price.String() != "50050.00" {
		t.Errorf("ladder %v", quotes)
	}
}

func TestWalkRefusesABandTooNarrow(t *testing.T) {
	in := instrumentsOfListing(t)["BTC-USD"]
	in.bandPercent = decimal.MustParse("0.5") // ±0.25%: 3 levels 0.1% apart do not fit half of it
	if _, err := newWalk(in, 3, 50); err == nil {
		t.Errorf("newWalk took a band too narrow for its levels")
	}
	w, err := newWalk(instrumentsOfListing(t)["BTC-USD"], 3, 50)
	if err != nil {
		t.Fatal(err)
	}
	before := *w
	if err := w.follow(in); err == nil || w.in != before.in || w.low != before.low {
		t.Errorf("follow = %v, and the walk changed", err)
	}
}

func TestWalkIsSeeded(t *testing.T) {
	in := instrumentsOfListing(t)["ETH-USD"]
	mids := func(seed uint64) []int64 {
		w, err := newWalk(in, 3, 50)
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

func TestSymbolsOf(t *testing.T) {
	got, err := symbolsOf(" btc-usd, ETH-BTC ,")
	if err != nil || len(got) != 2 || got[0] != "BTC-USD" || got[1] != "ETH-BTC" {
		t.Errorf("symbolsOf = %v, %v", got, err)
	}
	if got, err := symbolsOf(""); err != nil || len(got) != 0 {
		t.Errorf("symbolsOf(\"\") = %v, %v; want every instrument", got, err)
	}
	for _, list := range []string{"DOGE", "BTC-USD,x y"} {
		if _, err := symbolsOf(list); err == nil {
			t.Errorf("symbolsOf(%q) took it", list)
		}
	}
}
