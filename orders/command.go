package orders

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
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
	Quantity      decimal.Decimal
	// Price is zero for market orders.
	Price decimal.Decimal
}

// Fingerprint identifies the request: two commands with the same fingerprint
// are the same order, so a retry replays and a different request under the
// same client order id conflicts. Amounts count by value: 0.010 and 0.01 are
// one quantity.
func (c PlaceCommand) Fingerprint() string {
	price := ""
	if c.Type == Limit {
		price = c.Price.Trim(0).String()
	}
	canonical := strings.Join([]string{
		"place/1", c.Account, c.ClientOrderID, c.Symbol, string(c.Side), string(c.Type),
		c.Quantity.Trim(0).String(), price,
	}, "\x00")
	sum := sha256.Sum256([]byte(canonical))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

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
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + " " + f.Reason
	}
	return fmt.Sprintf("orders: invalid place command: %s", strings.Join(parts, "; "))
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }
