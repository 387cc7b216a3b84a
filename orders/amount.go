package orders

import (
	"errors"
	"fmt"

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
