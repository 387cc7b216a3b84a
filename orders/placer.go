package orders

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ordergate/ordergate/emq"
)

// Queue is the name of the queue orders are admitted to; its keys live under
// the {orders} hash tag.
const Queue = "orders"

// KindPlace is the job kind of an order to settle.
const KindPlace = "order.place"

// Errors of placing and reading orders.
var (
	// ErrNotFound: no order with that id is visible to the account.
	ErrNotFound = errors.New("orders: order not found")
	// ErrConflict: the client order id was used for a different request.
	ErrConflict = errors.New("orders: client order id used for a different order")
	// ErrUnavailable: a dependency (Redis, PostgreSQL) did not answer.
	ErrUnavailable = errors.New("orders: a dependency is unavailable")
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

// Placer admits orders onto the orders queue and reads them back.
type Placer struct {
	queue     *emq.Queue
	retention time.Duration
}

// NewPlacer admits onto queue; a client order id is held for retention
// (emq.DefaultDedupRetention when zero).
func NewPlacer(queue *emq.Queue, retention time.Duration) *Placer {
	if retention <= 0 {
		retention = emq.DefaultDedupRetention
	}
	return &Placer{queue: queue, retention: retention}
}

// Declare registers the order job kind on the queue; call once at start.
func (p *Placer) Declare(ctx context.Context) error {
	if err := p.queue.Declare(ctx, KindPlace); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Place mints an ORD id and admits the order in one script run. A command
// whose client order id the account used before returns the first order and
// replayed=true when it is the same request, or a *ConflictError when not.
func (p *Placer) Place(ctx context.Context, cmd PlaceCommand) (order Order, replayed bool, err error) {
	id := NewOrderID()
	created, _ := ParseOrderID(id)
	order = Order{
		ID:            id,
		ClientOrderID: cmd.ClientOrderID,
		Account:       cmd.Account,
		Symbol:        cmd.Symbol,
		Side:          cmd.Side,
		Type:          cmd.Type,
		Quantity:      cmd.Quantity,
		Status:        StatusPending,
		CreatedAt:     created,
	}
	if cmd.Type == Limit {
		price := cmd.Price
		order.Price = &price
	}
	payload, err := json.Marshal(order)
	if err != nil {
		return Order{}, false, fmt.Errorf("orders: encode order %s: %w", id, err)
	}
	fingerprint := cmd.Fingerprint()
	admission, err := p.queue.Admit(ctx, emq.Job{
		ID:             id,
		Kind:           KindPlace,
		Group:          cmd.Account,
		Payload:        payload,
		DedupKey:       cmd.Account + ":" + cmd.ClientOrderID,
		Fingerprint:    fingerprint,
		DedupRetention: p.retention,
	})
	if err != nil {
		return Order{}, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if !admission.Duplicate {
		return order, false, nil
	}
	if admission.Fingerprint != fingerprint {
		return Order{}, false, &ConflictError{ClientOrderID: cmd.ClientOrderID, OrderID: admission.ID}
	}
	first, err := p.Order(ctx, cmd.Account, admission.ID)
	if err != nil {
		return Order{}, false, err
	}
	return first, true, nil
}

// Order returns the account's order with the id. Another account's order is
// ErrNotFound, exactly like a missing one, so ids leak nothing.
func (p *Placer) Order(ctx context.Context, account, id string) (Order, error) {
	if _, err := ParseOrderID(id); err != nil {
		return Order{}, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	job, err := p.queue.Job(ctx, id)
	if errors.Is(err, emq.ErrNotFound) {
		return Order{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if job.Kind != KindPlace || job.Group != account {
		return Order{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	var order Order
	if err := json.Unmarshal(job.Payload, &order); err != nil {
		return Order{}, fmt.Errorf("orders: decode order %s: %w", id, err)
	}
	order.Status = statusOf(job.State)
	return order, nil
}

// statusOf maps a queue state to what a client sees: a job waiting for a retry
// is still pending to the client.
func statusOf(state string) Status {
	switch state {
	case emq.StateActive:
		return StatusActive
	case emq.StateCanceled:
		return StatusCanceled
	default:
		return StatusPending
	}
}
