package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/postgres"
)

// TestLastPriceIsTheLastTradesPrice: whatever the batches (one order, or
// dozens piled up behind a slow write, each trading at several prices, up
// and down; redeliveries that write nothing), an instrument's last price
// is the price of its last trade (the highest trade id: trades are drawn
// in decision order) once the writes are done.
func TestLastPriceIsTheLastTradesPrice(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	names := []string{"alice", "bob"}
	accounts := map[string]string{"alice": m.alice, "bob": m.bob}
	for i := range 6 {
		name := fmt.Sprintf("#%d", i)
		names = append(names, name)
		accounts[name] = m.newCustomerWith(t, map[string]string{"USD": "20000", "BTC": "0.4"})
	}
	check := func(when string) {
		t.Helper()
		var last, want *string
		var trades int
		if err := m.db.QueryRow(ctx, `SELECT trim_scale(i.last_price)::text,
				(SELECT trim_scale(price)::text FROM trades WHERE symbol = i.symbol ORDER BY id DESC LIMIT 1),
				(SELECT count(*) FROM trades WHERE symbol = i.symbol)
			FROM instruments i WHERE i.symbol = 'BTC-USD'`).Scan(&last, &want, &trades); err != nil {
			t.Fatal(err)
		}
		if want != nil && (last == nil || *last != *want) {
			t.Errorf("%s (%d trades): last price %v, the last trade's %s", when, trades, textOrNull(last), *want)
		}
	}
	random := rand.New(rand.NewPCG(26, 3))
	placed := randomOrders(random, names, 240)
	for i := range placed {
		placed[i].Account = accounts[placed[i].Account]
	}
	// The settler's batches first (no owner), one order at a time.
	for i, order := range placed[:20] {
		m.settle(t, order, 1)
		check(fmt.Sprintf("after settled order %d", i))
	}
	s := owner(t, m, "BTC-USD", 1)
	// Each write waits a little first: the orders that come meanwhile
	// pile up into one batch.
	postgres.SetBeforeOwnedWrite(t, func() { time.Sleep(5 * time.Millisecond) })
	for begin := 20; begin < len(placed); begin += 44 {
		end := min(begin+44, len(placed))
		var wg sync.WaitGroup
		for _, order := range placed[begin:end] {
			wg.Go(func() {
				if err := s.Settle(ctx, order, 1); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		check(fmt.Sprintf("after the burst at %d", begin))
		// A redelivery of the burst writes no trade and leaves the price.
		for _, order := range placed[begin:min(begin+3, end)] {
			if err := s.Settle(ctx, order, 1); err != nil {
				t.Error(err)
			}
		}
		check(fmt.Sprintf("after redeliveries at %d", begin))
	}
	mustAudit(t, m.db)
}

func textOrNull(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
