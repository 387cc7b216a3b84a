package placement_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// restingMeanwhile is a History whose first read finds no row while a worker
// takes the job, rests the order and completes the job: the queue's cancel
// then fails, and the order is resting, so still cancelable, in the book.
type restingMeanwhile struct {
	queue        *emq.Queue
	order        orders.Order
	reads        int
	bookCanceled bool
}

func (h *restingMeanwhile) Order(ctx context.Context, account, id string) (orders.Order, error) {
	h.reads++
	if h.reads == 1 {
		claims, _ := h.queue.Claim(ctx, 1, time.Minute)
		_ = h.queue.Complete(ctx, claims[0].ID, claims[0].Token)
		return orders.Order{}, orders.ErrNotFound
	}
	o := h.order
	o.Status = orders.StatusOpen
	return o, nil
}

func (h *restingMeanwhile) List(context.Context, string, orders.ListQuery) (orders.Page, error) {
	return orders.Page{}, nil
}

func (h *restingMeanwhile) RecordCanceled(context.Context, orders.Order) (orders.Status, error) {
	return orders.StatusCanceled, nil
}

func (h *restingMeanwhile) RecordAllCanceled(_ context.Context, list []orders.Order) ([]orders.Order, error) {
	return list, nil
}

func (h *restingMeanwhile) CancelResting(ctx context.Context, account, id string) (orders.Order, error) {
	h.bookCanceled = true
	o := h.order
	o.Status = orders.StatusCanceled
	return o, nil
}

func (h *restingMeanwhile) CancelAllResting(context.Context, string, string) ([]orders.Order, error) {
	return nil, nil
}

func (h *restingMeanwhile) RestingOrders(context.Context, string, string) ([]orders.Order, error) {
	return nil, nil
}

func (h *restingMeanwhile) Orders(context.Context, string, []string) ([]orders.Order, error) {
	return nil, nil
}

// An order a worker rests between the cancel's read and the queue's cancel
// is canceled in the book, not refused as if it could no longer be.
func TestCancelOfAnOrderThatCameToRestMeanwhile(t *testing.T) {
	testserver.Parallel(t)
	bare, queue, _ := placerOnRedis(t)
	const account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"
	order := placeOrder(t, bare, account, "race")
	history := &restingMeanwhile{queue: queue, order: order}
	placer := placement.NewPlacer(bare.Queues(), placement.WithHistory(history))
	got, err := placer.Cancel(context.Background(), account, order.ID)
	if err != nil || got.Status != orders.StatusCanceled || !history.bookCanceled {
		t.Fatalf("cancel: %s, %v (canceled in the book: %v); want canceled through CancelResting", got.Status, err, history.bookCanceled)
	}
}

// settledMeanwhile is a History whose first read finds no row while a worker
// settles the order and meanwhile does to the queue what it is given: every
// later read finds the order filled.
type settledMeanwhile struct {
	restingMeanwhile
	meanwhile func(context.Context, *emq.Queue) error
}

func (h *settledMeanwhile) Order(ctx context.Context, account, id string) (orders.Order, error) {
	h.reads++
	if h.reads == 1 {
		if err := h.meanwhile(ctx, h.queue); err != nil {
			return orders.Order{}, err
		}
		return orders.Order{}, orders.ErrNotFound
	}
	o := h.order
	o.Status = orders.StatusFilled
	return o, nil
}

// completing is a worker completing the order's job; forgetting, the queue
// losing its record (trimmed, or a failover).
func completing(ctx context.Context, queue *emq.Queue) error {
	claims, err := queue.Claim(ctx, 1, time.Minute)
	if err != nil || len(claims) != 1 {
		return fmt.Errorf("claim: %v, %v", claims, err)
	}
	return queue.Complete(ctx, claims[0].ID, claims[0].Token)
}

func forgetting(ctx context.Context, queue *emq.Queue) error { return queue.Purge(ctx) }

// TestGetOfAnOrderSettledMeanwhile: a GET whose first read finds no row
// while the order settles answers the row (filled), whether its job was
// completed meanwhile (not the queue's accepted) or the queue forgot it
// (not 404).
func TestGetOfAnOrderSettledMeanwhile(t *testing.T) {
	testserver.Parallel(t)
	for _, tc := range []struct {
		name      string
		meanwhile func(context.Context, *emq.Queue) error
	}{
		{"its job completed", completing},
		{"the queue forgot it", forgetting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bare, queue, _ := placerOnRedis(t)
			const account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"
			order := placeOrder(t, bare, account, "race")
			history := &settledMeanwhile{restingMeanwhile: restingMeanwhile{queue: queue, order: order}, meanwhile: tc.meanwhile}
			placer := placement.NewPlacer(bare.Queues(), placement.WithHistory(history))
			got, err := placer.Order(context.Background(), account, order.ID)
			if err != nil || got.Status != orders.StatusFilled {
				t.Fatalf("GET: %s, %v; want filled, as the row settled meanwhile says", got.Status, err)
			}
		})
	}
}
