package orders_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/orders"
)

func TestDecodeCommand(t *testing.T) {
	for _, tc := range []struct {
		name, payload string
		valid         bool
	}{
		{"cancel", `{"kind":"cancel","account":"a","symbol":"BTC-USD","order_id":"ORD_1"}`, true},
		{"cancel all", `{"kind":"cancel_all","account":"a","symbol":"BTC-USD"}`, true},
		{"cancel without an order", `{"kind":"cancel","account":"a","symbol":"BTC-USD"}`, false},
		{"no account", `{"kind":"cancel_all","symbol":"BTC-USD"}`, false},
		{"an unknown kind", `{"kind":"amend","account":"a","symbol":"BTC-USD","order_id":"ORD_1"}`, false},
		{"no JSON", `{`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := orders.DecodeCommand("CMD_1", []byte(tc.payload))
			if tc.valid && err != nil || !tc.valid && !errors.Is(err, orders.ErrMalformedOrder) {
				t.Errorf("decode %s: %v", tc.payload, err)
			}
		})
	}
	cmd := orders.Command{Kind: orders.CommandCancel, Account: "a", Symbol: "BTC-USD", OrderID: "ORD_1"}
	payload, err := cmd.Payload()
	if err != nil {
		t.Fatal(err)
	}
	if back, err := orders.DecodeCommand("CMD_1", payload); err != nil || back != cmd {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	if id := orders.NewCommandID(); !strings.HasPrefix(id, "CMD_") || strings.Contains(orders.CancelDedupKey("ORD_1"), ":") {
		t.Errorf("command id %s", id)
	}
}
