package gateway_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestListInstruments: the seeded instruments with their rules, public.
func TestListInstruments(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	res := f.do(t, f.http, http.MethodGet, "/v1/instruments", "", "", "")
	if res.status != http.StatusOK {
		t.Fatalf("status %d %s", res.status, res.body)
	}
	list := res.json(t)["instruments"].([]any)
	if len(list) != 3 {
		t.Fatalf("instruments %s, want the 3 seeded", res.body)
	}
	want := map[string]any{
		"symbol": "BTC-USD", "base": "BTC", "quote": "USD", "tick_size": "0.01", "lot_size": "0.00001",
		"min_notional": "10", "price_band_percent": "10", "maker_fee_bps": "10", "taker_fee_bps": "20",
		"status": "trading", "reference_price": "50000.00", "max_notional": "10000000", "max_quantity": "181.45527",
	}
	if got := list[0].(map[string]any); !reflect.DeepEqual(got, want) {
		t.Errorf("first instrument %v, want %v", got, want)
	}
}

// TestGetBook: resting orders aggregated by price, bids descending and asks
// ascending, cut at depth; an unknown symbol is a 404 problem.
func TestGetBook(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 2)
	a, b := f.accounts[0], f.accounts[1]
	f.insertRestingOrder(t, a, "BTC-USD", "buy", "0.01", "49000")
	f.insertRestingOrder(t, b, "BTC-USD", "buy", "0.02", "49000")
	f.insertRestingOrder(t, a, "BTC-USD", "buy", "0.5", "49500.5")
	f.insertRestingOrder(t, a, "BTC-USD", "buy", "0.1", "45000")
	f.insertRestingOrder(t, b, "BTC-USD", "sell", "0.03", "51000")
	f.insertRestingOrder(t, b, "BTC-USD", "sell", "0.04", "50500")
	f.insertRestingOrder(t, b, "ETH-USD", "sell", "1", "3100")
	level := func(price, quantity string, n float64) map[string]any {
		return map[string]any{"price": price, "quantity": quantity, "orders": n}
	}
	tests := []struct {
		name       string
		path       string
		bids, asks []any
	}{
		{"default depth", "/v1/instruments/BTC-USD/book",
			[]any{level("49500.50", "0.50000", 1), level("49000.00", "0.03000", 2), level("45000.00", "0.10000", 1)},
			[]any{level("50500.00", "0.04000", 1), level("51000.00", "0.03000", 1)}},
		{"depth 1", "/v1/instruments/BTC-USD/book?depth=1",
			[]any{level("49500.50", "0.50000", 1)}, []any{level("50500.00", "0.04000", 1)}},
		{"empty side", "/v1/instruments/ETH-USD/book?depth=100", []any{}, []any{level("3100.00", "1.000", 1)}},
		{"empty book", "/v1/instruments/ETH-BTC/book", []any{}, []any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := f.do(t, f.http, http.MethodGet, tt.path, "", "", "")
			if res.status != http.StatusOK {
				t.Fatalf("status %d %s", res.status, res.body)
			}
			got := res.json(t)
			if !reflect.DeepEqual(got["bids"], tt.bids) || !reflect.DeepEqual(got["asks"], tt.asks) {
				t.Errorf("book %s\nwant bids %v asks %v", res.body, tt.bids, tt.asks)
			}
		})
	}
	for _, tt := range []struct {
		path   string
		status int
		slug   string
	}{
		{"/v1/instruments/DOGE-USD/book", 404, "not-found"},
		{"/v1/instruments/BTC-USD/book?depth=0", 400, "invalid-query"},
		{"/v1/instruments/BTC-USD/book?depth=101", 400, "invalid-query"},
		{"/v1/instruments/BTC-USD/book?levels=5", 400, "invalid-query"},
	} {
		res := f.do(t, f.http, http.MethodGet, tt.path, "", "", "")
		if res.status != tt.status || res.json(t)["type"] != "urn:ordergate:problem:"+tt.slug {
			t.Errorf("%s: %d %s, want %d %s", tt.path, res.status, res.body, tt.status, tt.slug)
		}
	}
}

// The public routes need no API key, so they are limited per client
// address, one bucket for them all: past the burst an address gets 429
// problems, which the spec describes, on every one of them, the
// instruments (served from memory) and the probes included.
func TestPublicRoutesAreLimitedPerAddress(t *testing.T) {
	f := newFixtureWith(t, 1, limited(2, 1))
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		res := f.do(t, f.http, http.MethodGet, "/v1/instruments/BTC-USD/book", "", "", "")
		if res.status != want {
			t.Fatalf("request %d: %d %s, want %d", i, res.status, res.body, want)
		}
		if res.header.Get("RateLimit-Limit") != "2" {
			t.Errorf("request %d: RateLimit-Limit %q, want 2", i, res.header.Get("RateLimit-Limit"))
		}
	}
	for _, path := range []string{"/v1/instruments", "/readyz", "/healthz"} {
		res := f.do(t, f.http, http.MethodGet, path, "", "", "")
		if res.status != http.StatusTooManyRequests || res.json(t)["type"] != "urn:ordergate:problem:rate-limited" {
			t.Errorf("%s once the address's bucket is spent: %d %s, want 429 rate-limited", path, res.status, res.body)
		}
	}
}
