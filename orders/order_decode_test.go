package orders

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/govalues/decimal"
	"github.com/tidwall/gjson"
)

// checkUnmarshalOrder fails unless unmarshalOrder reads payload as
// json.Unmarshal reads it into a zero Order, error and all.
func checkUnmarshalOrder(t testing.TB, payload []byte) {
	t.Helper()
	var want, got Order
	wantErr := json.Unmarshal(payload, &want)
	err := unmarshalOrder(payload, &got)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("unmarshalOrder(%s) error = %v, json.Unmarshal's = %v", payload, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("unmarshalOrder(%s)\n got %#v\nwant %#v", payload, got, want)
	}
}

// decodeCases are payloads of every field, in AppendJSON's form and in
// the forms that encoding/json reads differently or refuses.
func decodeCases(t testing.TB) [][]byte {
	t.Helper()
	price, filled, remaining, average, fees := decimal.MustParse("65000.50"), decimal.MustParse("0.01"),
		decimal.MustParse("0.005"), decimal.MustParse("65000.5"), decimal.MustParse("0.33")
	finished := time.Date(2026, 12, 5, 9, 33, 45, 123456789, time.UTC)
	full := Order{ID: "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", ClientOrderID: "client-0001", Account: "ACC_1", Symbol: "BTC-USD",
		Side: Buy, Type: Limit, TimeInForce: GTC, PostOnly: true, Quantity: decimal.MustParse("0.015"), Price: &price,
		Status: StatusCanceled, CreatedAt: finished.Add(-time.Second), CanceledAt: &finished, CancelReason: "self_trade_prevention",
		RejectReason: "r", DuplicateOf: "ORD_X", FilledQuantity: &filled, RemainingQuantity: &remaining,
		AverageFillPrice: &average, Fees: &fees, FinishedAt: &finished}
	market := Order{ID: "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3E", Account: "ACC_2", Symbol: "ETH-USD", Side: Sell, Type: Market,
		TimeInForce: IOC, Quantity: decimal.MustParse("3"), Status: StatusPending, CreatedAt: finished}
	var cases [][]byte
	for _, o := range []Order{full, market, {}} {
		payload, err := o.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, payload)
	}
	for _, s := range oddStrings {
		o := market
		o.ClientOrderID, o.Symbol = s, s+"x"
		payload, err := o.AppendJSON(nil)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(s)
		cases = append(cases, payload,
			[]byte(`{"client_order_id":"`+s+`","symbol":`+string(raw)+`}`)) // unescaped, as written
	}
	pending := string(cases[1])
	for _, payload := range []string{
		// Whitespace, order, unknown, repeated and differently cased keys.
		` ` + pending, pending + "\n", strings.ReplaceAll(pending, `,"`, `, "`), strings.ReplaceAll(pending, `":`, `" :`),
		`{"symbol":"A","id":"B"}`, `{"id":"A","other":1}`, `{"id":"A","id":"B"}`, `{"ID":"A"}`, `{"Id":"A","id":"B"}`,
		`{"quantity":"1","quantity":"2"}`, `{"price":"1","price":"2"}`, `{"price":"1","price":null}`,
		// Nulls, numbers and other types.
		`{"id":null}`, `{"price":null}`, `{"quantity":null}`, `{"created_at":null}`, `{"finished_at":null}`,
		`{"post_only":null}`, `{"quantity":1.5}`, `{"price":2}`, `{"quantity":"1e3"}`, `{"quantity":"-0.00"}`,
		`{"post_only":"true"}`, `{"post_only":1}`, `{"post_only":false}`, `{"post_only":true,"post_only":false}`,
		`{"id":1}`, `{"id":true}`, `{"side":["buy"]}`, `{"side":{}}`, `{"created_at":"2026-12-05T09:33:45Z"}`,
		`{"created_at":"2026-12-05 09:33:45Z"}`, `{"created_at":"2026-12-05T09:33:45+01:00"}`, `{"created_at":1}`,
		`{"canceled_at":"2026-12-05T09:33:45.5-07:00"}`, `{"quantity":"x"}`, `{"quantity":""}`, `{"price":"1\u0030"}`,
		`{"quantity":"99999999999999999999"}`, `{"quantity":"0.0000000000000000000001"}`,
		// Escapes, control bytes, invalid UTF-8.
		`{"id":"a\"b"}`, `{"id":"a\u0041"}`, `{"i\u0064":"a"}`, `{"id":"a` + "\t" + `"}`, `{"id":"` + "\xff" + `"}`,
		`{"id":"` + "é\u2028" + `"}`,
		// Refused.
		``, `{`, `}`, `{}`, `{}}`, `{} x`, `[]`, `null`, `"x"`, `{"id"}`, `{"id":}`, `{"id":"a",}`, `{,}`,
		`{"id":"a"`, `{"id":"a" "b":"c"}`, `{"id":"a`, `{"post_only":tru}`, `{"post_only":truex}`,
	} {
		cases = append(cases, []byte(payload))
	}
	return cases
}

