package postgres

import (
	"fmt"
	"math/big"
	"math/bits"
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
	digits := a.units.Append(make([]byte, 0, 48), 10)
	negative := len(digits) > 0 && digits[0] == '-'
	if negative {
		digits = digits[1:]
	}
	var b strings.Builder
	b.Grow(len(digits) + orders.LedgerScale + 3)
	if negative {
		b.WriteByte('-')
	}
	if whole := len(digits) - orders.LedgerScale; whole > 0 {
		b.Write(digits[:whole])
		b.WriteByte('.')
		b.Write(digits[whole:])
	} else {
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -whole))
		b.Write(digits)
	}
	return b.String()
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
