package orders

import (
	"math/big"
	"strings"
	"testing"

	"github.com/govalues/decimal"
)

func mustAmount(t testing.TB, s string) decimal.Decimal {
	t.Helper()
	d, err := ParseAmount(s)
	if err != nil {
		t.Fatalf("amount %q: %v", s, err)
	}
	return d
}

func TestInstrumentCheck(t *testing.T) {
	btc := Instrument{
		Symbol: "BTC-USD", Base: "BTC", Quote: "USD",
		TickSize: mustAmount(t, "0.01"), LotSize: mustAmount(t, "0.00001"),
		MinNotional: mustAmount(t, "10"), ReferencePrice: mustAmount(t, "50000"),
	}
	halted := btc
	halted.Halted = true
	tests := []struct {
		name       string
		instrument Instrument
		orderType  OrderType
		quantity   string
		price      string
		want       []string // "field: part of reason"
	}{
		{name: "valid limit", instrument: btc, orderType: Limit, quantity: "0.01000", price: "50000.00"},
		{name: "valid market", instrument: btc, orderType: Market, quantity: "0.001"},
		{name: "exactly the minimum notional", instrument: btc, orderType: Limit, quantity: "0.001", price: "10000.00"},
		{name: "halted", instrument: halted, orderType: Limit, quantity: "0.01", price: "50000", want: []string{"symbol: halted"}},
		{name: "zero quantity", instrument: btc, orderType: Limit, quantity: "0", price: "50000", want: []string{"quantity: greater than zero"}},
		{name: "zero price", instrument: btc, orderType: Limit, quantity: "0.01", price: "0.00", want: []string{"price: greater than zero"}},
		{name: "quantity decimals", instrument: btc, orderType: Limit, quantity: "0.000011", price: "50000", want: []string{"quantity: 6 decimals"}},
		{name: "trailing zeros past the scale", instrument: btc, orderType: Limit, quantity: "0.010000", price: "50000", want: []string{"quantity: 6 decimals"}},
		{name: "price decimals", instrument: btc, orderType: Limit, quantity: "0.01", price: "50000.001", want: []string{"price: 3 decimals"}},
		{name: "under minimum notional", instrument: btc, orderType: Limit, quantity: "0.00001", price: "50000", want: []string{"quantity: minimum notional"}},
		{name: "market under minimum notional at the reference price", instrument: btc, orderType: Market, quantity: "0.0001", want: []string{"quantity: minimum notional"}},
		{name: "market under minimum notional at the last trade", instrument: lastTrade(btc, "45000"), orderType: Market, quantity: "0.00020", want: []string{"quantity: 9 USD, under the minimum notional"}},
		{name: "market over minimum notional at the last trade", instrument: lastTrade(btc, "55000"), orderType: Market, quantity: "0.00019"},
		{name: "a limit order's notional is at its own price", instrument: lastTrade(btc, "55000"), orderType: Limit, quantity: "0.00019", price: "50000", want: []string{"quantity: minimum notional"}},
		// Too large to settle is CheckAmounts's refusal, with the limit.
		{name: "notional too large", instrument: btc, orderType: Limit, quantity: "999999999999.00000", price: "9999999999.99"},
		{name: "grid quotient past the decimal type", instrument: btc, orderType: Limit, quantity: "999999999999999999", price: "50000"},
		{name: "off the grid however large", instrument: btc, orderType: Limit, quantity: "9999999999999.99999", price: "50000.015", want: []string{"price: 3 decimals"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := PlaceCommand{Symbol: tt.instrument.Symbol, Side: Buy, Type: tt.orderType, Quantity: mustAmount(t, tt.quantity)}
			if tt.price != "" {
				cmd.Price = mustAmount(t, tt.price)
			}
			got := tt.instrument.Check(cmd)
			if len(got) != len(tt.want) {
				t.Fatalf("Check = %+v, want %v", got, tt.want)
			}
			for i, want := range tt.want {
				field, reason, _ := strings.Cut(want, ": ")
				if got[i].Field != field || !strings.Contains(got[i].Reason, reason) {
					t.Errorf("refusal %d = %+v, want %s", i, got[i], want)
				}
			}
		})
	}
}

