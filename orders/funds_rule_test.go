package orders

import (
	"math/big"
	"testing"
)

// Rejection is the funds rule of both settlement paths; its edges are where
// an exchange's books go wrong: a balance exactly equal to what the order
// needs covers it, a smallest unit less does not.
func TestRejection(t *testing.T) {
	rat := func(text string) *big.Rat {
		r, ok := new(big.Rat).SetString(text)
		if !ok {
			t.Fatalf("no number: %q", text)
		}
		return r
	}
	plenty := Funds{rat("1000"), rat("1000000")}
	tests := []struct {
		name               string
		halted             bool
		side               Side
		mine, venue        Funds
		quantity, notional string
		want               string
	}{
		{"buy covered exactly", false, Buy, Funds{rat("0"), rat("500.0000000")}, Funds{rat("0.01"), rat("0")}, "0.01000", "500.0000000", ""},
		{"buy a unit short of quote", false, Buy, Funds{rat("0"), rat("499.99")}, plenty, "0.01", "500", ReasonInsufficientFunds},
		{"buy, venue a unit short of base", false, Buy, plenty, Funds{rat("0.00999"), rat("0")}, "0.01", "500", ReasonInsufficientLiquidity},
		{"sell covered exactly", false, Sell, Funds{rat("0.333"), rat("0")}, Funds{rat("0"), rat("1032.31665")}, "0.333", "1032.31665", ""},
		{"sell a unit short of base", false, Sell, Funds{rat("0.332"), rat("0")}, plenty, "0.333", "1032.31665", ReasonInsufficientFunds},
		{"sell, venue a unit short of quote", false, Sell, plenty, Funds{rat("0"), rat("1032.31664")}, "0.333", "1032.31665", ReasonInsufficientLiquidity},
		{"a buy does not need base, nor a sell quote", false, Buy, Funds{rat("0"), rat("500")}, Funds{rat("0.01"), rat("0")}, "0.01", "500", ""},
		{"short of funds and of liquidity: funds first", false, Buy, Funds{rat("0"), rat("0")}, Funds{rat("0"), rat("0")}, "0.01", "500", ReasonInsufficientFunds},
		{"halted before funds", true, Buy, Funds{rat("0"), rat("0")}, Funds{rat("0"), rat("0")}, "0.01", "500", ReasonInstrumentHalted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Rejection(tt.halted, tt.side, tt.mine, tt.venue, rat(tt.quantity), rat(tt.notional)); got != tt.want {
				t.Errorf("rejection: %q, want %q", got, tt.want)
			}
		})
	}
}
