package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestStaleOwnerCannotDecideACancelAsNothing: an owner fenced in
// PostgreSQL (a newer owner took the instrument over and rested an order
// since) still holds a job of a cancel of that order (two workers working
// one queue is what the fence is for). Its book lacks the order, so it
// decides the cancel as nothing; the batch writes nothing, yet it must
// pass the fence before it is answered, or the job completes with the
// order still open and the gateway's retries find that done job under the
// cancel's dedup key. The stale owner is refused (ErrFenced), the cancel
// and the cancel-all alike.
func TestStaleOwnerCannotDecideACancelAsNothing(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	stale := owner(t, m, "BTC-USD", 1)
	fresh := owner(t, m, "BTC-USD", 2)
	ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "51000")
	if err := fresh.Settle(ctx, ask, 1); err != nil {
		t.Fatal(err)
	}
	got, err := stale.Command(ctx, "CMD_1", cancelOf(m.alice, ask.ID), 1)
	if !errors.Is(err, postgres.ErrFenced) {
		t.Errorf("the fenced owner decided the cancel: %+v, %v; want ErrFenced", got, err)
	}
	if row := mustOrder(t, m.db, ask.ID); row.status != "open" {
		t.Fatalf("the ask is %s", row.state())
	}
	all, err := stale.Command(ctx, "CMD_2", orders.Command{Kind: orders.CommandCancelAll, Account: m.alice, Symbol: "BTC-USD"}, 1)
	if !errors.Is(err, postgres.ErrFenced) {
		t.Errorf("the fenced owner decided the cancel-all: %+v, %v; want ErrFenced", all, err)
	}
}
