package orders

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/govalues/decimal"
)

// Order's JSON is the queue job's payload and the API's order body, so the
// hand-written encoder must write exactly what encoding/json writes by
// reflection. orderFields is that reference: a defined type does not inherit
// Order's methods, so json.Marshal encodes it field by field from the same
// json tags even if Order gains a marshaling method.
type orderFields Order

// checkOrderJSON fails unless every way of encoding o gives the reflection
// encoding's bytes, or fails whenever it fails.
func checkOrderJSON(t testing.TB, o Order) {
	t.Helper()
	want, wantErr := json.Marshal(orderFields(o))

	const prefix = `[1,`
	appended, err := o.AppendJSON([]byte(prefix))
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("AppendJSON error = %v, reflection error = %v\norder: %#v", err, wantErr, o)
	}
	if wantErr != nil {
		if string(appended) != prefix {
			t.Fatalf("AppendJSON failed but changed dst: %q", appended)
		}
		return
	}
	if got := appended[len(prefix):]; !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON differs from reflection\n got: %s\nwant: %s\norder: %#v", got, want, o)
	}
	// Stored as it is, so it must be compact, valid JSON on its own.
	var compact bytes.Buffer
	if err := json.Compact(&compact, appended[len(prefix):]); err != nil || !bytes.Equal(compact.Bytes(), want) {
		t.Fatalf("AppendJSON output is not compact, valid JSON: %v", err)
	}
}

// oddStrings are the strings whose escaping differs between naive and
// encoding/json quoting.
var oddStrings = []string{
	"", "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", "BTC-USD", "plain ascii ~!@#$%^*()_+=",
	`"`, `\`, `\"`, "/", "<", ">", "&", "<script>&amp;</script>",
	"\x00", "\x01", "\x1f", "\x7f", "\b", "\f", "\n", "\r", "\t", "a\u0000b",
	"é", "€", "日本語", "😀", "\u2028", "\u2029", "x\u2028y\u2029z", "\ufffd",
	"\xff", "\xc3", "a\xc3(b", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xf0\x9f\x98",
}

