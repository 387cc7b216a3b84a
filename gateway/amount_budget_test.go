package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestPlaceAmountTooLarge: an order whose amounts settlement could not hold
// exactly is refused at the door, naming the field and the limit, instead
// of being admitted and then dying in the queue (issue 23). BTC-USD's
// amounts have up to 11 decimals (2 of price, 5 of quantity, 4 of a basis
// point), so a worst-case hold is at most 10^7 USD.
func TestPlaceAmountTooLarge(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	tests := []struct {
		name, side, typ, quantity, price string
		status                           int
		pointer                          string
	}{
		{"the issue's buy", "buy", "limit", "1000000.00001", "50000.01", 422, "/quantity"},
		{"the issue's other buy", "buy", "limit", "9999999999999.99999", "50000.01", 422, "/quantity"},
		{"a buy just over the budget", "buy", "limit", "199.60080", "50000.00", 422, "/quantity"},
		{"a buy at the budget", "buy", "limit", "199.60079", "50000.00", 202, ""},
		// A sell fills at the makers' prices, up to the band's top, 55,000.
		{"a sell over the budget at the band's top", "sell", "limit", "181.45528", "45000.00", 422, "/quantity"},
		{"a sell at the budget at the band's top", "sell", "limit", "181.45527", "45000.00", 202, ""},
		{"a market buy over the budget", "buy", "market", "181.45528", "", 422, "/quantity"},
		{"a market sell at the budget", "sell", "market", "181.45527", "", 202, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"client_order_id":"budget-` + strings.Repeat("x", i+1) + `","symbol":"BTC-USD","side":"` + tt.side +
				`","type":"` + tt.typ + `","quantity":"` + tt.quantity + `"`
			if tt.price != "" {
				body += `,"price":"` + tt.price + `"`
			}
			res := f.place(t, f.keys[0], body+`}`)
			if res.status != tt.status {
				t.Fatalf("status %d %s, want %d", res.status, res.body, tt.status)
			}
			if tt.status != http.StatusUnprocessableEntity {
				return
			}
			problem := res.json(t)
			errs, _ := problem["errors"].([]any)
			if problem["type"] != "urn:ordergate:problem:amount-too-large" || problem["code"] != "amount_too_large" || len(errs) != 1 {
				t.Fatalf("problem %s", res.body)
			}
			field := errs[0].(map[string]any)
			reason, _ := field["reason"].(string)
			if field["pointer"] != tt.pointer || !strings.Contains(reason, "10000000 USD") {
				t.Errorf("error %v: want %s naming the limit of 10000000 USD", field, tt.pointer)
			}
		})
	}
}
