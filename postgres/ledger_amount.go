package postgres

import (
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
	"strings"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// ledgerAmount is an exact amount of money at the ledger's scale: an
// integer count of 10^-orders.LedgerScale, so that a batch's sums (a
// balance row's value and moves, an order's fills) are exact however many
// amounts they add and however large they grow. Every amount settlement
// moves has at most orders.LedgerScale decimals (the decision refuses
// others, and NUMERIC(38,18) holds no more), so nothing is rounded. As a
// big.Rat the same sums cost a GCD on every add; here an add is an integer
// addition (BenchmarkLedgerAmount).
//
// The zero value is 0. A ledgerAmount holds a big.Int: copy one with set,
// never by assignment.
type ledgerAmount struct{ units big.Int }

// unitsPerScale[s] is 10^(orders.LedgerScale - s): what a decimal of scale s
// is multiplied by to count it in the ledger's units.
var unitsPerScale = func() [orders.LedgerScale + 1]uint64 {
	var p [orders.LedgerScale + 1]uint64
	p[orders.LedgerScale] = 1
	for s := orders.LedgerScale - 1; s >= 0; s-- {
		p[s] = p[s+1] * 10
	}
	return p
}()

// amountOf is d as a ledgerAmount.
func amountOf(d decimal.Decimal) *ledgerAmount {
	a := new(ledgerAmount)
	a.add(d)
	return a
}

// add adds d to a.
func (a *ledgerAmount) add(d decimal.Decimal) {
	if d.IsZero() {
		return
	}
	if d.Scale() > orders.LedgerScale {
		d = d.Trim(orders.LedgerScale)
		if d.Scale() > orders.LedgerScale {
			// The decision refuses such an amount (orders.Decide); were one
			// to get here, rounding it would change money silently.
			panic(fmt.Sprintf("postgres: amount %s has more decimals than the ledger keeps", d))
		}
	}
	// coefficient × 10^(LedgerScale - scale) < 10^19 × 10^18 fits two words.
	hi, lo := bits.Mul64(d.Coef(), unitsPerScale[d.Scale()])
	var words [2]big.Word
	var n big.Int
	if bits.UintSize == 64 {
		words[0], words[1] = big.Word(lo), big.Word(hi)
		n.SetBits(words[:])
	} else {
		n.SetUint64(hi)
		n.Lsh(&n, 64)
		n.Or(&n, new(big.Int).SetUint64(lo))
	}
	if d.IsNeg() {
		a.units.Sub(&a.units, &n)
	} else {
		a.units.Add(&a.units, &n)
	}
}

// set sets a to b and returns a.
func (a *ledgerAmount) set(b *ledgerAmount) *ledgerAmount {
	a.units.Set(&b.units)
	return a
}

// plus sets a to b + c and returns a.
func (a *ledgerAmount) plus(b, c *ledgerAmount) *ledgerAmount {
	a.units.Add(&b.units, &c.units)
	return a
}

// minus sets a to b - c and returns a.
func (a *ledgerAmount) minus(b, c *ledgerAmount) *ledgerAmount {
	a.units.Sub(&b.units, &c.units)
	return a
}

// cmp compares a and b: -1, 0 or +1.
func (a *ledgerAmount) cmp(b *ledgerAmount) int { return a.units.Cmp(&b.units) }

// sign is -1, 0 or +1.
func (a *ledgerAmount) sign() int { return a.units.Sign() }

// text is a as NUMERIC text with orders.LedgerScale decimals.
func (a *ledgerAmount) text() string {
	var scratch [48]byte
	return string(a.appendText(scratch[:0]))
}

// appendText appends a's text (text) to dst.
func (a *ledgerAmount) appendText(dst []byte) []byte {
	if words := a.units.Bits(); bits.UintSize == 64 && len(words) <= 2 {
		// Two words, as an amount of up to 18 whole digits is: divided
		// by the unit here, where big.Int's formatting allocates twice.
		var hi, lo uint64
		if len(words) > 0 {
			lo = uint64(words[0])
		}
		if len(words) > 1 {
			hi = uint64(words[1])
		}
		if unit := unitsPerScale[0]; hi < unit {
			whole, fraction := bits.Div64(hi, lo, unit)
			if a.units.Sign() < 0 {
				dst = append(dst, '-')
			}
			dst = strconv.AppendUint(dst, whole, 10)
			dst = append(dst, '.')
			start := len(dst)
			dst = append(dst, make([]byte, orders.LedgerScale)...)
			for i := len(dst) - 1; i >= start; i-- {
				dst[i] = byte('0' + fraction%10)
				fraction /= 10
			}
			return dst
		}
	}
	return a.appendTextBig(dst)
}

// appendTextBig is appendText for any a.
func (a *ledgerAmount) appendTextBig(dst []byte) []byte {
	start := len(dst)
	dst = a.units.Append(dst, 10)
	if dst[start] == '-' {
		start++
	}
	digits := len(dst) - start
	if whole := digits - orders.LedgerScale; whole > 0 {
		// The point before the last LedgerScale digits.
		dst = append(dst, 0)
		point := start + whole
		copy(dst[point+1:], dst[point:len(dst)-1])
		dst[point] = '.'
		return dst
	}
	// "0." and the zeros the fraction's digits lack, before them.
	pad := 2 + orders.LedgerScale - digits
	dst = append(dst, make([]byte, pad)...)
	copy(dst[start+pad:], dst[start:start+digits])
	dst[start], dst[start+1] = '0', '.'
	for i := start + 2; i < start+pad; i++ {
		dst[i] = '0'
	}
	return dst
}

// parseAmount reads NUMERIC text (an optional sign, digits, and at most
// orders.LedgerScale decimals after a point) exactly.
func parseAmount(text string) (*ledgerAmount, bool) {
	digits := text
	negative := strings.HasPrefix(digits, "-")
	if negative || strings.HasPrefix(digits, "+") {
		digits = digits[1:]
	}
	whole, fraction, _ := strings.Cut(digits, ".")
	if whole == "" && fraction == "" || len(fraction) > orders.LedgerScale || !allDigits(whole) || !allDigits(fraction) {
		return nil, false
	}
	var b strings.Builder
	b.Grow(len(whole) + orders.LedgerScale + 1)
	if negative {
		b.WriteByte('-')
	}
	b.WriteString(whole)
	b.WriteString(fraction)
	b.WriteString(strings.Repeat("0", orders.LedgerScale-len(fraction)))
	a := new(ledgerAmount)
	if _, ok := a.units.SetString(b.String(), 10); !ok {
		return nil, false
	}
	return a, true
}

// allDigits says whether s is ASCII digits only (empty included).
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
