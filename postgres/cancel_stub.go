package postgres

// TEMPORARY STUB (market-api branch): the settlement rewrite implements
// CancelResting and CancelAllResting (under the instrument's lock,
// releasing the hold). These stand in so placement.History is satisfied
// until it lands; the integrator deletes this file.

import (
	"context"
	"errors"

	"github.com/ordergate/ordergate/orders"
)

// errCancelRestingStub: the stub was called.
var errCancelRestingStub = errors.New("orders: canceling resting orders is not implemented yet (postgres/cancel_stub.go)")

// CancelResting is a stub; see the file's comment.
func (h *History) CancelResting(ctx context.Context, account, id string) (orders.Order, error) {
	return orders.Order{}, errCancelRestingStub
}

// CancelAllResting is a stub; see the file's comment.
func (h *History) CancelAllResting(ctx context.Context, account, symbol string) ([]orders.Order, error) {
	return nil, errCancelRestingStub
}