func TestOrderJSONMatchesReflection(t *testing.T) {
	price := decimal.MustParse("65000.50")
	negative := decimal.MustParse("-0.000000000000000001")
	huge := decimal.MustParse("9999999999999999999")
	zero := decimal.Decimal{}
	scaledZero := decimal.MustParse("0.000")
	created := time.Date(2024, 5, 17, 9, 30, 0, 123456789, time.UTC)
	wholeSecond := time.Date(2024, 5, 17, 9, 30, 0, 0, time.UTC)
	eastern := time.Date(2024, 12, 31, 23, 59, 59, 1000, time.FixedZone("EST", -5*3600))
	oddOffset := time.Date(1999, 1, 2, 3, 4, 5, 600000000, time.FixedZone("", 5*3600+45*60+30))
	farOffset := time.Date(2020, 1, 1, 0, 0, 0, 0, time.FixedZone("", 23*3600+59*60))
	local := time.Date(2024, 7, 1, 12, 0, 0, 42, time.Local)
	zeroTime := time.Time{}
	yearOne := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)
	yearMax := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
	pending := Order{
		ID: "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", ClientOrderID: "c-1", Account: "ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D",
		Symbol: "BTC-USD", Side: Buy, Type: Limit, Quantity: decimal.MustParse("0.010"), Price: &price,
		Status: StatusPending, CreatedAt: created,
	}
	with := func(change func(*Order)) Order {
		o := pending
		change(&o)
		return o
	}
	tests := []struct {
		name  string
		order Order
	}{
		{"zero order", Order{}},
		{"pending limit", pending},
		{"pending market", with(func(o *Order) { o.Type, o.Price = Market, nil })},
		{"filled", with(func(o *Order) {
			o.Status, o.AverageFillPrice, o.FilledQuantity, o.RemainingQuantity, o.Fees, o.FinishedAt = StatusFilled, &price, &scaledZero, &zero, &huge, &eastern
		})},
		{"resting post-only gtc", with(func(o *Order) {
			o.Status, o.TimeInForce, o.PostOnly, o.FilledQuantity, o.RemainingQuantity = StatusOpen, GTC, true, &zero, &price
		})},
		{"canceled by the market", with(func(o *Order) {
			o.Status, o.TimeInForce, o.CancelReason, o.FinishedAt = StatusCanceled, IOC, CancelUnfilledIOC, &created
		})},
		{"rejected", with(func(o *Order) {
			o.Status, o.RejectReason, o.FinishedAt = StatusRejected, "insufficient_funds", &wholeSecond
		})},
		{"a duplicate", with(func(o *Order) {
			o.Status, o.RejectReason, o.DuplicateOf, o.FinishedAt = StatusRejected, ReasonDuplicateClientOrderID, "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3E", &wholeSecond
		})},
		{"canceled", with(func(o *Order) { o.Status, o.CanceledAt, o.FinishedAt = StatusCanceled, &created, &created })},
		{"pointers to zero values", with(func(o *Order) {
			o.Price, o.CanceledAt, o.AverageFillPrice, o.FilledQuantity, o.RemainingQuantity, o.Fees, o.FinishedAt = &zero, &zeroTime, &zero, &scaledZero, &zero, &zero, &zeroTime
		})},
		{"negative and huge amounts", with(func(o *Order) { o.Quantity, o.Price = negative, &huge })},
		{"unknown enum values", with(func(o *Order) {
			o.Side, o.Type, o.Status, o.RejectReason, o.TimeInForce, o.CancelReason = "<b>", "stop&go", "\u2028", "\xff", "<i>", "&"
		})},
		{"whole-second time", with(func(o *Order) { o.CreatedAt = wholeSecond })},
		{"offset with seconds", with(func(o *Order) { o.CreatedAt = oddOffset })},
		{"offset 23:59", with(func(o *Order) { o.CreatedAt = farOffset })},
		{"local time", with(func(o *Order) { o.CreatedAt = local })},
		{"monotonic reading", with(func(o *Order) { o.CreatedAt = time.Now() })},
		{"year 0", with(func(o *Order) { o.CreatedAt = yearOne })},
		{"year 9999", with(func(o *Order) { o.CreatedAt, o.FinishedAt = yearMax, &yearMax })},
		{"created year 10000 fails", with(func(o *Order) { o.CreatedAt = yearMax.Add(time.Nanosecond) })},
		{"created year -1 fails", with(func(o *Order) { o.CreatedAt = yearOne.Add(-time.Nanosecond) })},
		{"canceled year 10000 fails", with(func(o *Order) { t := yearMax.Add(time.Second); o.CanceledAt = &t })},
		{"finished offset 24:00 fails", with(func(o *Order) {
			t := created.In(time.FixedZone("", 24*3600))
			o.FinishedAt = &t
		})},
	}
	for _, s := range oddStrings {
		tests = append(tests, struct {
			name  string
			order Order
		}{"string " + strings.ToValidUTF8(s, "?"), with(func(o *Order) {
			o.ID, o.ClientOrderID, o.Account, o.Symbol = s, "x"+s+"y", s+s, s
			o.Side, o.Type, o.Status, o.RejectReason = Side(s), OrderType(s), Status(s), RejectReason(s)
			o.DuplicateOf = s
		})})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkOrderJSON(t, tt.order) })
	}
}

// TestOrderJSONCoversEveryField sets Order's fields by reflection, so a
// field added to Order that AppendJSON does not write, or writes under
// another key, fails here.
func TestOrderJSONCoversEveryField(t *testing.T) {
	full := reflect.ValueOf(&Order{}).Elem()
	for i := range full.NumField() {
		field := full.Type().Field(i)
		one := reflect.ValueOf(&Order{}).Elem()
		setOddValue(t, field, one.Field(i))
		setOddValue(t, field, full.Field(i))
		t.Run(field.Name, func(t *testing.T) { checkOrderJSON(t, one.Interface().(Order)) })
	}
	checkOrderJSON(t, full.Interface().(Order))
}

