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
// tells clients what each one means. pending, active and failed come from
// the queue (placement's statusOf); every other status from the orders
// table, which holds an order from the moment a worker took it.
type Status string

const (
	// StatusPending: admitted and waiting for a worker, including between
	// retries.
	StatusPending Status = "pending"
	// StatusActive: a worker holds the order right now.
	StatusActive Status = "active"
	// StatusAccepted: a worker took the order and finished with it, and the
	// orders table has no row of it: only a job finished by a worker that
	// predates settlement shows it. Kept so clients that learned it keep
	// working.
	StatusAccepted Status = "accepted"
	// StatusOpen: resting in the book, nothing filled.
	StatusOpen Status = "open"
	// StatusPartiallyFilled: resting in the book, part filled.
	StatusPartiallyFilled Status = "partially_filled"
	// StatusFilled: filled whole.
	StatusFilled Status = "filled"
	// StatusCanceled: by its client, or its remainder by the market (an IOC,
	// FOK or market remainder, self-trade prevention: CancelReason says
	// which); it may have filled in part before.
	StatusCanceled Status = "canceled"
	// StatusRejected: nothing happened (RejectReason says why).
	StatusRejected Status = "rejected"
	// StatusFailed: the queue gave up on the order after its attempts failed
	// (a dead job). An operator may requeue it, which makes it pending again.
	StatusFailed Status = "failed"
)

// Final reports whether the order will never change again.
func (s Status) Final() bool {
	return s == StatusFilled || s == StatusRejected || s == StatusCanceled
}

// Resting reports whether the order rests in the book.
func (s Status) Resting() bool { return s == StatusOpen || s == StatusPartiallyFilled }

// RejectReason says why settlement refused an order: one of the Reason*
// values settlement writes to the orders table.
type RejectReason string

// Order is an admitted order. Its JSON form is both the queue job's payload
// and the API's order body; the fields a worker decides are empty in a
// payload and filled only from the orders table.
type Order struct {
	ID            string           `json:"id"`
	ClientOrderID string           `json:"client_order_id"`
	Account       string           `json:"account_id"`
	Symbol        string           `json:"symbol"`
	Side          Side             `json:"side"`
	Type          OrderType        `json:"type"`
	TimeInForce   TimeInForce      `json:"time_in_force"`
	PostOnly      bool             `json:"post_only,omitempty"`
	Quantity      decimal.Decimal  `json:"quantity"`
	Price         *decimal.Decimal `json:"price,omitempty"`
	Status        Status           `json:"status"`
	CreatedAt     time.Time        `json:"created_at"`
	// CanceledAt is set only in status canceled: when the cancel took effect.
	CanceledAt *time.Time `json:"canceled_at,omitempty"`
	// CancelReason is set only in status canceled, when the market (not
	// the client) canceled the order or its remainder.
	CancelReason CancelReason `json:"cancel_reason,omitempty"`
	// RejectReason is set only in status rejected.
	RejectReason RejectReason `json:"reject_reason,omitempty"`
	// DuplicateOf is set when another order of the account holds this
	// one's client order id (reject reason duplicate_client_order_id, or
	// canceled on the queue): the order that happened.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// FilledQuantity, RemainingQuantity and Fees (in the quote asset) are
	// set once a worker took the order; AverageFillPrice once it filled.
	FilledQuantity    *decimal.Decimal `json:"filled_quantity,omitempty"`
	RemainingQuantity *decimal.Decimal `json:"remaining_quantity,omitempty"`
	AverageFillPrice  *decimal.Decimal `json:"average_fill_price,omitempty"`
	Fees              *decimal.Decimal `json:"fees,omitempty"`
	// FinishedAt is when the order reached its final status.
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