func TestUnmarshalOrderMatchesEncodingJSON(t *testing.T) {
	for _, payload := range decodeCases(t) {
		checkUnmarshalOrder(t, payload)
	}
}

// The compact form is read without encoding/json: a change of Order's
// JSON that AppendJSON writes and decodeCompactOrder does not read would
// make every job take the slow way.
func TestDecodeCompactOrderReadsAppendJSON(t *testing.T) {
	for _, payload := range decodeCases(t)[:3] {
		var o Order
		if !decodeCompactOrder(payload, &o) {
			t.Errorf("decodeCompactOrder refused AppendJSON's %s", payload)
		}
	}
}

func FuzzUnmarshalOrder(f *testing.F) {
	for _, payload := range decodeCases(f) {
		f.Add(payload)
	}
	f.Fuzz(func(t *testing.T, payload []byte) { checkUnmarshalOrder(t, payload) })
}

// decodeOrderGJSON reads what decodeCompactOrder reads, with gjson, for
// BenchmarkUnmarshalOrder to weigh decodeCompactOrder against a library:
// the whole payload checked by gjson.ValidBytes, then each field under its
// exact name, once, a string without escapes or invalid UTF-8, amounts and
// times by their UnmarshalJSON.
func decodeOrderGJSON(payload []byte, o *Order) bool {
	if !gjson.ValidBytes(payload) {
		return false
	}
	ok, seen := true, uint32(0)
	plain := func(r gjson.Result) bool {
		return r.Type == gjson.String && strings.IndexByte(r.Raw, '\\') < 0 && utf8.ValidString(r.Str)
	}
	// Each string its own copy, the sides, types, times in force and
	// statuses their constants, as the reader sets them: not parts of the
	// one copy of the payload gjson reads, which a resting order would
	// keep whole.
	str := func(value gjson.Result, into *string) {
		*into, ok = value.Str, plain(value)
		if known, found := knownValues[*into]; found {
			*into = known
		} else {
			*into = strings.Clone(*into)
		}
	}
	dec := func(value gjson.Result, into *decimal.Decimal) {
		ok = plain(value) && into.UnmarshalJSON([]byte(value.Raw)) == nil
	}
	gjson.ParseBytes(payload).ForEach(func(key, value gjson.Result) bool {
		if !plain(key) {
			ok = false
			return false
		}
		var bit uint32
		switch key.Str {
		case "id":
			bit = orderFieldID
			str(value, &o.ID)
		case "client_order_id":
			bit = orderFieldClientOrderID
			str(value, &o.ClientOrderID)
		case "account_id":
			bit = orderFieldAccount
			str(value, &o.Account)
		case "symbol":
			bit = orderFieldSymbol
			str(value, &o.Symbol)
		case "side":
			bit = orderFieldSide
			str(value, (*string)(&o.Side))
		case "type":
			bit = orderFieldType
			str(value, (*string)(&o.Type))
		case "time_in_force":
			bit = orderFieldTimeInForce
			str(value, (*string)(&o.TimeInForce))
		case "post_only":
			bit = orderFieldPostOnly
			o.PostOnly, ok = value.Type == gjson.True, value.IsBool()
		case "quantity":
			bit = orderFieldQuantity
			dec(value, &o.Quantity)
		case "price":
			bit = orderFieldPrice
			o.Price = new(decimal.Decimal)
			dec(value, o.Price)
		case "status":
			bit = orderFieldStatus
			str(value, (*string)(&o.Status))
		case "created_at":
			bit = orderFieldCreatedAt
			ok = plain(value) && o.CreatedAt.UnmarshalJSON([]byte(value.Raw)) == nil
		default:
			ok = false
		}
		ok = ok && seen&bit == 0
		seen |= bit
		return ok
	})
	return ok
}

