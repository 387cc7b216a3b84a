package postgres

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

func TestLedgerAmountText(t *testing.T) {
	tests := []struct {
		name    string
		amounts []string
		want    string
	}{
		{"zero", nil, "0.000000000000000000"},
		{"whole", []string{"12"}, "12.000000000000000000"},
		{"smallest unit", []string{"0.000000000000000001"}, "0.000000000000000001"},
		{"negative fraction", []string{"-0.5"}, "-0.500000000000000000"},
		{"sum to zero", []string{"1.25", "-1.25"}, "0.000000000000000000"},
		{"mixed scales", []string{"0.1", "0.02", "0.003"}, "0.123000000000000000"},
		{"largest coefficient at the ledger's scale", []string{"9.999999999999999999"}, "9.999999999999999999"},
		{"largest coefficient, whole", []string{"9999999999999999999"}, "9999999999999999999.000000000000000000"},
		{"beyond the decimal type's 19 digits", []string{"9999999999999999999", "9999999999999999999"}, "19999999999999999998.000000000000000000"},
		{"trailing zeros past the scale", []string{"1.5000000000000000000"}, "1.500000000000000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sum ledgerAmount
			for _, a := range tt.amounts {
				sum.add(decimal.MustParse(a))
			}
			if got := sum.text(); got != tt.want {
				t.Fatalf("sum of %v = %s, want %s", tt.amounts, got, tt.want)
			}
			back, ok := parseAmount(tt.want)
			if !ok || back.cmp(&sum) != 0 {
				t.Fatalf("parseAmount(%q) = %v, %v; want the sum back", tt.want, back, ok)
			}
		})
	}
}

func TestParseAmount(t *testing.T) {
	tests := []struct {
		text string
		want string // "" when refused
	}{
		{"0", "0.000000000000000000"},
		{"-3.25", "-3.250000000000000000"},
		{"+7.", "7.000000000000000000"},
		{".5", "0.500000000000000000"},
		{"123456789012345678901234567890.123456789012345678", "123456789012345678901234567890.123456789012345678"},
		{"1.0000000000000000001", ""}, // more decimals than the ledger keeps
		{"", ""},
		{".", ""},
		{"-", ""},
		{"1e5", ""},
		{"1.2.3", ""},
		{" 1", ""},
		{"NaN", ""},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, ok := parseAmount(tt.text)
			if tt.want == "" {
				if ok {
					t.Fatalf("parseAmount(%q) = %s, want refused", tt.text, got.text())
				}
				return
			}
			if !ok || got.text() != tt.want {
				t.Fatalf("parseAmount(%q) = %v, %v; want %s", tt.text, got, ok, tt.want)
			}
		})
	}
}

// TestLedgerAmountMatchesRationals sums random decimals both ways and
// compares every step: ledgerAmount must be what big.Rat, exact by
// construction, says.
func TestLedgerAmountMatchesRationals(t *testing.T) {
	random := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		var sum, other ledgerAmount
		var want, wantOther big.Rat
		for range 1 + random.IntN(20) {
			d := randomAmount(random)
			sum.add(d)
			want.Add(&want, orders.Rational(d))
			e := randomAmount(random)
			other.add(e)
			wantOther.Add(&wantOther, orders.Rational(e))
			if got := sum.text(); got != want.FloatString(orders.LedgerScale) {
				t.Fatalf("iteration %d: sum %s, big.Rat says %s", iter, got, want.FloatString(orders.LedgerScale))
			}
			if got, want := sum.cmp(&other), want.Cmp(&wantOther); got != want {
				t.Fatalf("iteration %d: cmp %d, big.Rat says %d", iter, got, want)
			}
		}
		diff := new(ledgerAmount).minus(&sum, &other)
		if got, want := diff.text(), new(big.Rat).Sub(&want, &wantOther).FloatString(orders.LedgerScale); got != want {
			t.Fatalf("iteration %d: difference %s, big.Rat says %s", iter, got, want)
		}
		total := new(ledgerAmount).plus(&sum, &other)
		if got, want := total.text(), new(big.Rat).Add(&want, &wantOther).FloatString(orders.LedgerScale); got != want {
			t.Fatalf("iteration %d: total %s, big.Rat says %s", iter, got, want)
		}
	}
}

func TestLedgerAmountRefusesDecimalsBeyondTheLedger(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("adding 19 decimals did not panic")
		}
	}()
	new(ledgerAmount).add(decimal.MustParse("0.0000000000000000001"))
}

// randomAmount is a decimal of up to 19 digits (below 2^63) and orders.LedgerScale
// decimals, of either sign.
func randomAmount(random *rand.Rand) decimal.Decimal {
	scale := random.IntN(orders.LedgerScale + 1)
	coef := random.Int64N(math.MaxInt64)
	if random.IntN(3) == 0 {
		coef %= 100_000
	}
	d, err := decimal.New(coef, scale)
	if err != nil {
		panic(err)
	}
	if random.IntN(2) == 0 {
		d = d.Neg()
	}
	return d
}

// BenchmarkLedgerAmount compares a balance row's life in a batch, as
// settlement lives it (read the row's text, add a batch's moves, write the
// sum's text), in ledgerAmount and in big.Rat, which it replaced.
func BenchmarkLedgerAmount(b *testing.B) {
	moves := []decimal.Decimal{
		decimal.MustParse("0.0125"), decimal.MustParse("-251.3750"), decimal.MustParse("3.5"),
		decimal.MustParse("-0.000125"), decimal.MustParse("1005.50"), decimal.MustParse("-0.25"),
	}
	const balance = "1000000.125000000000000000"
	b.Run("ledgerAmount", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, _ := parseAmount(balance)
			var moved ledgerAmount
			for _, m := range moves {
				a.add(m)
				moved.add(m)
			}
			_, _ = a.text(), moved.text()
		}
	})
	b.Run("big.Rat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, _ := new(big.Rat).SetString(balance)
			var moved big.Rat
			for _, m := range moves {
				r := orders.Rational(m)
				a.Add(a, r)
				moved.Add(&moved, r)
			}
			_, _ = a.FloatString(orders.LedgerScale), moved.FloatString(orders.LedgerScale)
		}
	})
}
