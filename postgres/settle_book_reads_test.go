package postgres_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestShortReadsDecideTheSame: the same orders, settled one after the other
// on two markets, one reading its books whole pages of 256 orders, the
// other two orders at a time (so takers read on, page by page, and stop
// where they must): every order ends the same, with the same trades.
func TestShortReadsDecideTheSame(t *testing.T) {
	n := 150
	if testing.Short() {
		n = 60
	}
	outcome := func(short bool) []string {
		m := newMarket(t)
		if short {
			postgres.SetPageRows(t, 2)
		}
		accounts := []string{m.alice, m.bob, m.newCustomer(t), m.newCustomer(t)}
		placed := randomOrders(rand.New(rand.NewPCG(3, 5)), accounts, n)
		var states []string
		for _, order := range placed {
			m.settle(t, order, 1)
		}
		for _, order := range placed {
			var trades string
			if err := m.db.QueryRow(context.Background(), `SELECT coalesce(string_agg(trim_scale(price) || 'x' || trim_scale(quantity), ' ' ORDER BY id), '')
				FROM trades WHERE taker_order_id = $1`, order.ID).Scan(&trades); err != nil {
				t.Fatal(err)
			}
			states = append(states, mustOrder(t, m.db, order.ID).state()+" ["+trades+"]")
		}
		mustAudit(t, m.db)
		return states
	}
	whole, short := outcome(false), outcome(true)
	for i := range whole {
		if whole[i] != short[i] {
			t.Errorf("order %d: %s read whole, %s read two at a time", i, whole[i], short[i])
		}
	}
}

// TestShortReadsInBatches: batches of crossing orders on one book read two
// orders at a time, so takers that came to rest in a batch stand past what
// the batch read; the books must come out sound.
func TestShortReadsInBatches(t *testing.T) {
	postgres.SetPageRows(t, 2)
	m := newMarket(t)
	accounts := []string{m.alice, m.bob, m.newCustomer(t), m.newCustomer(t)}
	placed := randomOrders(rand.New(rand.NewPCG(13, 17)), accounts, 300)
	var claims []emq.Claim
	for _, order := range placed {
		claims = append(claims, claimOf(t, order, 1))
	}
	settler, registry := meteredSettler(t, m)
	settleConcurrently(t, []*postgres.Settler{settler}, claims)
	statuses := map[string]int{}
	for _, order := range placed {
		statuses[mustOrder(t, m.db, order.ID).status]++
	}
	stats := readBatchStats(t, registry)
	t.Logf("statuses %v, batches %+v", statuses, stats)
	if stats.batched == 0 || statuses[string(orders.StatusFilled)] == 0 {
		t.Errorf("batches %+v, statuses %v: want batched orders and fills", stats, statuses)
	}
	mustAudit(t, m.db)
}
