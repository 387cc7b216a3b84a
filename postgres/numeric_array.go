package postgres

import "github.com/govalues/decimal"

// numericArray builds a numeric[] parameter as the text of PostgreSQL's
// array literal, "{1.5,-2,NULL}", which pgx sends as it is: a string
// argument goes in the text format, whatever the parameter's type. The
// server reads the same literal it read before (array_in).
//
// From a []string pgx writes that literal itself (in the text format,
// RegisterTypes), but element by element: each boxed in an interface, its
// type looked up by reflection, its text checked for quoting, after the
// caller made a string of each value (BenchmarkArrayParameter: over twice
// the CPU, thirty times the allocations). Here the values are written
// straight into the literal. A numeric's text is a sign, digits and a
// point: no element needs quoting.
type numericArray struct {
	buf []byte
	n   int
}

// numericArrayOf is an empty numericArray with room for n elements of
// up to 40 bytes, a ledger amount's longest text with its comma.
func numericArrayOf(n int) numericArray {
	return numericArray{buf: make([]byte, 0, 2+n*40)}
}

// next starts an element.
func (a *numericArray) next() {
	if a.n == 0 {
		a.buf = append(a.buf, '{')
	} else {
		a.buf = append(a.buf, ',')
	}
	a.n++
}

// decimal appends d.
func (a *numericArray) decimal(d decimal.Decimal) {
	a.next()
	a.buf, _ = d.AppendText(a.buf)
}

// optionalDecimal appends d, NULL when nil.
func (a *numericArray) optionalDecimal(d *decimal.Decimal) {
	if d == nil {
		a.null()
		return
	}
	a.decimal(*d)
}

// amount appends x (ledgerAmount.text).
func (a *numericArray) amount(x *ledgerAmount) {
	a.next()
	a.buf = x.appendText(a.buf)
}

// optionalAmount appends x, NULL when nil.
func (a *numericArray) optionalAmount(x *ledgerAmount) {
	if x == nil {
		a.null()
		return
	}
	a.amount(x)
}

// null appends NULL.
func (a *numericArray) null() {
	a.next()
	a.buf = append(a.buf, "NULL"...)
}

// param is the array literal, the parameter's value.
func (a *numericArray) param() string {
	if a.n == 0 {
		return "{}"
	}
	return string(append(a.buf, '}'))
}
