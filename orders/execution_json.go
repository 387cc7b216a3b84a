package orders

import "fmt"

// AppendJSON appends the execution's JSON encoding to dst: exactly what
// encoding/json writes for an Execution by reflection (its json tags),
// without the reflection, for the relay, which renders a fill event for
// each side of every trade. The only error is a time that RFC 3339 cannot
// represent, as with time.Time.MarshalJSON; dst is then returned
// unchanged. Adding a field to Execution means adding it here: the
// differential test in execution_json_test.go fails until then.
func (e Execution) AppendJSON(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, e.ID)
	dst = append(dst, `,"order_id":`...)
	dst = appendJSONString(dst, e.OrderID)
	dst = append(dst, `,"symbol":`...)
	dst = appendJSONString(dst, e.Symbol)
	dst = append(dst, `,"side":`...)
	dst = appendJSONString(dst, string(e.Side))
	dst = append(dst, `,"price":`...)
	dst = appendJSONDecimal(dst, e.Price)
	dst = append(dst, `,"quantity":`...)
	dst = appendJSONDecimal(dst, e.Quantity)
	dst = append(dst, `,"fee":`...)
	dst = appendJSONDecimal(dst, e.Fee)
	dst = append(dst, `,"fee_asset":`...)
	dst = appendJSONString(dst, e.FeeAsset)
	dst = append(dst, `,"liquidity":`...)
	dst = appendJSONString(dst, string(e.Liquidity))
	dst = append(dst, `,"created_at":`...)
	dst, err := appendJSONTime(dst, e.CreatedAt)
	if err != nil {
		return dst[:start], fmt.Errorf("orders: encode execution %s created_at: %w", e.ID, err)
	}
	return append(dst, '}'), nil
}
