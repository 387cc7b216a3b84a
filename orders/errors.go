package orders

import (
	"errors"
	"fmt"
)

// Errors of placing and reading orders.
var (
	// ErrNotFound: no order with that id is visible to the account.
	ErrNotFound = errors.New("orders: order not found")
	// ErrConflict: the client order id was used for a different request.
	ErrConflict = errors.New("orders: client order id used for a different order")
	// ErrUnavailable: a dependency (Redis, PostgreSQL) did not answer.
	ErrUnavailable = errors.New("orders: a dependency is unavailable")
	// ErrNotCancelable: the order is held by a worker or is final.
	ErrNotCancelable = errors.New("orders: order can no longer be canceled")
)

// ConflictError names the order that holds the client order id.
type ConflictError struct {
	ClientOrderID string
	OrderID       string
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("orders: client order id %q is held by order %s with a different request", e.ClientOrderID, e.OrderID)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// NotCancelableError names the status that keeps an order from being
// canceled: only a pending order can be.
type NotCancelableError struct {
	OrderID string
	Status  Status
}

func (e *NotCancelableError) Error() string {
	return fmt.Sprintf("orders: order %s is %s; only a pending or resting order can be canceled", e.OrderID, e.Status)
}

func (e *NotCancelableError) Unwrap() error { return ErrNotCancelable }

// ErrCancelNotRecorded matches every *CancelNotRecordedError.
var ErrCancelNotRecorded = errors.New("orders: order canceled but its orders row was not written")

// CancelNotRecordedError: the queue canceled the order, so it will never be
// processed, but writing its canceled row failed. Order is the canceled
// order; the cancel stands, and the row is written again the next time the
// order is read (Placer.Order), so the caller should report success.
type CancelNotRecordedError struct {
	Order Order
	Err   error
}

func (e *CancelNotRecordedError) Error() string {
	return fmt.Sprintf("orders: order %s is canceled in the queue but its orders row was not written: %v", e.Order.ID, e.Err)
}

func (e *CancelNotRecordedError) Is(target error) bool { return target == ErrCancelNotRecorded }

func (e *CancelNotRecordedError) Unwrap() error { return e.Err }

// Errors of accounts and keys.
var (
	// ErrUnauthenticated: the API key is unknown or revoked.
	ErrUnauthenticated = errors.New("orders: API key unknown or revoked")
	// ErrNoAccount: no account has the id.
	ErrNoAccount = errors.New("orders: no such account")
	// ErrNoKey: no API key has the id, or it is revoked already.
	ErrNoKey = errors.New("orders: no such active API key")
	// ErrForbidden: the API key is valid but may not do what was asked
	// (MissingScopeError is one).
	ErrForbidden = errors.New("orders: the API key may not do this")
	// ErrSigningUnavailable: the API key's requests must be signed, and
	// this process cannot open the key's signing secret to verify them.
	ErrSigningUnavailable = errors.New("orders: the API key's signing secret cannot be opened here")
)

// MissingScopeError: the API key lacks a scope the request needs.
type MissingScopeError struct {
	Need, Have Scopes
}

func (e *MissingScopeError) Error() string {
	return fmt.Sprintf("orders: the API key has scope %s, the request needs %s", e.Have, e.Need)
}

func (e *MissingScopeError) Is(target error) bool { return target == ErrForbidden }

// ErrInvalidQuery: a ListQuery out of its bounds. The gateway checks queries
// before they get here, so this means a caller's bug, not a client's mistake.
var ErrInvalidQuery = errors.New("orders: invalid list query")

// ErrFunds: the balance to debit holds less than the amount.
var ErrFunds = errors.New("orders: insufficient funds")

// ErrAsset: no asset has the code, or the amount has more decimals than it allows.
var ErrAsset = errors.New("orders: unknown asset or amount off its scale")

// Why an order was rejected, as the orders table records it.
const (
	ReasonInstrumentHalted  = "instrument_halted"
	ReasonInsufficientFunds = "insufficient_funds"
	// ReasonPriceOutOfBand: the limit price lay outside the instrument's
	// band around its reference when the order settled.
	ReasonPriceOutOfBand = "price_out_of_band"
	// ReasonDuplicateClientOrderID: another order of the account holds its
	// client order id (a retry the queue admitted again after Redis lost
	// its dedup window); nothing of it happened.
	ReasonDuplicateClientOrderID = "duplicate_client_order_id"
)

// ErrMalformedOrder: a job's payload is not an order that can be settled.
// Settle returns it wrapped in emq.Permanent: no retry can fix a payload.
var ErrMalformedOrder = errors.New("orders: malformed order payload")
