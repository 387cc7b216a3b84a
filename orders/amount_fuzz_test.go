package orders

// Fuzzing exact amounts and the instrument rules:
//
//	go test -run '^$' -fuzz '^FuzzParseAmount$' -fuzztime 60s ./orders/
//	go test -run '^$' -fuzz '^FuzzInstrumentCheck$' -fuzztime 60s ./orders/
//
// (or `make fuzz`). The seeds are the f.Add calls below plus every file in
// testdata/fuzz/<FuzzName>/. A failing input the fuzzer finds is written
// there; plain `go test` runs every file of that directory as a subtest, so a
// crasher kept there stays a regression test. Inputs that only widened
// coverage go to the build cache ($GOCACHE/fuzz), not to the repo.

import (
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"

	"github.com/govalues/decimal"
)

// fuzzAmountPattern is what an accepted amount looks like: plain digits, no
// leading zero, at most one point with digits on both sides.
var fuzzAmountPattern = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]+)?$`)

// fuzzDigits counts the digits of s.
func fuzzDigits(s string) int {
	n := 0
	for _, c := range s {
		if c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// fuzzDecimals is how many digits s has after its point.
func fuzzDecimals(s string) int {
	if _, fraction, found := strings.Cut(s, "."); found {
		return len(fraction)
	}
	return 0
}

func fuzzRat(t *testing.T, s string) *big.Rat {
	t.Helper()
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		t.Fatalf("%q is not a number", s)
	}
	return r
}

// FuzzParseAmount: no panic; an accepted string is plain positional notation
// of at most 18 digits and comes back exactly, nothing rounded or lost; a
// refused one is an *AmountError matching ErrAmount; and every string of that
// form is accepted.
func FuzzParseAmount(f *testing.F) {
	for _, seed := range []string{
		"1", "0", "0.015", "0.010", "50000.00", "123456789.123456789", "999999999999999999",
		"", "-1", "+1", "1e5", "1E-2", "01", "00.5", ".5", "1.", "1.2.3", " 1", "1 ", "NaN", "Infinity",
		"0x10", "1_000", "1,5", "1234567890123456789", "0.000000000000000001", "\u0661", "1\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		amount, err := ParseAmount(s)
		wellFormed := fuzzAmountPattern.MatchString(s) && fuzzDigits(s) <= maxDigitsSpec
		if err != nil {
			var amountErr *AmountError
			if !errors.As(err, &amountErr) || !errors.Is(err, ErrAmount) || amountErr.Reason == "" {
				t.Fatalf("ParseAmount(%q) = %T %v; want an *AmountError matching ErrAmount", s, err, err)
			}
			if wellFormed {
				t.Fatalf("ParseAmount(%q) refused a well-formed amount: %v", s, err)
			}
			return
		}
		if !wellFormed {
			t.Fatalf("ParseAmount(%q) = %s; want refused: not ^(0|[1-9][0-9]*)(\\.[0-9]+)?$ with at most %d digits", s, amount, maxDigitsSpec)
		}
		if got := amount.String(); got != s {
			t.Fatalf("ParseAmount(%q) = %s; want it exactly", s, got)
		}
		if amount.Scale() != fuzzDecimals(s) || amount.IsNeg() {
			t.Fatalf("ParseAmount(%q) has scale %d, sign %d", s, amount.Scale(), amount.Sign())
		}
		if fuzzRat(t, s).Cmp(fuzzRat(t, amount.String())) != 0 {
			t.Fatalf("ParseAmount(%q) = %s: another value", s, amount)
		}
	})
}

// maxDigitsSpec is the README's "more than 18 digits" refusal, written out
// here rather than taken from maxDigits so the test is a second opinion.
const maxDigitsSpec = 18

// fuzzBTCUSD is BTC-USD as the migrations seed it.
func fuzzBTCUSD(t testing.TB) Instrument {
	amount := func(s string) decimal.Decimal {
		d, err := ParseAmount(s)
		if err != nil {
			t.Fatalf("amount %q: %v", s, err)
		}
		return d
	}
	return Instrument{
		Symbol: "BTC-USD", Base: "BTC", Quote: "USD",
		TickSize: amount("0.01"), LotSize: amount("0.00001"),
		MinNotional: amount("10"), ReferencePrice: amount("50000"),
		MakerFeeBps: amount("10"), TakerFeeBps: amount("20"), PriceBandPercent: amount("10"),
	}
}

// FuzzInstrumentCheck: amounts ParseAmount accepts, against BTC-USD. Check
// never panics, and it accepts exactly the orders that big.Rat, reading the
// strings, finds positive, within the grids' decimals, on the lot and tick
// grids and at or over the minimum notional, at any magnitude. Of those,
// CheckAmounts refuses exactly the buys whose worst case, quantity × the
// limit price (a market order: the band's top, 55,000) × 1.002 (the taker
// fee), is above 10^7 USD (BTC-USD's amounts have 11 decimals), with an
// *AmountTooLargeError.
func FuzzInstrumentCheck(f *testing.F) {
	for _, seed := range []struct {
		quantity, price string
		market          bool
	}{
		{"0.01000", "50000.00", false},
		{"0.001", "", true},
		{"0.001", "10000.00", false},
		{"0.0002", "", true},
		{"0.00001", "50000", false},
		{"0.0001", "", true},
		{"0.000011", "50000", false},
		{"0.010000", "50000", false},
		{"0.01", "50000.001", false},
		{"0", "50000", false},
		{"0.01", "0.00", false},
		{"999999999999.00000", "9999999999.99", false},
		{"100000000000000000", "0.01", false},
		{"1", "100000000000000000", false},
		{"0.00003", "333333.34", false},
	} {
		f.Add(seed.quantity, seed.price, seed.market)
	}
	instrument := fuzzBTCUSD(f)
	f.Fuzz(func(t *testing.T, quantityText, priceText string, market bool) {
		cmd := PlaceCommand{Symbol: instrument.Symbol, Side: Buy, Type: Limit}
		var err error
		if cmd.Quantity, err = ParseAmount(quantityText); err != nil {
			return
		}
		if market {
			cmd.Type, priceText = Market, instrument.ReferencePrice.String()
		} else if cmd.Price, err = ParseAmount(priceText); err != nil {
			return
		}
		refused := instrument.Check(cmd)
		for _, field := range refused {
			if (field.Field != "quantity" && field.Field != "price") || field.Reason == "" {
				t.Fatalf("Check(%s, %s) refuses %+v; want quantity or price with a reason", quantityText, priceText, field)
			}
		}

		quantity, price := fuzzRat(t, quantityText), fuzzRat(t, priceText)
		lot, tick := fuzzRat(t, instrument.LotSize.String()), fuzzRat(t, instrument.TickSize.String())
		lots, ticks := new(big.Rat).Quo(quantity, lot), new(big.Rat).Quo(price, tick)
		notional := new(big.Rat).Mul(quantity, price)
		valid := quantity.Sign() > 0 && price.Sign() > 0 &&
			fuzzDecimals(quantityText) <= instrument.LotSize.Scale() &&
			fuzzDecimals(priceText) <= instrument.TickSize.Scale() &&
			lots.IsInt() && ticks.IsInt() &&
			notional.Cmp(fuzzRat(t, instrument.MinNotional.String())) >= 0

		switch {
		case len(refused) == 0 && !valid:
			t.Fatalf("Check accepted quantity %s price %s (market %v): lots %s, ticks %s, notional %s; want refused",
				quantityText, priceText, market, lots.RatString(), ticks.RatString(), notional.FloatString(8))
		case len(refused) > 0 && valid:
			t.Fatalf("Check refused the valid order quantity %s price %s (market %v): %+v",
				quantityText, priceText, market, refused)
		case !valid:
			return
		}

		budget := price
		if market {
			budget = big.NewRat(55000, 1)
		}
		worst := new(big.Rat).Mul(quantity, budget)
		worst.Mul(worst, big.NewRat(1002, 1000))
		tooLarge := worst.Cmp(big.NewRat(10000000, 1)) > 0
		err = instrument.CheckAmounts(cmd)
		switch {
		case tooLarge && !errors.Is(err, ErrAmountTooLarge):
			t.Fatalf("CheckAmounts(%s at %s, market %v) = %v; the worst case %s is over 10^7", quantityText, priceText,
				market, err, worst.FloatString(11))
		case !tooLarge && err != nil:
			t.Fatalf("CheckAmounts(%s at %s, market %v) = %v; the worst case %s is within 10^7", quantityText, priceText,
				market, err, worst.FloatString(11))
		}
	})
}
