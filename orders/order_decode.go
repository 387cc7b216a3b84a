package orders

import (
	"encoding/json"
	"time"
	"unicode/utf8"

	"github.com/govalues/decimal"
)

// unmarshalOrder reads an order's JSON into o, a zero Order, exactly as
// json.Unmarshal does, and fails as it fails. The payloads settlement reads are what
// AppendJSON writes, so it first tries decodeCompactOrder, which reads
// that form without reflection; anything else (whitespace, escapes,
// nulls, unknown, repeated or differently cased keys, numbers where
// strings stand, a syntax error) is left to encoding/json, from scratch.
func unmarshalOrder(payload []byte, o *Order) error {
	if decodeCompactOrder(payload, o) {
		return nil
	}
	*o = Order{}
	return json.Unmarshal(payload, o)
}

// orderField* are the bits of the fields decodeCompactOrder has read.
const (
	orderFieldID = 1 << iota
	orderFieldClientOrderID
	orderFieldAccount
	orderFieldSymbol
	orderFieldSide
	orderFieldType
	orderFieldTimeInForce
	orderFieldPostOnly
	orderFieldQuantity
	orderFieldPrice
	orderFieldStatus
	orderFieldCreatedAt
	orderFieldCanceledAt
	orderFieldCancelReason
	orderFieldRejectReason
	orderFieldDuplicateOf
	orderFieldFilledQuantity
	orderFieldRemainingQuantity
	orderFieldAverageFillPrice
	orderFieldFees
	orderFieldFinishedAt
)

// decodeCompactOrder reads payload into o when it is a compact JSON object
// of Order's fields, each once and under its exact name, strings without
// escapes, amounts and times as quoted strings and post_only a boolean:
// the form in which json.Unmarshal sets each field to the string as it
// stands, or to what the field type's UnmarshalJSON makes of the same
// bytes, which this calls in its place. It returns false, with o partly
// set, for anything else, valid or not.
func decodeCompactOrder(payload []byte, o *Order) bool {
	d := compactDecoder{raw: payload}
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return d.at == len(d.raw)
	}
	var seen uint32
	for {
		key, ok := d.key()
		if !ok {
			return false
		}
		var bit uint32
		switch string(key) {
		case "id":
			bit, ok = orderFieldID, d.str(&o.ID)
		case "client_order_id":
			bit, ok = orderFieldClientOrderID, d.str(&o.ClientOrderID)
		case "account_id":
			bit, ok = orderFieldAccount, d.str(&o.Account)
		case "symbol":
			bit, ok = orderFieldSymbol, d.str(&o.Symbol)
		case "side":
			bit, ok = orderFieldSide, d.known((*string)(&o.Side))
		case "type":
			bit, ok = orderFieldType, d.known((*string)(&o.Type))
		case "time_in_force":
			bit, ok = orderFieldTimeInForce, d.known((*string)(&o.TimeInForce))
		case "post_only":
			bit, ok = orderFieldPostOnly, d.boolean(&o.PostOnly)
		case "quantity":
			bit, ok = orderFieldQuantity, d.decimal(&o.Quantity)
		case "price":
			bit, ok = orderFieldPrice, d.decimalPointer(&o.Price)
		case "status":
			bit, ok = orderFieldStatus, d.known((*string)(&o.Status))
		case "created_at":
			bit, ok = orderFieldCreatedAt, d.time(&o.CreatedAt)
		case "canceled_at":
			bit, ok = orderFieldCanceledAt, d.timePointer(&o.CanceledAt)
		case "cancel_reason":
			bit, ok = orderFieldCancelReason, d.str((*string)(&o.CancelReason))
		case "reject_reason":
			bit, ok = orderFieldRejectReason, d.str((*string)(&o.RejectReason))
		case "duplicate_of":
			bit, ok = orderFieldDuplicateOf, d.str(&o.DuplicateOf)
		case "filled_quantity":
			bit, ok = orderFieldFilledQuantity, d.decimalPointer(&o.FilledQuantity)
		case "remaining_quantity":
			bit, ok = orderFieldRemainingQuantity, d.decimalPointer(&o.RemainingQuantity)
		case "average_fill_price":
			bit, ok = orderFieldAverageFillPrice, d.decimalPointer(&o.AverageFillPrice)
		case "fees":
			bit, ok = orderFieldFees, d.decimalPointer(&o.Fees)
		case "finished_at":
			bit, ok = orderFieldFinishedAt, d.timePointer(&o.FinishedAt)
		default:
			return false
		}
		// A repeated key is left to encoding/json, whose last value wins
		// (and whose UnmarshalJSON calls see the field as set before).
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		if d.next('}') {
			return d.at == len(d.raw)
		}
		if !d.next(',') {
			return false
		}
	}
}