var unmarshalSink Order

// BenchmarkUnmarshalOrder weighs the ways to read a pending limit
// order's payload (BenchmarkDecodeOrder's): encoding/json, gjson and
// decodeCompactOrder (with unmarshalOrder around it). Read the ratios:
// the hand-written reader stays only while it is at least twice as fast
// as gjson doing the same (each string set its own copy).
func BenchmarkUnmarshalOrder(b *testing.B) {
	order, err := NewOrder(PlaceCommand{Account: "ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", ClientOrderID: "client-order-0001",
		Symbol: "BTC-USD", Side: Buy, Type: Limit, Quantity: decimal.MustParse("0.015"), Price: decimal.MustParse("65000.50")})
	if err != nil {
		b.Fatal(err)
	}
	payload, err := order.Payload()
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name   string
		decode func([]byte, *Order) bool
	}{
		{"encoding-json", func(p []byte, o *Order) bool { return json.Unmarshal(p, o) == nil }},
		{"gjson", decodeOrderGJSON},
		{"compact", func(p []byte, o *Order) bool { return unmarshalOrder(p, o) == nil }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var o Order
				if !bc.decode(payload, &o) || o.ID != order.ID {
					b.Fatal("not decoded")
				}
				unmarshalSink = o
			}
		})
	}
}

// TestDecodeCompactOrderFieldAssumptions holds Order to what
// decodeCompactOrder assumes of its fields: each under a plain json tag,
// and each a plain string (set as it stands, no UnmarshalJSON or
// UnmarshalText of its own to skip), a decimal, a time or a bool, read
// by name. A field added to Order fails here until the reader knows it.
func TestDecodeCompactOrderFieldAssumptions(t *testing.T) {
	order := reflect.TypeFor[Order]()
	unmarshaler, textUnmarshaler := reflect.TypeFor[json.Unmarshaler](), reflect.TypeFor[encoding.TextUnmarshaler]()
	for i := range order.NumField() {
		f := order.Field(i)
		tag := f.Tag.Get("json")
		name, options, _ := strings.Cut(tag, ",")
		if f.Anonymous || name == "" || name == "-" || strings.Contains(options, "string") {
			t.Errorf("field %s: tag %q is outside what decodeCompactOrder reads", f.Name, tag)
		}
		switch f.Type {
		case reflect.TypeFor[decimal.Decimal](), reflect.TypeFor[*decimal.Decimal](),
			reflect.TypeFor[time.Time](), reflect.TypeFor[*time.Time](), reflect.TypeFor[bool]():
			continue
		}
		pointer := reflect.PointerTo(f.Type)
		if f.Type.Kind() != reflect.String || pointer.Implements(unmarshaler) || pointer.Implements(textUnmarshaler) {
			t.Errorf("field %s: type %s is not a plain string", f.Name, f.Type)
		}
		var o Order
		if !decodeCompactOrder([]byte(`{"`+name+`":"x"}`), &o) {
			t.Errorf("field %s: decodeCompactOrder does not read %q", f.Name, name)
		}
	}
}
