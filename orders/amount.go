package orders

import (
	"errors"
	"fmt"
	"math/big"

	"github.com/govalues/decimal"
)

// maxDigits is how many digits an amount may have in all: the decimal type
// holds 19, and keeping one spare keeps quantity × price checks meaningful.
const maxDigits = 18

// AmountError says why a string is not an amount.
type AmountError struct{ Reason string }

func (e *AmountError) Error() string { return "orders: " + e.Reason }

// ErrAmount matches every *AmountError.
var ErrAmount = errors.New("orders: invalid amount")

func (e *AmountError) Unwrap() error { return ErrAmount }

// ParseAmount reads an untrusted decimal string exactly, or refuses it. Only
// plain positional notation is taken: digits, at most one point with digits on
// both sides, no sign, no exponent, no leading zeros, no spaces. The decimal
// library would round an over-long fraction; this check runs first so nothing
// is ever rounded.
func ParseAmount(s string) (decimal.Decimal, error) {
	if s == "" {
		return decimal.Decimal{}, &AmountError{"is empty"}
	}
	integer, fraction, point := 0, 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if point {
				fraction++
			} else {
				if integer == 1 && s[0] == '0' {
					return decimal.Decimal{}, &AmountError{"has a leading zero"}
				}
				integer++
			}
		case c == '.' && !point:
			point = true
		case c == 'e' || c == 'E':
			return decimal.Decimal{}, &AmountError{"has an exponent; write the number out"}
		case c == '-' || c == '+':
			return decimal.Decimal{}, &AmountError{"has a sign; amounts are positive and unsigned"}
		default:
			return decimal.Decimal{}, &AmountError{fmt.Sprintf("has the character %q; use digits and one decimal point", c)}
		}
	}
	switch {
	case integer == 0:
		return decimal.Decimal{}, &AmountError{"needs a digit before the decimal point"}
	case point && fraction == 0:
		return decimal.Decimal{}, &AmountError{"needs a digit after the decimal point"}
	case integer+fraction > maxDigits:
		return decimal.Decimal{}, &AmountError{fmt.Sprintf("has more than %d digits", maxDigits)}
	}
	amount, err := decimal.Parse(s)
	if err != nil {
		return decimal.Decimal{}, &AmountError{err.Error()}
	}
	return amount, nil
}

// ErrInexact: an exact result does not fit the decimal type (19 digits), and
// money is never rounded silently. The caller decides what to do about it.
var ErrInexact = errors.New("orders: result is not exactly representable")

// ParseExact reads decimal text as PostgreSQL stores it (a NUMERIC's trimmed
// text, a sign allowed), refusing text the decimal type would round. It is
// for trusted text: a client's amount goes through ParseAmount.
func ParseExact(text string) (decimal.Decimal, error) {
	d, err := decimal.Parse(text)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("orders: %q is not a decimal: %w", text, err)
	}
	if fitsExactly(text) {
		return d, nil
	}
	exact, ok := new(big.Rat).SetString(text)
	if !ok || Rational(d).Cmp(exact) != 0 {
		return decimal.Decimal{}, fmt.Errorf("%w: %s does not fit the decimal type", ErrInexact, text)
	}
	return d, nil
}

// fitsExactly: text is plain positional notation (a sign, digits, at most
// one point) of at most 19 digits in all, which the decimal type holds
// without rounding. Every amount the relay renders is such text, and
// proving it exact as a big.Rat cost more than the rest of its rendering.
func fitsExactly(text string) bool {
	if len(text) > 0 && (text[0] == '-' || text[0] == '+') {
		text = text[1:]
	}
	digits, point := 0, false
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			return false
		}
	}
	return digits > 0 && digits <= decimal.MaxPrec
}

