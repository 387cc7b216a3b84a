package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestMinNotionalAtTheCurrentReference: a market order's minimum notional
// is checked at the reference the band is centered on, the last trade's,
// not the seeded price (issue 23).
func TestMinNotionalAtTheCurrentReference(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	ctx := context.Background()
	tests := []struct {
		name, last, side, quantity string
		status                     int
	}{
		{"9 USD at a last trade of 45,000", "45000", "sell", "0.00020", 422},
		{"10.45 USD at a last trade of 55,000", "55000", "buy", "0.00019", 202},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := f.db.Exec(ctx, `UPDATE instruments SET last_price = $1 WHERE symbol = 'BTC-USD'`, tt.last); err != nil {
				t.Fatal(err)
			}
			if err := f.instruments.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			body := `{"client_order_id":"notional-` + strings.Repeat("x", i+1) + `","symbol":"BTC-USD","side":"` + tt.side +
				`","type":"market","quantity":"` + tt.quantity + `"}`
			res := f.place(t, f.keys[0], body)
			if res.status != tt.status {
				t.Fatalf("status %d %s, want %d", res.status, res.body, tt.status)
			}
			if tt.status == http.StatusUnprocessableEntity && !strings.Contains(string(res.body), "minimum notional") {
				t.Errorf("problem %s, want the minimum notional named", res.body)
			}
		})
	}
}