func TestGridRuleUsesTheGridNotTheScale(t *testing.T) {
	ethBTC := Instrument{
		Symbol: "ETH-BTC", TickSize: mustAmount(t, "0.00005"), LotSize: mustAmount(t, "0.001"),
		MinNotional: mustAmount(t, "0.0001"), ReferencePrice: mustAmount(t, "0.06"),
	}
	cmd := PlaceCommand{Type: Limit, Quantity: mustAmount(t, "0.010"), Price: mustAmount(t, "0.06003")}
	got := ethBTC.Check(cmd)
	if len(got) != 1 || got[0].Field != "price" || !strings.Contains(got[0].Reason, "multiple of the tick size 0.00005") {
		t.Fatalf("Check = %+v, want an off-grid price", got)
	}
}

func TestFingerprint(t *testing.T) {
	base := PlaceCommand{Account: "ACC_A", ClientOrderID: "c1", Symbol: "BTC-USD", Side: Buy, Type: Limit,
		Quantity: mustAmount(t, "0.010"), Price: mustAmount(t, "50000.00")}
	same := base
	same.Quantity, same.Price = mustAmount(t, "0.01"), mustAmount(t, "50000")
	if base.Fingerprint() != same.Fingerprint() {
		t.Error("equal amounts written differently gave different fingerprints")
	}
	for name, change := range map[string]func(*PlaceCommand){
		"account":  func(c *PlaceCommand) { c.Account = "ACC_B" },
		"side":     func(c *PlaceCommand) { c.Side = Sell },
		"symbol":   func(c *PlaceCommand) { c.Symbol = "ETH-USD" },
		"quantity": func(c *PlaceCommand) { c.Quantity = mustAmount(t, "0.02") },
		"price":    func(c *PlaceCommand) { c.Price = mustAmount(t, "50000.01") },
		"type":     func(c *PlaceCommand) { c.Type = Market },
	} {
		other := base
		change(&other)
		if other.Fingerprint() == base.Fingerprint() {
			t.Errorf("changing %s kept the fingerprint", name)
		}
	}
}

func TestOrderIDs(t *testing.T) {
	id := NewOrderID()
	if _, err := ParseOrderID(id); err != nil || len(id) != 30 || !strings.HasPrefix(id, "ORD_") {
		t.Fatalf("NewOrderID = %q, parse: %v", id, err)
	}
	for _, bad := range []string{"", "ORD_", "ord_" + id[4:], "ORD_" + strings.ToLower(id[4:]), id + "0", "ORD_8ZZZZZZZZZZZZZZZZZZZZZZZZZ", "ORD_0000000000000000000000000U"} {
		if _, err := ParseOrderID(bad); err == nil {
			t.Errorf("ParseOrderID(%q) accepted", bad)
		}
	}
}

func TestPriceBand(t *testing.T) {
	btc := Instrument{Symbol: "BTC-USD", TickSize: decimal.MustParse("0.01"), ReferencePrice: decimal.MustParse("50000"),
		PriceBandPercent: decimal.MustParse("10")}
	odd := btc
	odd.LastPrice, odd.PriceBandPercent = decimal.MustParse("333.33"), decimal.MustParse("2.5")
	tests := []struct {
		name      string
		in        Instrument
		low, high string
	}{
		{"seeded reference", btc, "45000", "55000"},
		{"last trade is the reference, band rounded inward to the tick", odd, "325", "341.66"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			low, high, err := tt.in.Band()
			if err != nil || low.String() != tt.low || high.String() != tt.high {
				t.Fatalf("band %s..%s (%v), want %s..%s", low, high, err, tt.low, tt.high)
			}
			for price, want := range map[string]bool{tt.low: true, tt.high: true} {
				if in, _ := tt.in.InBand(decimal.MustParse(price)); in != want {
					t.Errorf("InBand(%s) = %v", price, in)
				}
			}
			below, _ := low.Sub(tt.in.TickSize)
			above, _ := high.Add(tt.in.TickSize)
			for _, price := range []decimal.Decimal{below, above} {
				if in, _ := tt.in.InBand(price); in {
					t.Errorf("InBand(%s) = true, outside %s..%s", price, low, high)
				}
			}
		})
	}
}

