package gateway

import (
	"errors"
	"testing"

	"github.com/ordergate/ordergate/orders"
)

// A limit order needs a price and a market order must not carry one; any
// other type leaves the price alone (the type is refused on its own).
func TestPriceRule(t *testing.T) {
	server := &Server{validate: newValidator()}
	tests := []struct {
		name, orderType, price, wantReason string
	}{
		{"limit without price", "limit", "", "is required for limit orders"},
		{"limit with price", "limit", "50000.00", ""},
		{"market with price", "market", "50000.00", "must be absent for market orders; they fill at the reference price"},
		{"market without price", "market", "", ""},
		{"unknown type with price", "stop", "50000.00", ""},
		{"unknown type without price", "stop", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No symbol: the instrument lookup is skipped and the symbol is
			// refused on its own, so only the price's reason is looked at.
			req := placeRequest{ClientOrderID: "c-1", Side: "buy", Type: tt.orderType, Quantity: "0.01", Price: tt.price}
			_, err := server.placeCommand("ACC_TEST", req)
			var invalid *orders.InvalidError
			if !errors.As(err, &invalid) {
				t.Fatalf("placeCommand: %v, want the symbol refused at least", err)
			}
			var got []string
			for _, field := range invalid.Fields {
				if field.Field == "price" {
					got = append(got, field.Reason)
				}
			}
			switch {
			case tt.wantReason == "" && len(got) > 0:
				t.Errorf("price refused with %q, want no price error", got)
			case tt.wantReason != "" && (len(got) != 1 || got[0] != tt.wantReason):
				t.Errorf("price reasons %q, want [%q]", got, tt.wantReason)
			}
		})
	}
}
