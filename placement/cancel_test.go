package placement_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// placerOnRedis is a Placer on a fresh Redis, and its queue for playing the
// worker.
func placerOnRedis(t testing.TB) (*placement.Placer, *emq.Queue, *testserver.QueueServer) {
	t.Helper()
	server := testserver.QueueRedisServer(t)
	client, err := emq.Connect(context.Background(), server.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	queue := queues.For("BTC-USD")
	placer := placement.NewPlacer(queues)
	if err := placer.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return placer, queue, server
}

func placeOrder(t testing.TB, placer *placement.Placer, account, clientOrderID string) orders.Order {
	t.Helper()
	placed, err := placer.Place(context.Background(), orders.PlaceCommand{
		Account: account, ClientOrderID: clientOrderID, Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit,
		Quantity: decimal.MustParse("0.01"), Price: decimal.MustParse("50000"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return placed.Order
}

// TestCancelByQueueState moves an order into each queue state as a worker
// would, then reads and cancels it: the status a client sees, and whether the
// cancel is refused with that status.
func TestCancelByQueueState(t *testing.T) {
	testserver.Parallel(t)
	placer, queue, _ := placerOnRedis(t)
	ctx := context.Background()
	const account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"
	claim := func(t *testing.T, id string) emq.Claim {
		t.Helper()
		claims, err := queue.Claim(ctx, 1, time.Minute)
		if err != nil || len(claims) != 1 || claims[0].ID != id {
			t.Fatalf("claim: %+v, %v; want order %s", claims, err, id)
		}
		return claims[0]
	}
	tests := []struct {
		name   string
		move   func(t *testing.T, id string)
		status orders.Status
		// refused is whether the cancel is refused with status.
		refused bool
	}{
		{"pending", func(*testing.T, string) {}, orders.StatusPending, false},
		{"delayed", func(t *testing.T, id string) {
			c := claim(t, id)
			if _, err := queue.Retry(ctx, id, c.Token, errors.New("try later"), emq.DefaultRetryPolicy); err != nil {
				t.Fatal(err)
			}
		}, orders.StatusPending, false},
		{"active", func(t *testing.T, id string) { claim(t, id) }, orders.StatusActive, true},
		{"done", func(t *testing.T, id string) {
			c := claim(t, id)
			if err := queue.Complete(ctx, id, c.Token); err != nil {
				t.Fatal(err)
			}
		}, orders.StatusAccepted, true},
		{"dead", func(t *testing.T, id string) {
			c := claim(t, id)
			if err := queue.Bury(ctx, id, c.Token, errors.New("poison")); err != nil {
				t.Fatal(err)
			}
		}, orders.StatusFailed, true},
		{"canceled", func(t *testing.T, id string) {
			if _, err := placer.Cancel(ctx, account, id); err != nil {
				t.Fatal(err)
			}
		}, orders.StatusCanceled, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case leaves nothing pending, so a claim takes this order.
			placed := placeOrder(t, placer, account, tt.name)
			tt.move(t, placed.ID)
			read, err := placer.Order(ctx, account, placed.ID)
			if err != nil || read.Status != tt.status {
				t.Fatalf("Order: status %q, %v; want %q", read.Status, err, tt.status)
			}

			canceled, err := placer.Cancel(ctx, account, placed.ID)
			if !tt.refused {
				if err != nil || canceled.Status != orders.StatusCanceled || canceled.CanceledAt == nil || canceled.ID != placed.ID {
					t.Fatalf("Cancel = %+v, %v; want the order canceled", canceled, err)
				}
				return
			}
			var refusal *orders.NotCancelableError
			if !errors.As(err, &refusal) || !errors.Is(err, orders.ErrNotCancelable) {
				t.Fatalf("Cancel error = %v, want a *NotCancelableError", err)
			}
			if refusal.OrderID != placed.ID || refusal.Status != tt.status {
				t.Errorf("refusal = %+v, want order %s in status %s", refusal, placed.ID, tt.status)
			}
		})
	}
}

func TestCancelHidesOtherAccountsOrdersAndReportsOutages(t *testing.T) {
	testserver.Parallel(t)
	placer, _, server := placerOnRedis(t)
	ctx := context.Background()
	const owner, other = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1", "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F2"
	placed := placeOrder(t, placer, owner, "mine")
	tests := []struct {
		name, account, id string
		want              error
	}{
		{"another account's order", other, placed.ID, orders.ErrNotFound},
		{"unknown id", owner, orders.NewOrderID(), orders.ErrNotFound},
		{"malformed id", owner, "not-an-id", orders.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := placer.Cancel(ctx, tt.account, tt.id); !errors.Is(err, tt.want) {
				t.Errorf("Cancel = %v, want %v", err, tt.want)
			}
		})
	}
	if read, err := placer.Order(ctx, owner, placed.ID); err != nil || read.Status != orders.StatusPending {
		t.Errorf("the owner's order: %+v, %v; want it pending", read, err)
	}
	server.Single(t, "stops Redis").Stop(t)
	if _, err := placer.Cancel(ctx, owner, placed.ID); !errors.Is(err, orders.ErrUnavailable) {
		t.Errorf("Cancel with Redis down = %v, want ErrUnavailable", err)
	}
}
