// Package orders is the exchange's domain: place commands and their rules,
// ORD ids, admission of orders onto the queue, accounts and API keys, and the
// ledger that moves money.
package orders

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/govalues/decimal"
	"github.com/oklog/ulid/v2"
)

// Side of an order.
type Side string

const (
	Buy  Side = "buy"
	Sell Side = "sell"
)

// OrderType says how an order is priced.
type OrderType string

const (
	// Limit orders fill at their own price.
	Limit OrderType = "limit"
	// Market orders fill at the instrument's reference price.
	Market OrderType = "market"
)

// Status of an order as clients see it. api/openapi.yaml (OrderStatus)
// tells clients what each one means; statusOf derives it from the queue.
type Status string

const (
	// StatusPending: admitted and waiting for a worker, including between
	// retries.
	StatusPending Status = "pending"
	// StatusActive: a worker holds the order right now.
	StatusActive Status = "active"
	// StatusAccepted: a worker took the order and finished with it, and no
	// settlement is recorded for it yet.
	StatusAccepted Status = "accepted"
	StatusSettled  Status = "settled"
	StatusRejected Status = "rejected"
	StatusCanceled Status = "canceled"
	// StatusFailed: the queue gave up on the order after its attempts failed
	// (a dead job). An operator may requeue it, which makes it pending again.
	StatusFailed Status = "failed"
)

// Order is an admitted order. Its JSON form is both the queue job's payload
// and the API's order body.
type Order struct {
	ID            string           `json:"id"`
	ClientOrderID string           `json:"client_order_id"`
	Account       string           `json:"account_id"`
	Symbol        string           `json:"symbol"`
	Side          Side             `json:"side"`
	Type          OrderType        `json:"type"`
	Quantity      decimal.Decimal  `json:"quantity"`
	Price         *decimal.Decimal `json:"price,omitempty"`
	Status        Status           `json:"status"`
	CreatedAt     time.Time        `json:"created_at"`
	// CanceledAt is set only in status canceled, from the queue's clock.
	CanceledAt *time.Time `json:"canceled_at,omitempty"`
}

const orderIDPrefix = "ORD_"

// NewOrderID mints an ORD_<ULID> id. ULIDs sort by minting time, so ids of one
// account's orders order the way they were accepted.
func NewOrderID() string {
	return orderIDPrefix + ulid.MustNew(ulid.Now(), entropy).String()
}

// entropy is shared by all goroutines; ulid.Monotonic is not safe for
// concurrent use, so ids take their randomness straight from crypto/rand.
var entropy = rand.Reader

// ErrMalformedID: the string is not an ORD id.
var ErrMalformedID = errors.New("orders: malformed order id")

// ParseOrderID checks an ORD id and returns it with the time it was minted.
func ParseOrderID(id string) (time.Time, error) {
	raw, found := strings.CutPrefix(id, orderIDPrefix)
	if !found || len(raw) != ulid.EncodedSize {
		return time.Time{}, fmt.Errorf("%w: %q", ErrMalformedID, id)
	}
	parsed, err := ulid.ParseStrict(raw)
	if err != nil || parsed.String() != raw {
		return time.Time{}, fmt.Errorf("%w: %q", ErrMalformedID, id)
	}
	return ulid.Time(parsed.Time()).UTC(), nil
}
