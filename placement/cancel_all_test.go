package placement_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/lua"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestCancelAllRecordsWhatItWithdrewBeforeRedisFailed: the reply of the
// queue's second run is lost. CancelAll still writes the rows of the first
// run's orders and answers them in a *PartialCancelError that is
// unavailable; the lost run's orders are canceled in the queue, and a read
// of one records it; a second CancelAll cancels the rest.
func TestCancelAllRecordsWhatItWithdrewBeforeRedisFailed(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	server := testserver.SingleRedis(t, "a proxy before it loses a reply")
	proxy := testserver.StartProxy(t, server.Addr)
	client, err := emq.Dial(ctx, "redis://"+proxy.Addr(server.Addr)+"/0?read_timeout=500ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	if err := server.Client(t).ScriptLoad(ctx, lua.CancelAll).Err(); err != nil {
		t.Fatal(err)
	}
	db := migratedPool(t)
	account, err := postgres.NewAccounts(db).Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	queue := queues.For("BTC-USD")
	placer := placement.NewPlacer(queues, placement.WithHistory(postgres.NewOrders(postgres.NewHistory(db), postgres.NewSettler(db, nil, nil))))
	if err := placer.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 600 {
		placed, err := placer.Place(ctx, orders.PlaceCommand{
			Account: account, ClientOrderID: fmt.Sprintf("c-%03d", i), Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit,
			Quantity: decimal.MustParse("0.01"), Price: decimal.MustParse("50000"),
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, placed.Order.ID)
	}
	// The first run withdraws the head of the lane and answers cursor "l";
	// the reply of the run sent with it is lost.
	fault := proxy.DropReply("\r\n$1\r\nl\r\n")

	canceled, err := placer.CancelAll(ctx, account, "")
	var partial *placement.PartialCancelError
	if !errors.As(err, &partial) || !errors.Is(err, orders.ErrUnavailable) || canceled != nil {
		t.Fatalf("CancelAll = %d orders, %v; want a partial, unavailable failure", len(canceled), err)
	}
	if fault.Seen() != 1 {
		t.Errorf("the second run was sent %d times, want once", fault.Seen())
	}
	first := len(partial.Canceled)
	var got []string
	for _, order := range partial.Canceled {
		got = append(got, order.ID)
	}
	if first == 0 || !slices.Equal(got, ids[:first]) || len(partial.Unconfirmed) != 0 {
		t.Fatalf("canceled %d orders (%d unconfirmed); want the first run's, the head of the lane", first, len(partial.Unconfirmed))
	}
	t.Logf("the first run canceled %d orders", first)
	history := postgres.NewHistory(db)
	for _, id := range ids[:first] {
		if order, err := history.Order(ctx, account, id); err != nil || order.Status != orders.StatusCanceled {
			t.Fatalf("%s: %s, %v; want its canceled row", id, order.Status, err)
		}
	}
	// The lost run withdrew the next ones: canceled in the queue, without
	// a row until a read writes it.
	lost := 0
	for _, id := range ids[first:] {
		job, err := queue.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if job.State == emq.StateCanceled {
			lost++
			if order, err := placer.Order(ctx, account, id); err != nil || order.Status != orders.StatusCanceled {
				t.Errorf("read of %s: %s, %v; want canceled", id, order.Status, err)
			}
		}
	}
	if lost == 0 {
		t.Error("the lost run withdrew nothing")
	}
	canceled, err = placer.CancelAll(ctx, account, "")
	if err != nil || len(canceled) != len(ids)-first-lost {
		t.Fatalf("second CancelAll = %d orders, %v; want the %d left", len(canceled), err, len(ids)-first-lost)
	}
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'canceled'`, ids).Scan(&rows); err != nil || rows != len(ids) {
		t.Errorf("%d canceled rows, %v; want %d", rows, err, len(ids))
	}
	if n, err := queue.Pending(ctx); err != nil || n != 0 {
		t.Errorf("%d pending, %v; want none", n, err)
	}
}
