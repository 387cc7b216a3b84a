package orders_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// One set of rules for the gateway's command and the queue job's payload:
// what NewOrder makes, DecodeOrder takes back, and what breaks a rule is
// refused by both.
func TestOrderRulesHoldForCommandsAndPayloads(t *testing.T) {
	valid := orders.PlaceCommand{Account: "ACC_1", ClientOrderID: "c-1", Symbol: "BTC-USD", Side: orders.Buy,
		Type: orders.Limit, Quantity: decimal.MustParse("0.01"), Price: decimal.MustParse("50000")}
	tests := []struct {
		name   string
		change func(*orders.PlaceCommand)
		field  string // "" when the command is valid
	}{
		{"valid limit", func(*orders.PlaceCommand) {}, ""},
		{"market, price ignored", func(c *orders.PlaceCommand) { c.Type = orders.Market }, ""},
		{"venue account", func(c *orders.PlaceCommand) { c.Account = orders.VenueAccount }, "account_id"},
		{"external account", func(c *orders.PlaceCommand) { c.Account = orders.ExternalAccount }, "account_id"},
		{"no side", func(c *orders.PlaceCommand) { c.Side = "hold" }, "side"},
		{"zero quantity", func(c *orders.PlaceCommand) { c.Quantity = decimal.Zero }, "quantity"},
		{"limit without price", func(c *orders.PlaceCommand) { c.Price = decimal.Zero }, "price"},
		{"unknown type", func(c *orders.PlaceCommand) { c.Type = "stop" }, "type"},
		{"limit fok", func(c *orders.PlaceCommand) { c.TimeInForce = orders.FOK }, ""},
		{"limit post-only", func(c *orders.PlaceCommand) { c.PostOnly = true }, ""},
		{"unknown time in force", func(c *orders.PlaceCommand) { c.TimeInForce = "day" }, "time_in_force"},
		{"market gtc", func(c *orders.PlaceCommand) { c.Type, c.TimeInForce = orders.Market, orders.GTC }, "time_in_force"},
		{"post-only ioc", func(c *orders.PlaceCommand) { c.TimeInForce, c.PostOnly = orders.IOC, true }, "post_only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := valid
			tt.change(&cmd)
			order, err := orders.NewOrder(cmd)
			var invalid *orders.InvalidError
			if tt.field != "" {
				if !errors.As(err, &invalid) || invalid.Fields[0].Field != tt.field {
					t.Fatalf("NewOrder: %v, want a refusal of %s", err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cmd.Type == orders.Market && order.Price != nil {
				t.Errorf("market order kept price %s", order.Price)
			}
			if want := cmd.TimeInForceOrDefault(); order.TimeInForce != want || !want.Valid() {
				t.Errorf("time in force %q, want %q", order.TimeInForce, want)
			}
			payload, err := order.Payload()
			if err != nil {
				t.Fatal(err)
			}
			decoded, err := orders.DecodeOrder(order.ID, payload)
			if err != nil || decoded.ID != order.ID || !decoded.Quantity.Equal(order.Quantity) {
				t.Fatalf("DecodeOrder of NewOrder's payload: %+v, %v", decoded, err)
			}
		})
	}
}

func TestDecodeOrderRefusesWhatNoSettlementCouldTake(t *testing.T) {
	order, err := orders.NewOrder(orders.PlaceCommand{Account: "ACC_1", ClientOrderID: "c-1", Symbol: "BTC-USD",
		Side: orders.Sell, Type: orders.Limit, Quantity: decimal.MustParse("1"), Price: decimal.MustParse("10")})
	if err != nil {
		t.Fatal(err)
	}
	encode := func(change func(map[string]any)) []byte {
		payload, _ := order.Payload()
		var fields map[string]any
		if err := json.Unmarshal(payload, &fields); err != nil {
			t.Fatal(err)
		}
		change(fields)
		out, _ := json.Marshal(fields)
		return out
	}
	tests := []struct {
		name    string
		id      string
		payload []byte
		want    string
	}{
		{"not json", order.ID, []byte("{"), "unexpected end"},
		{"another job's id", orders.NewOrderID(), encode(func(map[string]any) {}), "is not the job's"},
		{"no ORD id", "x", encode(func(f map[string]any) { f["id"] = "x" }), "is no ORD id"},
		{"market with a price", order.ID, encode(func(f map[string]any) { f["type"] = "market" }), "a market order has no price"},
		{"no created_at", order.ID, encode(func(f map[string]any) { delete(f, "created_at") }), "created_at is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := orders.DecodeOrder(tt.id, tt.payload)
			if !errors.Is(err, orders.ErrMalformedOrder) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeOrder: %v, want ErrMalformedOrder saying %q", err, tt.want)
			}
		})
	}
}

// decodePayload is the queue job's payload of the order cmd places, as
// placement encodes it.
func decodePayload(tb testing.TB, cmd orders.PlaceCommand) (string, []byte) {
	tb.Helper()
	order, err := orders.NewOrder(cmd)
	if err != nil {
		tb.Fatal(err)
	}
	payload, err := order.Payload()
	if err != nil {
		tb.Fatal(err)
	}
	return order.ID, payload
}

var decodedSink orders.Order

// BenchmarkDecodeOrder decodes the payloads settlement reads from every
// job it claims: a pending limit order (the common one), a post-only
// limit and a market order.
func BenchmarkDecodeOrder(b *testing.B) {
	limit := orders.PlaceCommand{Account: "ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", ClientOrderID: "client-order-0001",
		Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit, Quantity: decimal.MustParse("0.015"), Price: decimal.MustParse("65000.50")}
	postOnly := limit
	postOnly.PostOnly = true
	market := limit
	market.Side, market.Type = orders.Sell, orders.Market
	for _, bc := range []struct {
		name string
		cmd  orders.PlaceCommand
	}{
		{"limit", limit},
		{"post-only", postOnly},
		{"market", market},
	} {
		id, payload := decodePayload(b, bc.cmd)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if decodedSink, err = orders.DecodeOrder(id, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
