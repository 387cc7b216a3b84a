package orders

import (
	"fmt"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/internal/jsonstring"
)

// orderJSONSize is room for a typical pending order's JSON, so encoding one
// into a buffer of this capacity does not grow it.
const orderJSONSize = 320

// AppendJSON appends the order's JSON encoding to dst: exactly what
// encoding/json writes for an Order by reflection (the json tags on Order),
// without the reflection, for the path every placed order takes (its queue
// job's payload, which is also the placement's answer). The only error is a
// time that RFC 3339 cannot represent, as with time.Time.MarshalJSON; dst is
// then returned unchanged.
//
// It is not Order's MarshalJSON: encoding/json re-scans whatever a
// MarshalJSON returns, which costs more than the reflection it replaces.
// The output is valid, compact JSON. Adding a field to Order means adding
// it here: the differential test in order_json_test.go fails until then.
func (o Order) AppendJSON(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, o.ID)
	dst = append(dst, `,"client_order_id":`...)
	dst = appendJSONString(dst, o.ClientOrderID)
	dst = append(dst, `,"account_id":`...)
	dst = appendJSONString(dst, o.Account)
	dst = append(dst, `,"symbol":`...)
	dst = appendJSONString(dst, o.Symbol)
	dst = append(dst, `,"side":`...)
	dst = appendJSONString(dst, string(o.Side))
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, string(o.Type))
	dst = append(dst, `,"time_in_force":`...)
	dst = appendJSONString(dst, string(o.TimeInForce))
	if o.PostOnly {
		dst = append(dst, `,"post_only":true`...)
	}
	dst = append(dst, `,"quantity":`...)
	dst = appendJSONDecimal(dst, o.Quantity)
	if o.Price != nil {
		dst = append(dst, `,"price":`...)
		dst = appendJSONDecimal(dst, *o.Price)
	}
	dst = append(dst, `,"status":`...)
	dst = appendJSONString(dst, string(o.Status))
	dst = append(dst, `,"created_at":`...)
	dst, err := appendJSONTime(dst, o.CreatedAt)
	if err != nil {
		return dst[:start], fmt.Errorf("orders: encode order %s created_at: %w", o.ID, err)
	}
	if o.CanceledAt != nil {
		dst = append(dst, `,"canceled_at":`...)
		if dst, err = appendJSONTime(dst, *o.CanceledAt); err != nil {
			return dst[:start], fmt.Errorf("orders: encode order %s canceled_at: %w", o.ID, err)
		}
	}
	if o.CancelReason != "" {
		dst = append(dst, `,"cancel_reason":`...)
		dst = appendJSONString(dst, string(o.CancelReason))
	}
	if o.RejectReason != "" {
		dst = append(dst, `,"reject_reason":`...)
		dst = appendJSONString(dst, string(o.RejectReason))
	}
	if o.DuplicateOf != "" {
		dst = append(dst, `,"duplicate_of":`...)
		dst = appendJSONString(dst, o.DuplicateOf)
	}
	for _, amount := range [...]struct {
		field string
		value *decimal.Decimal
	}{
		{`,"filled_quantity":`, o.FilledQuantity},
		{`,"remaining_quantity":`, o.RemainingQuantity},
		{`,"average_fill_price":`, o.AverageFillPrice},
		{`,"fees":`, o.Fees},
	} {
		if amount.value != nil {
			dst = append(dst, amount.field...)
			dst = appendJSONDecimal(dst, *amount.value)
		}
	}
	if o.FinishedAt != nil {
		dst = append(dst, `,"finished_at":`...)
		if dst, err = appendJSONTime(dst, *o.FinishedAt); err != nil {
			return dst[:start], fmt.Errorf("orders: encode order %s finished_at: %w", o.ID, err)
		}
	}
	return append(dst, '}'), nil
}

// appendJSONDecimal appends d as decimal.Decimal.MarshalJSON writes it: a
// quoted numeric string, which needs no escaping.
func appendJSONDecimal(dst []byte, d decimal.Decimal) []byte {
	dst = append(dst, '"')
	// AppendText of a Decimal cannot fail; it returns an error only to
	// satisfy encoding.TextAppender.
	dst, _ = d.AppendText(dst)
	return append(dst, '"')
}

// appendJSONTime appends t as time.Time.MarshalJSON writes it: quoted
// RFC 3339 with nanoseconds, which needs no escaping. On error dst may hold
// a partial time; the caller discards it.
func appendJSONTime(dst []byte, t time.Time) ([]byte, error) {
	dst = append(dst, '"')
	text, err := t.AppendText(dst)
	if err != nil {
		return dst, err
	}
	return append(text, '"'), nil
}

// appendJSONString appends s quoted and escaped as encoding/json escapes a
// string by default, HTML characters included.
func appendJSONString(dst []byte, s string) []byte {
	return jsonstring.Append(dst, s, jsonstring.AsEncodingJSON)
}