// The decimal type rounds a result that needs more than 19 digits. These
// wrappers refuse a result that differs from the exact one with ErrInexact.
//
// The exact result of a sum has the finer scale of its terms, and of a
// product the sum of its factors' scales: asked to keep that scale
// (AddExact, MulExact), the decimal type either returns the exact result,
// the very one its rounding operation would, or fails. That is the common
// case, in uint64 arithmetic, without an allocation. Only when it fails
// (the exact result has more than 19 digits at that scale, or a product
// more than 19 decimals) may the rounded result still be exact (digits
// dropped were trailing zeros): then, rarely, the exact value is compared
// as a big.Rat, as it always was.

// ExactAdd is a + b, or ErrInexact.
func ExactAdd(a, b decimal.Decimal) (decimal.Decimal, error) {
	if sum, err := a.AddExact(b, max(a.Scale(), b.Scale())); err == nil {
		return sum, nil
	}
	got, err := a.Add(b)
	return exactly(got, err, func() *big.Rat { return new(big.Rat).Add(Rational(a), Rational(b)) }, "+", a, b)
}

// ExactSub is a - b, or ErrInexact.
func ExactSub(a, b decimal.Decimal) (decimal.Decimal, error) {
	if difference, err := a.SubExact(b, max(a.Scale(), b.Scale())); err == nil {
		return difference, nil
	}
	got, err := a.Sub(b)
	return exactly(got, err, func() *big.Rat { return new(big.Rat).Sub(Rational(a), Rational(b)) }, "-", a, b)
}

func exactMul(a, b decimal.Decimal) (decimal.Decimal, error) {
	if scale := a.Scale() + b.Scale(); scale <= decimal.MaxScale {
		if product, err := a.MulExact(b, scale); err == nil {
			return product, nil
		}
	}
	got, err := a.Mul(b)
	return exactly(got, err, func() *big.Rat { return new(big.Rat).Mul(Rational(a), Rational(b)) }, "×", a, b)
}

// basisPoint is 1/bpsPerUnit, the factor that divides by bpsPerUnit exactly.
var basisPoint = decimal.MustNew(1, 4)

// perBasisPoint is a / bpsPerUnit, or ErrInexact. The exact quotient is a
// shifted four places; Quo would give it with trailing zeros trimmed down
// to a's scale, and so does this.
func perBasisPoint(a decimal.Decimal) (decimal.Decimal, error) {
	if scale := a.Scale() + 4; scale <= decimal.MaxScale {
		if quotient, err := a.MulExact(basisPoint, scale); err == nil {
			return quotient.Trim(a.Scale()), nil
		}
	}
	got, err := a.Quo(bpsPerUnit)
	return exactly(got, err, func() *big.Rat { return new(big.Rat).Quo(Rational(a), Rational(bpsPerUnit)) }, "/", a, bpsPerUnit)
}

func exactly(got decimal.Decimal, err error, want func() *big.Rat, op string, a, b decimal.Decimal) (decimal.Decimal, error) {
	if err != nil || Rational(got).Cmp(want()) != 0 {
		return decimal.Decimal{}, fmt.Errorf("%w: %s %s %s", ErrInexact, a, op, b)
	}
	return got, nil
}

// Rational is d's exact value: its coefficient over its power of ten
// (parsing its text costs ten times as much, and settlement does it for
// every amount it moves).
func Rational(d decimal.Decimal) *big.Rat {
	r := new(big.Rat).SetFrac(new(big.Int).SetUint64(d.Coef()), powersOfTen[d.Scale()])
	if d.IsNeg() {
		r.Neg(r)
	}
	return r
}

// powersOfTen64[i] is 10^i, for every scale a decimal can have (10^19 still
// fits a uint64).
var powersOfTen64 = func() [decimal.MaxScale + 1]uint64 {
	var p [decimal.MaxScale + 1]uint64
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// powersOfTen[i] is 10^i as a big.Int, for every scale a decimal can have.
var powersOfTen = func() [decimal.MaxScale + 1]*big.Int {
	var p [decimal.MaxScale + 1]*big.Int
	for i := range p {
		p[i] = new(big.Int).SetUint64(powersOfTen64[i])
	}
	return p
}()