// compactDecoder reads raw from at. Every string it sets is a copy of
// its own (or a constant), not a part of a copy of the whole payload: a
// resting order keeps its ids for as long as it rests.
type compactDecoder struct {
	raw []byte
	at  int
}

// next consumes c, if it comes next.
func (d *compactDecoder) next(c byte) bool {
	if d.at < len(d.raw) && d.raw[d.at] == c {
		d.at++
		return true
	}
	return false
}

// quoted reads a string without escapes, control bytes or invalid UTF-8
// (a string encoding/json reads as it stands) and returns its contents.
func (d *compactDecoder) quoted() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.at
	for d.at < len(d.raw) && plainByte[d.raw[d.at]] {
		d.at++
	}
	if d.at < len(d.raw) && d.raw[d.at] == '"' {
		s := d.raw[start:d.at]
		d.at++
		return s, true
	}
	// Past the plain bytes: a string of valid UTF-8 is read as it stands
	// as well, an escape or a control byte is not.
	for ; d.at < len(d.raw); d.at++ {
		switch c := d.raw[d.at]; {
		case c == '"':
			s := d.raw[start:d.at]
			d.at++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// plainByte: the ASCII bytes a JSON string holds as they stand.
var plainByte = func() (set [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		set[c] = c != '"' && c != '\\'
	}
	return set
}()

func (d *compactDecoder) key() ([]byte, bool) {
	key, ok := d.quoted()
	return key, ok && d.next(':')
}

func (d *compactDecoder) str(into *string) bool {
	s, ok := d.quoted()
	*into = string(s)
	return ok
}

// known reads a string as str does, as the constant of its value when
// it is one of knownValues (no copy).
func (d *compactDecoder) known(into *string) bool {
	s, ok := d.quoted()
	if value, found := knownValues[string(s)]; found {
		*into = value
	} else {
		*into = string(s)
	}
	return ok
}

// knownValues are the sides, types, times in force and statuses.
var knownValues = func() map[string]string {
	values := make(map[string]string)
	for _, v := range []string{string(Buy), string(Sell), string(Limit), string(Market), string(GTC), string(IOC), string(FOK),
		string(StatusPending), string(StatusActive), string(StatusAccepted), string(StatusOpen), string(StatusPartiallyFilled),
		string(StatusFilled), string(StatusCanceled), string(StatusRejected), string(StatusFailed)} {
		values[v] = v
	}
	return values
}()

func (d *compactDecoder) boolean(into *bool) bool {
	switch rest := d.raw[d.at:]; {
	case len(rest) >= 4 && string(rest[:4]) == "true":
		*into, d.at = true, d.at+4
		return true
	case len(rest) >= 5 && string(rest[:5]) == "false":
		*into, d.at = false, d.at+5
		return true
	}
	return false
}

// quotedRaw reads a string as quoted does and returns it quotes and all,
// as encoding/json hands it to an UnmarshalJSON method.
func (d *compactDecoder) quotedRaw() ([]byte, bool) {
	start := d.at
	if _, ok := d.quoted(); !ok {
		return nil, false
	}
	return d.raw[start:d.at:d.at], true
}

func (d *compactDecoder) decimal(into *decimal.Decimal) bool {
	raw, ok := d.quotedRaw()
	return ok && into.UnmarshalJSON(raw) == nil
}

func (d *compactDecoder) decimalPointer(into **decimal.Decimal) bool {
	v := new(decimal.Decimal)
	*into = v
	return d.decimal(v)
}

func (d *compactDecoder) time(into *time.Time) bool {
	raw, ok := d.quotedRaw()
	return ok && into.UnmarshalJSON(raw) == nil
}

func (d *compactDecoder) timePointer(into **time.Time) bool {
	v := new(time.Time)
	*into = v
	return d.time(v)
}
