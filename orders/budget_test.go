package orders

import (
	"errors"
	"testing"

	"github.com/govalues/decimal"
)

// lastTrade is in after a trade at price.
func lastTrade(in Instrument, price string) Instrument {
	in.LastPrice = decimal.MustParse(price)
	return in
}

// seeded are the instruments as the migrations seed them.
func seeded(t testing.TB) map[string]Instrument {
	t.Helper()
	in := func(symbol, base, quote, tick, lot, minNotional, reference string) Instrument {
		return Instrument{Symbol: symbol, Base: base, Quote: quote, TickSize: mustAmount(t, tick), LotSize: mustAmount(t, lot),
			MinNotional: mustAmount(t, minNotional), ReferencePrice: mustAmount(t, reference),
			MakerFeeBps: mustAmount(t, "10"), TakerFeeBps: mustAmount(t, "20"), PriceBandPercent: mustAmount(t, "10")}
	}
	return map[string]Instrument{
		"BTC-USD": in("BTC-USD", "BTC", "USD", "0.01", "0.00001", "10", "50000"),
		"ETH-USD": in("ETH-USD", "ETH", "USD", "0.05", "0.001", "10", "3000"),
		"ETH-BTC": in("ETH-BTC", "ETH", "BTC", "0.00001", "0.005", "0.0001", "0.06"),
	}
}

// The budget of each seeded instrument: a fee has sp + sq + 4 + sb
// decimals, so a worst case must stay below 10^(19 − that), and the door
// keeps a digit of headroom.
func TestSeededBudgets(t *testing.T) {
	tests := []struct {
		symbol      string
		decimals    int
		maxNotional string
		maxQuantity string // at the band's top around the seeded reference
	}{
		{"BTC-USD", 11, "10000000", "181.45527"},
		{"ETH-USD", 9, "1000000000", "302425.452"},
		{"ETH-BTC", 12, "1000000", "15121272.605"},
	}
	instruments := seeded(t)
	for _, tt := range tests {
		t.Run(tt.symbol, func(t *testing.T) {
			in := instruments[tt.symbol]
			if got := in.AmountDecimals(); got != tt.decimals {
				t.Errorf("AmountDecimals = %d, want %d", got, tt.decimals)
			}
			if got := in.MaxNotional().String(); got != tt.maxNotional {
				t.Errorf("MaxNotional = %s, want %s", got, tt.maxNotional)
			}
			if got := in.MaxQuantity().String(); got != tt.maxQuantity {
				t.Errorf("MaxQuantity = %s, want %s", got, tt.maxQuantity)
			}
		})
	}
	odd := instruments["BTC-USD"]
	odd.TakerFeeBps, odd.MakerFeeBps = mustAmount(t, "2.5"), mustAmount(t, "2.5")
	if got := odd.AmountDecimals(); got != 12 {
		t.Errorf("a rate of 2.5 bps: AmountDecimals = %d, want 12", got)
	}
}

func TestCheckAmounts(t *testing.T) {
	btc := seeded(t)["BTC-USD"]
	tests := []struct {
		name                  string
		in                    Instrument
		side                  Side
		typ                   OrderType
		quantity, price       string
		field, maxQ, budgetAt string // "" field: admitted
	}{
		{"the issue's buy", btc, Buy, Limit, "1000000.00001", "50000.01", "quantity", "199.60075", "50000.01"},
		{"the issue's other buy", btc, Buy, Limit, "9999999999999.99999", "50000.01", "quantity", "199.60075", "50000.01"},
		{"a buy at the limit", btc, Buy, Limit, "199.60079", "50000.00", "", "", ""},
		{"a buy over it", btc, Buy, Limit, "199.60080", "50000.00", "quantity", "199.60079", "50000.00"},
		{"a buy below the band is budgeted at its price", btc, Buy, Limit, "220", "45000", "", "", ""},
		{"a sell is budgeted at the band's top", btc, Sell, Limit, "181.45528", "45000", "quantity", "181.45527", "55000.00"},
		{"a sell at the limit", btc, Sell, Limit, "181.45527", "45000", "", "", ""},
		{"a market buy", btc, Buy, Market, "181.45528", "", "quantity", "181.45527", "55000.00"},
		{"a market sell", btc, Sell, Market, "181.45527", "", "", "", ""},
		{"the band follows the last trade", lastTrade(btc, "25000"), Sell, Market, "362", "", "", "", ""},
		{"one lot too large at the price", btc, Buy, Limit, "0.00001", "999999999999.99", "price", "0.00000", "999999999999.99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := PlaceCommand{Symbol: tt.in.Symbol, Side: tt.side, Type: tt.typ, Quantity: mustAmount(t, tt.quantity)}
			if tt.price != "" {
				cmd.Price = mustAmount(t, tt.price)
			}
			err := tt.in.CheckAmounts(cmd)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("CheckAmounts = %v, want none", err)
				}
				return
			}
			var tooLarge *AmountTooLargeError
			if !errors.As(err, &tooLarge) || !errors.Is(err, ErrAmountTooLarge) {
				t.Fatalf("CheckAmounts = %v, want an *AmountTooLargeError", err)
			}
			if tooLarge.Field != tt.field || tooLarge.MaxQuantity.String() != tt.maxQ || tooLarge.Price.String() != tt.budgetAt ||
				tooLarge.Limit.String() != "10000000" {
				t.Errorf("refused %+v, want field %s, max quantity %s at %s", tooLarge, tt.field, tt.maxQ, tt.budgetAt)
			}
			if tt.field == "price" && tooLarge.MaxPrice.String() != "998003992015.96" {
				t.Errorf("max price %s", tooLarge.MaxPrice)
			}
		})
	}
}

// What the door admits at one reference settlement can represent at a
// reference up to ten times higher: the digit of headroom.
func TestTheDoorsLimitFitsSettlement(t *testing.T) {
	for symbol, in := range seeded(t) {
		at := in.MaxQuantity()
		tenfold, err := in.ReferencePrice.Mul(decimal.MustNew(10, 0))
		if err != nil {
			t.Fatal(err)
		}
		high := lastTrade(in, tenfold.String())
		price, _, err := high.BudgetPrice(Sell, Market, decimal.Zero)
		if err != nil {
			t.Fatal(err)
		}
		if !representable(high.worstCase(at, price), high.AmountDecimals()) {
			t.Errorf("%s: %s at a reference ten times higher does not fit", symbol, at)
		}
	}
}
