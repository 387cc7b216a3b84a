package orders

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"

	"github.com/govalues/decimal"
)

// PlaceCommand is a validated request to place one order for one account.
type PlaceCommand struct {
	Account       string
	ClientOrderID string
	Symbol        string
	Side          Side
	Type          OrderType
	// TimeInForce is empty for the default: gtc for a limit order, ioc
	// (the only one allowed) for a market order.
	TimeInForce TimeInForce
	// PostOnly: a limit gtc order that must rest; one that would take is
	// rejected.
	PostOnly bool
	Quantity decimal.Decimal
	// Price is zero for market orders.
	Price decimal.Decimal
}

// TimeInForceOrDefault is the command's time in force, its default when empty.
func (c PlaceCommand) TimeInForceOrDefault() TimeInForce {
	return defaultTimeInForce(c.Type, c.TimeInForce)
}

// defaultTimeInForce fills in an empty time in force: gtc for a limit
// order, ioc for a market order.
func defaultTimeInForce(typ OrderType, tif TimeInForce) TimeInForce {
	switch {
	case tif != "":
		return tif
	case typ == Market:
		return IOC
	}
	return GTC
}

// Fingerprint identifies the request: two commands with the same fingerprint
// are the same order, so a retry replays and a different request under the
// same client order id conflicts. Amounts count by value: 0.010 and 0.01 are
// one quantity.
func (c PlaceCommand) Fingerprint() string {
	// Fingerprints are stored to recognise retries across deploys, so these
	// bytes must never change: NUL-separated fields, amounts with trailing
	// zeros trimmed, and no price unless the order is a limit order.
	// fingerprintBufSize covers usual commands without a heap buffer.
	var buf [fingerprintBufSize]byte
	canonical := append(buf[:0], "place/1\x00"...)
	canonical = append(canonical, c.Account...)
	canonical = append(canonical, 0)
	canonical = append(canonical, c.ClientOrderID...)
	canonical = append(canonical, 0)
	canonical = append(canonical, c.Symbol...)
	canonical = append(canonical, 0)
	canonical = append(canonical, c.Side...)
	canonical = append(canonical, 0)
	canonical = append(canonical, c.Type...)
	canonical = append(canonical, 0)
	// AppendText of a Decimal cannot fail; it returns an error only to
	// satisfy encoding.TextAppender.
	canonical, _ = c.Quantity.Trim(0).AppendText(canonical)
	canonical = append(canonical, 0)
	if c.Type == Limit {
		canonical, _ = c.Price.Trim(0).AppendText(canonical)
	}
	// Fields added later are written only when they differ from what a
	// command meant before they existed, so old fingerprints still match.
	if tif := c.TimeInForceOrDefault(); tif != defaultTimeInForce(c.Type, "") {
		canonical = append(canonical, "\x00tif="...)
		canonical = append(canonical, tif...)
	}
	if c.PostOnly {
		canonical = append(canonical, "\x00post_only"...)
	}
	sum := sha256.Sum256(canonical)
	var encoded [fingerprintLen]byte
	base64.RawURLEncoding.Encode(encoded[:], sum[:fingerprintHashBytes])
	return string(encoded[:])
}

const (
	// fingerprintHashBytes of the SHA-256 are kept: 128 bits make an
	// accidental collision between two requests out of the question.
	fingerprintHashBytes = 16
	// fingerprintLen is the unpadded base64 length of fingerprintHashBytes.
	fingerprintLen = (fingerprintHashBytes*8 + 5) / 6
	// fingerprintBufSize holds the canonical form of a command whose ids
	// and symbol are of ordinary length.
	fingerprintBufSize = 256
)

// FieldError says why one field of an order request is refused. Field is the
// request's field name.
type FieldError struct {
	Field  string
	Reason string
}

// InvalidError lists every refused field of a place command.
type InvalidError struct{ Fields []FieldError }

// ErrInvalid matches every *InvalidError.
var ErrInvalid = errors.New("orders: invalid place command")

func (e *InvalidError) Error() string {
	return "orders: invalid place command: " + fieldList(e.Fields)
}

// fieldList is "field reason; field reason".
func fieldList(fields []FieldError) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f.Field + " " + f.Reason
	}
	return strings.Join(parts, "; ")
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }
