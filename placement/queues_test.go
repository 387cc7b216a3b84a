package placement_test

import (
	"context"
	"errors"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// Each instrument's orders are admitted onto its own queue, declared at its
// first placement; a look-up by id and a cancel find the order on its
// instrument's queue; a client order id is held per account and instrument.
func TestOrdersOfEachInstrumentOnTheirOwnQueue(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	client, err := emq.Connect(ctx, testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	placer := placement.NewPlacer(queues) // nothing declared: the first placement declares
	command := func(symbol, price string) orders.PlaceCommand {
		return orders.PlaceCommand{Account: "acct-1", ClientOrderID: "c-1", Symbol: symbol, Side: orders.Buy,
			Type: orders.Limit, Quantity: decimal.MustParse("0.1"), Price: decimal.MustParse(price)}
	}
	btc, err := placer.Place(ctx, command("BTC-USD", "50000"))
	if err != nil {
		t.Fatal(err)
	}
	eth, err := placer.Place(ctx, command("ETH-USD", "3000"))
	if err != nil || eth.Replayed {
		t.Fatalf("the same client order id on another instrument: %+v, %v; want admitted", eth, err)
	}
	for symbol, id := range map[string]string{"BTC-USD": btc.Order.ID, "ETH-USD": eth.Order.ID} {
		queue := queues.For(symbol)
		if queue.Name() != orders.InstrumentQueue(symbol) {
			t.Errorf("%s's queue is %s", symbol, queue.Name())
		}
		if pending, err := queue.Pending(ctx); err != nil || pending != 1 {
			t.Errorf("%s: %d pending, %v; want its one order", symbol, pending, err)
		}
		order, err := placer.Order(ctx, "acct-1", id)
		if err != nil || order.Symbol != symbol || order.Status != orders.StatusPending {
			t.Errorf("GET %s: %+v, %v", id, order, err)
		}
	}
	canceled, err := placer.Cancel(ctx, "acct-1", eth.Order.ID)
	if err != nil || canceled.Status != orders.StatusCanceled {
		t.Fatalf("cancel: %+v, %v", canceled, err)
	}
	if pending, err := queues.For("ETH-USD").Pending(ctx); err != nil || pending != 0 {
		t.Errorf("ETH-USD: %d pending after the cancel, %v", pending, err)
	}
	if pending, err := queues.For("BTC-USD").Pending(ctx); err != nil || pending != 1 {
		t.Errorf("BTC-USD: %d pending after ETH-USD's cancel, %v", pending, err)
	}
	if _, err := placer.Order(ctx, "acct-1", orders.NewOrderID()); !errorsIsNotFound(err) {
		t.Errorf("an unknown id: %v, want not found", err)
	}
}

func errorsIsNotFound(err error) bool { return errors.Is(err, orders.ErrNotFound) }
