package orders

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/govalues/decimal"
	"pgregory.net/rapid"
)

func TestParseAmount(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the exact value; empty when refused
		refusal string // part of the reason when refused
	}{
		{in: "1", want: "1"},
		{in: "0.015", want: "0.015"},
		{in: "0.010", want: "0.010"},
		{in: "50000.00", want: "50000.00"},
		{in: "0", want: "0"},
		{in: "123456789.123456789", want: "123456789.123456789"},
		{in: "", refusal: "empty"},
		{in: "-1", refusal: "sign"},
		{in: "+1", refusal: "sign"},
		{in: "1e5", refusal: "exponent"},
		{in: "1E-2", refusal: "exponent"},
		{in: "01", refusal: "leading zero"},
		{in: "00.5", refusal: "leading zero"},
		{in: ".5", refusal: "before the decimal point"},
		{in: "1.", refusal: "after the decimal point"},
		{in: "1.2.3", refusal: "character"},
		{in: " 1", refusal: "character"},
		{in: "1,5", refusal: "character"},
		{in: "NaN", refusal: "character"},
		{in: "Infinity", refusal: "character"},
		{in: "0x10", refusal: "character"},
		{in: "1_000", refusal: "character"},
		{in: "1234567890.1234567890", refusal: "digits"},
		{in: "0.0000000000000000001", refusal: "digits"},
		{in: "12345678901234567890", refusal: "digits"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAmount(tt.in)
			if tt.refusal != "" {
				var amountErr *AmountError
				if !errors.As(err, &amountErr) || !errors.Is(err, ErrAmount) || !strings.Contains(amountErr.Reason, tt.refusal) {
					t.Fatalf("ParseAmount(%q) = %v, %v; want a refusal about %q", tt.in, got, err, tt.refusal)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("ParseAmount(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseExact(t *testing.T) {
	tests := []struct {
		in   string
		want string // the value read; empty when refused
		err  error  // what a refusal matches, if anything in particular
	}{
		{in: "1", want: "1"},
		{in: "-0.5", want: "-0.5"},
		{in: "0.000000000000000001", want: "0.000000000000000001"},
		// NUMERIC(38,18)'s padding is dropped where the decimal type would
		// need more digits: the value is the same.
		{in: "50000.000000000000000000", want: "50000.00000000000000"},
		{in: "1234567890.1234567891", err: ErrInexact},
		{in: "1e21"},
		{in: "abc"},
		// 19 digits fit without the big.Rat check; 20 need it.
		{in: "9999999999999999999", want: "9999999999999999999"},
		{in: "-123456789.0123456789", want: "-123456789.0123456789"},
		{in: "0.1234567890123456789", want: "0.1234567890123456789"},
		{in: "0.12345678901234567891", err: ErrInexact},
		{in: "12345678901234567890"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseExact(tt.in)
			switch {
			case tt.want != "":
				if err != nil || got.String() != tt.want {
					t.Fatalf("ParseExact(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
				}
			case err == nil || tt.err != nil && !errors.Is(err, tt.err):
				t.Fatalf("ParseExact(%q) = %v, %v; want a refusal (%v)", tt.in, got, err, tt.err)
			}
		})
	}
}

// ParseExact's shortcut for short plain text must accept what the
// big.Rat check accepts, and read the same value.
func TestParseExactShortcutAgrees(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := rapid.StringMatching(`-?[0-9]{1,12}(\.[0-9]{1,12})?`).Draw(t, "text")
		got, err := ParseExact(text)
		d, parseErr := decimal.Parse(text)
		exact, _ := new(big.Rat).SetString(text)
		wantOK := parseErr == nil && Rational(d).Cmp(exact) == 0
		if (err == nil) != wantOK || err == nil && got != d {
			t.Fatalf("ParseExact(%q) = %v, %v; the big.Rat check says exact: %v (%v)", text, got, err, wantOK, d)
		}
	})
}

func TestExactArithmetic(t *testing.T) {
	big19 := "9999999999999999999"
	tests := []struct {
		name string
		op   func(a, b decimal.Decimal) (decimal.Decimal, error)
		a, b string
		want string // empty: ErrInexact
	}{
		{"add", ExactAdd, "0.1", "0.02", "0.12"},
		{"add past 19 digits", ExactAdd, big19, "0.1", ""},
		{"sub", ExactSub, "1", "0.000000000000000001", "0.999999999999999999"},
		{"sub past 19 digits", ExactSub, big19, "0.1", ""},
		{"sub below zero", ExactSub, "1", "3", "-2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.op(decimal.MustParse(tt.a), decimal.MustParse(tt.b))
			if tt.want == "" {
				if !errors.Is(err, ErrInexact) {
					t.Fatalf("%s, %s = %v, %v; want ErrInexact", tt.a, tt.b, got, err)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("%s, %s = %v, %v; want %s", tt.a, tt.b, got, err, tt.want)
			}
			if Rational(got).Cmp(Rational(decimal.MustParse(tt.want))) != 0 {
				t.Fatalf("Rational(%s) is not the value of %s", got, tt.want)
			}
		})
	}
}

func TestRational(t *testing.T) {
	for _, text := range []string{"0", "1", "-1.5", "0.0000000000000000001", "9999999999999999999", "-123.456"} {
		want, _ := new(big.Rat).SetString(text)
		if got := Rational(decimal.MustParse(text)); got.Cmp(want) != 0 {
			t.Errorf("Rational(%s) = %s, want %s", text, got.RatString(), want.RatString())
		}
	}
}

// TestExactArithmeticAgainstRationals: the exact operations, which try the
// decimal type's exact-at-scale operations first, give what the rounding
// operation gives when that is the exact value (the same digits, the same
// scale), and ErrInexact otherwise, checked against big.Rat on amounts of
// every size and scale, trailing zeros included.
func TestExactArithmeticAgainstRationals(t *testing.T) {
	random := rand.New(rand.NewPCG(24, 4))
	amount := func() decimal.Decimal {
		digits := 1 + random.IntN(decimal.MaxPrec)
		coef := random.Uint64N(pow10(digits))
		if random.IntN(4) == 0 {
			// Trailing zeros: the case where rounding may still be exact.
			zeros := random.IntN(digits)
			coef = coef / pow10(zeros) * pow10(zeros)
		}
		scale := random.IntN(decimal.MaxScale + 1)
		text := fmt.Sprintf("%0*d", scale+1, coef)
		if scale > 0 {
			text = text[:len(text)-scale] + "." + text[len(text)-scale:]
		}
		d, err := decimal.Parse(text)
		if err != nil || d.Scale() != scale || d.Coef() != coef {
			t.Fatalf("%s parses as %v, %v", text, d, err)
		}
		if random.IntN(3) == 0 {
			d = d.Neg()
		}
		return d
	}
	ops := []struct {
		name    string
		exact   func(a, b decimal.Decimal) (decimal.Decimal, error)
		rounded func(a, b decimal.Decimal) (decimal.Decimal, error)
		value   func(a, b *big.Rat) *big.Rat
	}{
		{"+", ExactAdd, decimal.Decimal.Add, new(big.Rat).Add},
		{"-", ExactSub, decimal.Decimal.Sub, new(big.Rat).Sub},
		{"×", exactMul, decimal.Decimal.Mul, new(big.Rat).Mul},
		{"/10000", func(a, _ decimal.Decimal) (decimal.Decimal, error) { return perBasisPoint(a) },
			func(a, _ decimal.Decimal) (decimal.Decimal, error) { return a.Quo(bpsPerUnit) },
			func(a, _ *big.Rat) *big.Rat { return new(big.Rat).Quo(a, Rational(bpsPerUnit)) }},
	}
	for range 100_000 {
		a, b := amount(), amount()
		for _, op := range ops {
			got, err := op.exact(a, b)
			rounded, roundedErr := op.rounded(a, b)
			exact := roundedErr == nil && Rational(rounded).Cmp(op.value(Rational(a), Rational(b))) == 0
			switch {
			case exact && (err != nil || got.String() != rounded.String()):
				t.Fatalf("%s %s %s = %v, %v; want %s", a, op.name, b, got, err, rounded)
			case !exact && !errors.Is(err, ErrInexact):
				t.Fatalf("%s %s %s = %v, %v; want ErrInexact (rounded %s)", a, op.name, b, got, err, rounded)
			}
		}
	}
}

// pow10 is 10^n for n from 0 to 19.
func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}
