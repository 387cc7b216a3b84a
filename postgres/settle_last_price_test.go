package postgres_test

import (
	"context"
	"testing"

	"github.com/ordergate/ordergate/orders"
)

// TestLastPriceWritesTheInstrumentOnlyWhenItMoves: a trade at the last
// price leaves the instrument row as it is (no new version, which every
// later probe of the row under an older snapshot would walk); a trade at
// another price writes it.
func TestLastPriceWritesTheInstrumentOnlyWhenItMoves(t *testing.T) {
	m := newMarket(t)
	version := func() (xmin, last string) {
		t.Helper()
		if err := m.db.QueryRow(context.Background(),
			`SELECT xmin::text, trim_scale(last_price)::text FROM instruments WHERE symbol = 'BTC-USD'`).Scan(&xmin, &last); err != nil {
			t.Fatal(err)
		}
		return xmin, last
	}
	trade := func(price string) {
		t.Helper()
		m.place(t, m.alice, orders.Sell, "0.1", price)
		m.place(t, m.bob, orders.Buy, "0.1", price)
	}
	trade("50000")
	first, last := version()
	for _, tt := range []struct {
		price   string
		written bool
	}{
		{"50000", false},
		{"50001", true},
		{"50001", false},
	} {
		trade(tt.price)
		xmin, got := version()
		if got != tt.price {
			t.Errorf("after a trade at %s the last price is %s", tt.price, got)
		}
		if written := xmin != first; written != tt.written {
			t.Errorf("a trade at %s after one at %s: instrument row written %t, want %t", tt.price, last, written, tt.written)
		}
		first, last = xmin, got
	}
	mustAudit(t, m.db)
}
