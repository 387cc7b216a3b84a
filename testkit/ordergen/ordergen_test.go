package ordergen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// seeded are the instruments migrations/0001 and 0005 seed, before any trade.
var seeded = map[string]orders.Instrument{
	"BTC-USD": {Symbol: "BTC-USD", Base: "BTC", Quote: "USD", TickSize: decimal.MustParse("0.01"), LotSize: decimal.MustParse("0.00001"),
		MinNotional: decimal.MustParse("10"), ReferencePrice: decimal.MustParse("50000"), PriceBandPercent: decimal.MustParse("10")},
	"ETH-USD": {Symbol: "ETH-USD", Base: "ETH", Quote: "USD", TickSize: decimal.MustParse("0.05"), LotSize: decimal.MustParse("0.001"),
		MinNotional: decimal.MustParse("10"), ReferencePrice: decimal.MustParse("3000"), PriceBandPercent: decimal.MustParse("10")},
	"ETH-BTC": {Symbol: "ETH-BTC", Base: "ETH", Quote: "BTC", TickSize: decimal.MustParse("0.00001"), LotSize: decimal.MustParse("0.005"),
		MinNotional: decimal.MustParse("0.0001"), ReferencePrice: decimal.MustParse("0.06"), PriceBandPercent: decimal.MustParse("10")},
}

// TestBodiesPassTheInstrumentRules decodes many bodies of both generators and
// holds each to the domain's rules: the instrument's grids and minimum
// notional, the time-in-force and post-only rules, and a limit price inside
// the band (which it stays inside even after trades moved the reference by
// the 2% the prices range over).
func TestBodiesPassTheInstrumentRules(t *testing.T) {
	kinds := map[string]int{}
	for _, generate := range []func(*rand.Rand, string) string{Random, RandomMarket} {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 5000 {
			text := generate(r, fmt.Sprintf("c-%d", i))
			var body struct {
				ClientOrderID string           `json:"client_order_id"`
				Symbol        string           `json:"symbol"`
				Side          orders.Side      `json:"side"`
				Type          orders.OrderType `json:"type"`
				Quantity      decimal.Decimal  `json:"quantity"`
				Price         *decimal.Decimal `json:"price"`
				TimeInForce   string           `json:"time_in_force"`
				PostOnly      bool             `json:"post_only"`
			}
			if err := json.Unmarshal([]byte(text), &body); err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			in, ok := seeded[body.Symbol]
			if !ok {
				t.Fatalf("%s: unknown symbol", text)
			}
			cmd := orders.PlaceCommand{Account: "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1", ClientOrderID: body.ClientOrderID, Symbol: body.Symbol,
				Side: body.Side, Type: body.Type, TimeInForce: orders.TimeInForce(body.TimeInForce), PostOnly: body.PostOnly, Quantity: body.Quantity}
			if body.Price != nil {
				cmd.Price = *body.Price
			}
			if err := cmd.Validate(); err != nil {
				t.Fatalf("%s: %v", text, err)
			}
			if refused := in.Check(cmd); len(refused) > 0 {
				t.Fatalf("%s: %v", text, refused)
			}
			if cmd.Type == orders.Limit {
				for _, moved := range []string{"0.98", "1", "1.02"} {
					shifted := in
					shifted.LastPrice, _ = in.ReferencePrice.Mul(decimal.MustParse(moved))
					if ok, err := shifted.InBand(cmd.Price); err != nil || !ok {
						t.Fatalf("%s: outside the band around %s (%v)", text, shifted.LastPrice, err)
					}
				}
			}
			kinds[fmt.Sprintf("%s/%s/%v", cmd.Type, cmd.TimeInForceOrDefault(), cmd.PostOnly)]++
		}
	}
	for _, kind := range []string{"limit/gtc/false", "limit/gtc/true", "limit/ioc/false", "limit/fok/false", "market/ioc/false"} {
		if kinds[kind] == 0 {
			t.Errorf("no %s order among %v", kind, kinds)
		}
	}
}
