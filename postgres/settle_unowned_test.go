package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestTheLockedPathRefusesAnOwnedInstrument: while an owner holds BTC-USD,
// a settler that is no owner refuses to write on it, alone or in a batch,
// with ErrOwned (SETTLEOWNED), and writes nothing: no order row, no balance
// moved, no outbox row. Its other instruments settle. Once the owner gives
// BTC-USD up, the locked path settles it again; a stale owner's GiveUp
// does not free an instrument a newer owner holds.
func TestTheLockedPathRefusesAnOwnedInstrument(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	stale := owner(t, m, "BTC-USD", 1)
	current := owner(t, m, "BTC-USD", 2)
	stale.GiveUp("BTC-USD") // fenced by the newer owner: frees nothing
	before, outboxBefore := balances(t, m.db), lastOutboxID(t, m.db)

	alone := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "50000")
	batch := []orders.Order{newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000"),
		newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")}
	err := m.settler.Settle(ctx, alone, 1)
	if !errors.Is(err, postgres.ErrOwned) || errors.Is(err, postgres.ErrUnsettleable) {
		t.Errorf("an order of an owned instrument on the locked path: %v; want ErrOwned, to retry", err)
	}
	if _, err := postgres.SettleTogether(ctx, m.settler, batch); !errors.Is(err, postgres.ErrOwned) {
		t.Errorf("a batch of an owned instrument on the locked path: %v; want ErrOwned", err)
	}
	for _, order := range append(batch, alone) {
		if _, found := readOrder(t, m.db, order.ID); found {
			t.Errorf("the locked path wrote %s", order.ID)
		}
	}
	if got := balances(t, m.db); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("balances moved: %v, were %v", got, before)
	}
	if got := outboxAfter(t, m.db, outboxBefore); len(got) > 0 {
		t.Errorf("the locked path wrote outbox rows %v", got)
	}

	eth := newOrder(m.alice, "ETH-USD", orders.Buy, "1", "3000")
	if err := m.settler.Settle(ctx, eth, 1); err != nil {
		t.Errorf("an unowned instrument on the locked path: %v", err)
	}

	current.GiveUp("BTC-USD")
	if err := m.settler.Settle(ctx, alone, 1); err != nil {
		t.Fatalf("after its owner gave it up: %v", err)
	}
	if row := mustOrder(t, m.db, alone.ID); row.status != "open" {
		t.Errorf("after its owner gave it up: %s", row.state())
	}
	mustAudit(t, m.db)
}
