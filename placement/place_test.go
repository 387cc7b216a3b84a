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

// A rate-limited placement takes its permit in the admission: past the burst
// the order is refused as rate limited (not as an outage) and not admitted,
// and a replay spends a permit. TakePermit draws on a bucket of the same
// name on its limits shard, not the instrument's: another slot.
func TestPlaceWithRateLimit(t *testing.T) {
	placer, queue, _ := placerOnRedis(t)
	ctx := context.Background()
	limit := placement.WithRateLimit("key-1", placement.Rate{Capacity: 3, PerSecond: 1})
	command := func(clientOrderID string) orders.PlaceCommand {
		return orders.PlaceCommand{
			Account: "acct-1", ClientOrderID: clientOrderID, Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit,
			Quantity: decimal.MustParse("0.01"), Price: decimal.MustParse("50000"),
		}
	}
	first, err := placer.Place(ctx, command("c-1"), limit)
	if err != nil || first.Replayed || first.Take == nil || first.Take.Remaining != 2 {
		t.Fatalf("first placement: %+v, %v; want admitted with 2 permits left", first, err)
	}
	replay, err := placer.Place(ctx, command("c-1"), limit)
	if err != nil || !replay.Replayed || replay.Order.ID != first.Order.ID || replay.Take == nil || replay.Take.Remaining != 1 {
		t.Fatalf("replay: %+v, %v; want the first order with 1 permit left", replay, err)
	}
	if take, err := placer.TakePermit(ctx, "key-1", placement.Rate{Capacity: 3, PerSecond: 1}); err != nil || !take.Allowed || take.Remaining != 2 {
		t.Fatalf("take: %+v, %v; want the first permit of the limits shard's bucket", take, err)
	}
	if last, err := placer.Place(ctx, command("c-2"), limit); err != nil || last.Take == nil || last.Take.Remaining != 0 {
		t.Fatalf("third placement: %+v, %v; want admitted with the last permit", last, err)
	}
	_, err = placer.Place(ctx, command("c-3"), limit)
	var limited *emq.RateLimitedError
	if !errors.As(err, &limited) || errors.Is(err, orders.ErrUnavailable) || limited.Take.RetryAfter <= 0 {
		t.Fatalf("placement past the burst: %v, want a *emq.RateLimitedError with a retry time, not ErrUnavailable", err)
	}
	var refused *placement.RateLimitedError
	if !errors.As(err, &refused) || refused.Take != placement.Take(limited.Take) || refused.Bucket != limited.Bucket {
		t.Fatalf("placement past the burst: %v, want a *placement.RateLimitedError with the queue's take", err)
	}
	if pending, err := queue.Pending(ctx); err != nil || pending != 2 {
		t.Errorf("pending %d, %v; want the two orders admitted", pending, err)
	}
	// Without the option nothing is limited.
	unlimited, err := placer.Place(ctx, command("c-3"))
	if err != nil || unlimited.Take != nil {
		t.Errorf("placement without a rate limit: %+v, %v", unlimited, err)
	}
}

// Admission appends nothing to the account's log: the order's queue is on
// its instrument's Redis slot, the log on another, so the order.accepted
// event comes with the order's first row (postgres.RenderEvents).
func TestPlaceAppendsNoEvent(t *testing.T) {
	testserver.Parallel(t)
	placer, queue, _ := placerOnRedis(t)
	ctx := context.Background()
	command := orders.PlaceCommand{
		Account: "acct-1", ClientOrderID: "c-1", Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit,
		Quantity: decimal.MustParse("0.01"), Price: decimal.MustParse("50000"),
	}
	if _, err := placer.Place(ctx, command); err != nil {
		t.Fatal(err)
	}
	if events, err := queue.ReadLog(ctx, "acct-1", 0, 10); err != nil || len(events) != 0 {
		t.Errorf("the account's log on the order's queue: %v, %v", events, err)
	}
}
