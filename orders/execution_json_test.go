package orders

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/govalues/decimal"
)

// executionFields has none of Execution's methods: json.Marshal encodes it
// by reflection from the same json tags, the reference AppendJSON matches.
type executionFields Execution

func TestExecutionJSONMatchesReflection(t *testing.T) {
	created := time.Date(2024, 5, 17, 9, 30, 0, 123456789, time.UTC)
	fill := Execution{
		ID: "FIL_42", OrderID: "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", Symbol: "BTC-USD", Side: Buy,
		Price: decimal.MustParse("65000.50"), Quantity: decimal.MustParse("0.0100"), Fee: decimal.MustParse("0.33"),
		FeeAsset: "USD", Liquidity: LiquidityTaker, CreatedAt: created,
	}
	with := func(change func(*Execution)) Execution {
		e := fill
		change(&e)
		return e
	}
	tests := []struct {
		name string
		fill Execution
		fail bool
	}{
		{name: "zero execution", fill: Execution{}},
		{name: "taker", fill: fill},
		{name: "maker, zero fee", fill: with(func(e *Execution) { e.Side, e.Liquidity, e.Fee = Sell, LiquidityMaker, decimal.Decimal{} })},
		{name: "negative and huge amounts", fill: with(func(e *Execution) {
			e.Price, e.Quantity, e.Fee = decimal.MustParse("9999999999999999999"), decimal.MustParse("0.000000000000000001"), decimal.MustParse("-0.5")
		})},
		{name: "offset time", fill: with(func(e *Execution) { e.CreatedAt = created.In(time.FixedZone("", 5*3600+45*60+30)) })},
		{name: "whole second", fill: with(func(e *Execution) { e.CreatedAt = time.Date(2024, 5, 17, 9, 30, 0, 0, time.UTC) })},
		{name: "monotonic reading", fill: with(func(e *Execution) { e.CreatedAt = time.Now() })},
		{name: "year 10000 fails", fill: with(func(e *Execution) { e.CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }), fail: true},
	}
	for _, s := range oddStrings {
		tests = append(tests, struct {
			name string
			fill Execution
			fail bool
		}{name: "string " + strings.ToValidUTF8(s, "?"), fill: with(func(e *Execution) {
			e.ID, e.OrderID, e.Symbol, e.FeeAsset = s, "x"+s+"y", s+s, s
			e.Side, e.Liquidity = Side(s), Liquidity(s)
		})})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantErr := json.Marshal(executionFields(tt.fill))
			const prefix = `[1,`
			got, err := tt.fill.AppendJSON([]byte(prefix))
			if (err != nil) != (wantErr != nil) || (err != nil) != tt.fail {
				t.Fatalf("AppendJSON error = %v, reflection error = %v, want failure %v", err, wantErr, tt.fail)
			}
			if err != nil {
				if string(got) != prefix {
					t.Fatalf("AppendJSON failed but changed dst: %q", got)
				}
				return
			}
			if !bytes.Equal(got[len(prefix):], want) {
				t.Fatalf("AppendJSON differs from reflection\n got: %s\nwant: %s", got[len(prefix):], want)
			}
		})
	}
}