// TestOnGridExactly holds the grid rule's 128-bit check to the exact
// quotient at the extremes of the decimal type: the largest coefficient,
// a scale gap of all 19 digits, grids that are not powers of ten.
func TestOnGridExactly(t *testing.T) {
	tests := []struct{ amount, grid string }{
		{"0.01000", "0.00001"},
		{"0.00011", "0.00002"},
		{"50000.00", "0.01"},
		{"50000.05", "0.05"},
		{"50000.04", "0.05"},
		{"9999999999999999999", "1"},
		{"9999999999999999999", "3"},
		{"9999999999999999998", "3"},
		{"18446744073709551615", "5"},
		{"9999999999999999999", "0.0000000000000000003"},
		{"1", "0.0000000000000000003"},
		{"3", "0.0000000000000000003"},
		{"0.0000000000000000003", "0.0000000000000000003"},
		{"7", "0.7"},
		{"0.7", "0.07"},
		{"0.72", "0.25"},
		{"0.75", "0.25"},
	}
	for _, tt := range tests {
		amount, err := decimal.Parse(tt.amount)
		if err != nil {
			continue // beyond the type: nothing to check
		}
		grid := decimal.MustParse(tt.grid)
		if amount.Scale() > grid.Scale() {
			t.Fatalf("%s is finer than %s: not a case the rule reaches", tt.amount, tt.grid)
		}
		want := new(big.Rat).Quo(Rational(amount), Rational(grid)).IsInt()
		if got := onGridExactly(amount, grid); got != want {
			t.Errorf("onGridExactly(%s, %s) = %v, want %v", amount, grid, got, want)
		}
	}
}

// TestUnderMinimum holds the minimum notional's check to the exact
// product, in the decimal type and past it.
func TestUnderMinimum(t *testing.T) {
	tests := []struct{ quantity, price, minimum string }{
		{"0.00001", "50000", "1"},
		{"0.0002", "50000", "10"},
		{"0.0001", "50000", "5"},
		{"0.000099", "50000", "5"},
		{"9999999999", "9999999999", "1"},
		{"0.0000000001", "0.000000001", "0.0000000000000000001"},
		{"0.0000000001", "0.0000000009", "0.0000000000000000001"},
		{"0.0000000001", "0.000000001", "0.0000000000000000002"},
	}
	for _, tt := range tests {
		quantity, price, minimum := decimal.MustParse(tt.quantity), decimal.MustParse(tt.price), decimal.MustParse(tt.minimum)
		want := new(big.Rat).Mul(Rational(quantity), Rational(price)).Cmp(Rational(minimum)) < 0
		if got := underMinimum(quantity, price, minimum); got != want {
			t.Errorf("underMinimum(%s, %s, %s) = %v, want %v", quantity, price, minimum, got, want)
		}
	}
}

// TestCheckAllocatesNothing: the rules every admission runs, on an order
// that passes them, cost no allocation (a big.Rat cost dozens).
func TestCheckAllocatesNothing(t *testing.T) {
	in := seeded(t)["BTC-USD"]
	for _, cmd := range []PlaceCommand{
		{Symbol: in.Symbol, Side: Buy, Type: Limit, Quantity: decimal.MustParse("0.01000"), Price: decimal.MustParse("50000.00")},
		{Symbol: in.Symbol, Side: Sell, Type: Limit, Quantity: decimal.MustParse("0.01000"), Price: decimal.MustParse("50000.00")},
		{Symbol: in.Symbol, Side: Buy, Type: Market, Quantity: decimal.MustParse("0.01000")},
	} {
		allocs := testing.AllocsPerRun(100, func() {
			if refused := in.Check(cmd); refused != nil {
				t.Fatalf("Check refused %+v", refused)
			}
			if err := in.CheckAmounts(cmd); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s %s: Check and CheckAmounts allocate %.0f times, want none", cmd.Side, cmd.Type, allocs)
		}
	}
}
