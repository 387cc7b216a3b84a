// Package orders is the exchange's domain and nothing else: orders, place
// commands and the rules they keep, ORD ids, exact amounts, instrument rules,
// the funds rule, API key hashing, and the errors the adapters report in. It
// does no I/O and imports no driver: postgres keeps its state, placement
// carries it through Redis, and both speak in its types.
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
// tells clients what each one means. A final status comes from the orders
// table (History); the others are derived from the queue by statusOf.
type Status string

const (
	// StatusPending: admitted and waiting for a worker, including between
	// retries.
	StatusPending Status = "pending"
	// StatusActive: a worker holds the order right now.
	StatusActive Status = "active"
	// StatusAccepted: a worker took the order and finished with it, and no
	// settlement is recorded for it. Kept so clients that learned it keep
	// working: settlement writes the orders row before it completes the job,
	// so a settling worker's orders go from active straight to settled or
	// rejected, and only a job finished by a worker that predates settlement
	// still shows it.
	StatusAccepted Status = "accepted"
	StatusSettled  Status = "settled"
	StatusRejected Status = "rejected"
	StatusCanceled Status = "canceled"
	// StatusFailed: the queue gave up on the order after its attempts failed
	// (a dead job). An operator may requeue it, which makes it pending again.
	StatusFailed Status = "failed"
)

// Final reports whether the status is one the orders table records: the
// order will never change again.
func (s Status) Final() bool {
	return s == StatusSettled || s == StatusRejected || s == StatusCanceled
}

// RejectReason says why settlement refused an order: one of the Reason*
// values settlement writes to the orders table.
type RejectReason string

// Order is an admitted order. Its JSON form is both the queue job's payload
// and the API's order body; the settlement fields are empty in a payload and
// filled only from the orders table.
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
	// CanceledAt is set only in status canceled: the queue's clock when the
	// cancel took effect.
	CanceledAt *time.Time `json:"canceled_at,omitempty"`
	// RejectReason is set only in status rejected.
	RejectReason RejectReason `json:"reject_reason,omitempty"`
	// FillPrice, FillQuantity and FillNotional (FillPrice × FillQuantity, in
	// the quote asset) are set only in status settled.
	FillPrice    *decimal.Decimal `json:"fill_price,omitempty"`
	FillQuantity *decimal.Decimal `json:"fill_quantity,omitempty"`
	FillNotional *decimal.Decimal `json:"fill_notional,omitempty"`
	// FinishedAt is when the order reached its final status; set only in a
	// final status (for a canceled order it equals CanceledAt).
	FinishedAt *time.Time `json:"finished_at,omitempty"`
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
