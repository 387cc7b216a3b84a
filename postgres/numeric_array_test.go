package postgres

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// randomNumerics is n values as a []*string (nil: NULL) and as the same
// numericArray, decimals and ledger amounts mixed.
func randomNumerics(r *rand.Rand, n int) ([]*string, numericArray) {
	texts := make([]*string, n)
	a := numericArrayOf(n)
	for i := range texts {
		switch r.IntN(4) {
		case 0:
			a.optionalDecimal(nil)
		case 1:
			coef := r.Int64N(1e12)
			if r.IntN(2) == 0 {
				coef = -coef
			}
			d := decimal.MustNew(coef, r.IntN(10))
			text := d.String()
			texts[i] = &text
			a.decimal(d)
		default:
			x := amountOf(decimal.MustNew(r.Int64N(1e15)-5e14, r.IntN(19)))
			x.add(decimal.MustNew(r.Int64N(1e18), 0))
			text := x.text()
			texts[i] = &text
			a.amount(x)
		}
	}
	return texts, a
}

// pgxText is pgx's encoding of value for a numeric[] parameter of a
// prepared statement on a connection of a pool made with ConfigurePool,
// and the format it chose.
func pgxText(t testing.TB, value any) (string, int16) {
	t.Helper()
	var b pgx.ExtendedQueryBuilder
	m := pgtype.NewMap()
	RegisterTypes(m)
	sd := &pgconn.StatementDescription{ParamOIDs: []uint32{pgtype.NumericArrayOID}}
	if err := b.Build(m, sd, []any{value}); err != nil {
		t.Fatal(err)
	}
	return string(b.ParamValues[0]), b.ParamFormats[0]
}

func TestNumericArrayIsWhatPgxSent(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, n := range []int{0, 1, 2, 7, 60} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			texts, a := randomNumerics(r, n)
			want, format := pgxText(t, texts)
			if format != pgtype.TextFormatCode {
				t.Fatalf("pgx sent the []*string in format %d", format)
			}
			got, gotFormat := pgxText(t, a.param())
			if got != want || gotFormat != format {
				t.Fatalf("numericArray sends %q (format %d), pgx sent %q (format %d)", got, gotFormat, want, format)
			}
		})
	}
}

func TestLedgerAmountAppendText(t *testing.T) {
	for _, tt := range []struct{ amount, want string }{
		{"0", "0.000000000000000000"},
		{"-0.000000000000000001", "-0.000000000000000001"},
		{"-12.5", "-12.500000000000000000"},
		{"1", "1.000000000000000000"},
	} {
		got := string(amountOf(decimal.MustParse(tt.amount)).appendText([]byte("x,")))
		if got != "x,"+tt.want {
			t.Errorf("appendText of %s after x, = %q, want %q", tt.amount, got, "x,"+tt.want)
		}
	}
}

func TestLedgerAmountAppendTextWords(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for range 20000 {
		var x ledgerAmount
		words := []big.Word{big.Word(r.Uint64()), big.Word(r.Uint64() >> r.IntN(65))}
		x.units.SetBits(words[:r.IntN(3)])
		if r.IntN(2) == 0 {
			x.units.Neg(&x.units)
		}
		got, want := string(x.appendText(nil)), string(x.appendTextBig(nil))
		if got != want {
			t.Fatalf("appendText of %s units = %s, want %s", x.units.String(), got, want)
		}
	}
}

// BenchmarkArrayParameter compares a numeric[] parameter of 60 elements
// (a write's ledger amounts, or its decimals: prices, quantities, fees) as
// pgx encodes it from a []string on a pool made with ConfigurePool
// (RegisterTypes), the values' text built first, with numericArray's
// literal, built from the values, as pgx then sends it.
func BenchmarkArrayParameter(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	amounts := make([]*ledgerAmount, 60)
	decimals := make([]decimal.Decimal, 60)
	for i := range amounts {
		decimals[i] = decimal.MustNew(r.Int64N(1e12)-5e11, 8)
		amounts[i] = amountOf(decimals[i])
	}
	b.Run("numeric", func(b *testing.B) {
		benchArrayParameter(b, amounts, (*ledgerAmount).text, (*numericArray).amount)
	})
	b.Run("decimal", func(b *testing.B) {
		benchArrayParameter(b, decimals, decimal.Decimal.String, (*numericArray).decimal)
	})
}

// benchArrayParameter is BenchmarkArrayParameter's two ways for values:
// pgx from the []string of their texts, and the literal add builds.
func benchArrayParameter[T any](b *testing.B, values []T, text func(T) string, add func(*numericArray, T)) {
	m := pgtype.NewMap()
	RegisterTypes(m)
	var eqb pgx.ExtendedQueryBuilder
	build := func(b *testing.B, value any) {
		sd := &pgconn.StatementDescription{ParamOIDs: []uint32{pgtype.NumericArrayOID}}
		if err := eqb.Build(m, sd, []any{value}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pgx-strings", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			texts := make([]string, 0, len(values))
			for _, v := range values {
				texts = append(texts, text(v))
			}
			build(b, texts)
		}
	})
	b.Run("literal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a := numericArrayOf(len(values))
			for _, v := range values {
				add(&a, v)
			}
			build(b, a.param())
		}
	})
}

// BenchmarkLedgerAmountText compares an amount's text by big.Int's
// formatting (appendTextBig, which any amount can take) with the
// division of its two words that appendText does for the amounts a
// write holds.
func BenchmarkLedgerAmountText(b *testing.B) {
	x := amountOf(decimal.MustNew(-123456789012345678, 8))
	dst := make([]byte, 0, 64)
	b.Run("big.Int", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dst = x.appendTextBig(dst[:0])
		}
	})
	b.Run("words", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			dst = x.appendText(dst[:0])
		}
	})
}