// setOddValue gives v, field's value, a non-zero value that needs escaping
// or is otherwise easy to encode wrong.
func setOddValue(t testing.TB, field reflect.StructField, v reflect.Value) {
	t.Helper()
	amount := decimal.MustParse("-12.3400")
	at := time.Date(2031, 2, 3, 4, 5, 6, 7, time.FixedZone("", -(9*3600+30*60)))
	switch {
	case v.Kind() == reflect.String:
		v.SetString(field.Name + ` <"\` + "\x01\u2028é\xff")
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.Type() == reflect.TypeFor[decimal.Decimal]():
		v.Set(reflect.ValueOf(amount))
	case v.Type() == reflect.TypeFor[*decimal.Decimal]():
		v.Set(reflect.ValueOf(&amount))
	case v.Type() == reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(at))
	case v.Type() == reflect.TypeFor[*time.Time]():
		v.Set(reflect.ValueOf(&at))
	default:
		t.Fatalf("Order.%s has type %s, which this test cannot fill: teach setOddValue, randomOrder and Order.AppendJSON about it",
			field.Name, field.Type)
	}
}

func TestOrderJSONRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	iterations := 20000
	if testing.Short() {
		iterations = 2000
	}
	for range iterations {
		checkOrderJSON(t, randomOrder(rng))
	}
}

// randomOrder sets each field of Order, or leaves it unset, at random.
func randomOrder(rng *rand.Rand) Order {
	maybeDecimal := func() *decimal.Decimal {
		if rng.IntN(3) == 0 {
			return nil
		}
		d := randomDecimal(rng)
		return &d
	}
	maybeTime := func() *time.Time {
		if rng.IntN(3) == 0 {
			return nil
		}
		t := randomTime(rng)
		return &t
	}
	o := Order{
		ID:                randomString(rng),
		ClientOrderID:     randomString(rng),
		Account:           randomString(rng),
		Symbol:            randomString(rng),
		Side:              Side(randomString(rng)),
		Type:              OrderType(randomString(rng)),
		TimeInForce:       TimeInForce(randomString(rng)),
		PostOnly:          rng.IntN(2) == 0,
		Quantity:          randomDecimal(rng),
		Price:             maybeDecimal(),
		Status:            Status(randomString(rng)),
		CreatedAt:         randomTime(rng),
		CanceledAt:        maybeTime(),
		FilledQuantity:    maybeDecimal(),
		RemainingQuantity: maybeDecimal(),
		AverageFillPrice:  maybeDecimal(),
		Fees:              maybeDecimal(),
		FinishedAt:        maybeTime(),
	}
	if rng.IntN(2) == 0 {
		o.RejectReason = RejectReason(randomString(rng))
	}
	if rng.IntN(2) == 0 {
		o.CancelReason = CancelReason(randomString(rng))
	}
	if rng.IntN(2) == 0 {
		o.DuplicateOf = randomString(rng)
	}
	return o
}

func randomString(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(6) {
		switch rng.IntN(3) {
		case 0:
			b.WriteString(oddStrings[rng.IntN(len(oddStrings))])
		case 1:
			b.WriteByte(byte(rng.IntN(256)))
		default:
			b.WriteRune(rune(rng.IntN(0x110000)))
		}
	}
	return b.String()
}

func randomDecimal(rng *rand.Rand) decimal.Decimal {
	if rng.IntN(10) == 0 {
		return decimal.Decimal{}
	}
	digits := 1 + rng.IntN(decimal.MaxPrec)
	var b strings.Builder
	if rng.IntN(2) == 0 {
		b.WriteByte('-')
	}
	point := rng.IntN(digits + 1)
	for i := range digits {
		if i == point && i > 0 {
			b.WriteByte('.')
		}
		b.WriteByte(byte('0' + rng.IntN(10)))
	}
	return decimal.MustParse(b.String())
}

func randomTime(rng *rand.Rand) time.Time {
	var zone *time.Location
	switch rng.IntN(4) {
	case 0:
		zone = time.UTC
	case 1:
		zone = time.Local
	default:
		// Mostly valid RFC 3339 offsets, sometimes with seconds (which
		// RFC 3339 drops) and now and then 24h or more (which it refuses).
		zone = time.FixedZone("", rng.IntN(2*25*3600)-25*3600)
	}
	var nanos int
	switch rng.IntN(3) {
	case 0:
		nanos = 0
	case 1:
		nanos = rng.IntN(1000) * 1000000
	default:
		nanos = rng.IntN(1000000000)
	}
	if rng.IntN(20) == 0 {
		return time.Time{}
	}
	// Years -50 to 10050, so a few fall outside what RFC 3339 can write.
	seconds := rng.Int64N(10100*365*24*3600) - (1970+50)*365*24*3600
	return time.Unix(seconds, int64(nanos)).In(zone)
}

func FuzzOrderJSON(f *testing.F) {
	f.Add("ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", "c-1", "ACC_1", "BTC-USD", "buy", "limit", "pending", "", "0.010", "65000.5",
		int64(1715938200), int64(123456789), 0, uint8(0b1))
	f.Add("<&>", "\u2028\xff", "\x00\x1f", `"\`, "é", "😀", "\t", "r", "-1.0", "0.000", int64(-62135596800), int64(0), -3600, uint8(0xff))
	f.Add("", "", "", "", "", "", "", "", "0", "9999999999999999999", int64(253402300800), int64(0), 86400, uint8(0x7f))
	f.Fuzz(func(t *testing.T, id, client, account, symbol, side, typ, status, reason, quantity, amount string,
		seconds, nanos int64, offset int, set uint8) {
		qty, err := decimal.Parse(quantity)
		if err != nil {
			qty = decimal.Decimal{}
		}
		var optionalAmount *decimal.Decimal
		if d, err := decimal.Parse(amount); err == nil {
			optionalAmount = &d
		}
		at := time.Unix(seconds, nanos).In(time.FixedZone("", offset))
		o := Order{ID: id, ClientOrderID: client, Account: account, Symbol: symbol, Side: Side(side), Type: OrderType(typ),
			Quantity: qty, Status: Status(status), CreatedAt: at, RejectReason: RejectReason(reason)}
		if set&(1<<6) != 0 {
			o.DuplicateOf = reason
		}
		for i, p := range []**decimal.Decimal{&o.Price, &o.AverageFillPrice, &o.FilledQuantity, &o.Fees} {
			if set&(1<<i) != 0 {
				*p = optionalAmount
			}
		}
		if set&(1<<4) != 0 {
			o.CanceledAt = &at
		}
		if set&(1<<5) != 0 {
			o.FinishedAt = &at
		}
		checkOrderJSON(t, o)
	})
}

// TestPlaceJobPayloadIsTheOrdersJSON: the payload PlaceJob stores is what
// reflection wrote for the order before, so workers and older readers of
// queued jobs see no change.
func TestPlaceJobPayloadIsTheOrdersJSON(t *testing.T) {
	for _, cmd := range []PlaceCommand{
		{Account: "ACC_1", ClientOrderID: "c-1", Symbol: "BTC-USD", Side: Buy, Type: Limit,
			Quantity: decimal.MustParse("0.010"), Price: decimal.MustParse("65000.50")},
		{Account: "ACC_<2>", ClientOrderID: "ünï\u2028", Symbol: "ETH-USD", Side: Sell, Type: Market,
			Quantity: decimal.MustParse("3")},
	} {
		order, err := NewOrder(cmd)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := order.Payload()
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(orderFields(order))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(payload, want) {
			t.Errorf("payload\n got: %s\nwant: %s", payload, want)
		}
		if len(payload) > orderJSONSize {
			t.Errorf("a %d-byte payload outgrew its %d-byte buffer", len(payload), orderJSONSize)
		}
	}
}

// payloadSink keeps each benchmark's payload on the heap, as a placement's
// payload is (it leaves in the queue job): without it the compiler could
// keep AppendJSON's buffer on the stack and hide its allocation.
var payloadSink []byte

// BenchmarkOrderJSON compares encoding/json's Marshal of an Order (the
// library AppendJSON replaces) with AppendJSON into a fresh buffer of
// orderJSONSize, as the placement path calls it, on the pending limit
// order every placement encodes; read the ratio between the
// sub-benchmarks. AppendJSON stays only while it is at least twice as fast.
func BenchmarkOrderJSON(b *testing.B) {
	order, err := NewOrder(PlaceCommand{Account: "ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", ClientOrderID: "client-order-0001",
		Symbol: "BTC-USD", Side: Buy, Type: Limit, Quantity: decimal.MustParse("0.015"), Price: decimal.MustParse("65000.50")})
	if err != nil {
		b.Fatal(err)
	}
	fields := orderFields(order)
	b.Run("reflection", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if payloadSink, err = json.Marshal(fields); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if payloadSink, err = order.AppendJSON(make([]byte, 0, orderJSONSize)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
