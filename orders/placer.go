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
	return fmt.Sprintf("orders: order %s is %s; only a pending order can be canceled", e.OrderID, e.Status)
}

func (e *NotCancelableError) Unwrap() error { return ErrNotCancelable }

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
	return orderOf(job)
}

// orderOf reads the order a job carries and its status from the job's state.
func orderOf(job emq.JobInfo) (Order, error) {
	var order Order
	if err := json.Unmarshal(job.Payload, &order); err != nil {
		return Order{}, fmt.Errorf("orders: decode order %s: %w", job.ID, err)
	}
	status, known := statusOf(job.State)
	if !known {
		return Order{}, fmt.Errorf("orders: order %s is in queue state %q, which no order status stands for", job.ID, job.State)
	}
	order.Status = status
	if status == StatusCanceled && !job.Finished.IsZero() {
		canceled := job.Finished
		order.CanceledAt = &canceled
	}
	return order, nil
}

// Cancel withdraws the account's order while it is pending and returns it in
// status canceled. An order a worker holds or that is final is refused with a
// *NotCancelableError naming its status (canceling twice is refused too: the
// second call finds it canceled). Another account's order is ErrNotFound,
// exactly as in Order.
func (p *Placer) Cancel(ctx context.Context, account, id string) (Order, error) {
	order, err := p.Order(ctx, account, id)
	if err != nil {
		return Order{}, err
	}
	err = p.queue.Cancel(ctx, id)
	switch {
	case errors.Is(err, emq.ErrState):
		return Order{}, p.notCancelable(ctx, account, id, err)
	case errors.Is(err, emq.ErrNotFound):
		// Its finished record was trimmed between the read and the cancel.
		return Order{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	case err != nil:
		return Order{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	canceled, err := p.Order(ctx, account, id)
	if err != nil {
		// The cancel took effect; failing the call now would make the client
		// retry into a 409. Only the cancel time is lost.
		order.Status = StatusCanceled
		return order, nil
	}
	return canceled, nil
}

// notCancelable turns the queue's refusal into the order status that caused
// it. The refusal names the job's state at the moment it was refused, except
// for a finished job, whose record tells whether it was accepted or canceled.
func (p *Placer) notCancelable(ctx context.Context, account, id string, refusal error) error {
	state, ok := emq.StateOf(refusal)
	if !ok {
		return fmt.Errorf("orders: cancel %s: %w", id, refusal)
	}
	// cancel.lua says "finished" for a job only its finished record holds.
	if state == "finished" {
		final, err := p.Order(ctx, account, id)
		if err != nil {
			return err
		}
		return &NotCancelableError{OrderID: id, Status: final.Status}
	}
	status, known := statusOf(state)
	if !known || status == StatusPending {
		return fmt.Errorf("orders: cancel %s refused in queue state %q: %w", id, state, refusal)
	}
	return &NotCancelableError{OrderID: id, Status: status}
}

// statusOf maps a queue state to what a client sees. A job waiting out a
// retry backoff is still pending to the client: nothing holds it and it can
// still be canceled. A finished job is accepted, since until settlement lands
// a worker only takes orders. A dead job is failed, not rejected: the
// exchange gave up on it, the order itself was never refused.
func statusOf(state string) (Status, bool) {
	switch state {
	case emq.StatePending, emq.StateDelayed:
		return StatusPending, true
	case emq.StateActive:
		return StatusActive, true
	case emq.StateDone:
		return StatusAccepted, true
	case emq.StateCanceled:
		return StatusCanceled, true
	case emq.StateDead:
		return StatusFailed, true
	}
	return "", false
}
