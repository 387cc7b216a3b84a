package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
)

// placeRequest is the body of POST /v1/orders after the JSON checks: every
// field a string but post_only, a boolean; absent fields empty (false).
type placeRequest struct {
	ClientOrderID string `json:"client_order_id" validate:"required,client_order_id"`
	Symbol        string `json:"symbol" validate:"required,symbol"`
	Side          string `json:"side" validate:"required,oneof=buy sell"`
	Type          string `json:"type" validate:"required,oneof=limit market"`
	Quantity      string `json:"quantity" validate:"required"`
	// Price is required for limit orders and must be absent for market
	// orders (priceRule, reported as required_if and excluded_if).
	Price string `json:"price"`
	// TimeInForce is empty for the type's default (gtc for limit, ioc for
	// market); which type allows which is timeInForceRules's.
	TimeInForce string `json:"time_in_force" validate:"omitempty,oneof=gtc ioc fok"`
	// PostOnly is allowed on limit gtc orders only (timeInForceRules).
	PostOnly bool `json:"post_only"`
}

// The indexes of the fields priceRule reads.
var (
	typeField  = fieldIndex("Type")
	priceField = fieldIndex("Price")
)

func fieldIndex(name string) int {
	field, ok := reflect.TypeFor[placeRequest]().FieldByName(name)
	if !ok {
		panic("gateway: placeRequest has no field " + name)
	}
	return field.Index[0]
}

// priceRule is the validator's required_if=Type limit and excluded_if=Type
// market on Price, as one struct-level check: the tag forms look both
// fields up by name on every request.
func priceRule(sl validator.StructLevel) {
	request := sl.Current()
	orderType, price := request.Field(typeField).String(), request.Field(priceField).String()
	switch {
	case orderType == "limit" && price == "":
		sl.ReportError(price, "price", "Price", "required_if", "Type limit")
	case orderType == "market" && price != "":
		sl.ReportError(price, "price", "Price", "excluded_if", "Type market")
	}
}

var placeFields = map[string]bool{
	"client_order_id": true, "symbol": true, "side": true, "type": true, "quantity": true, "price": true,
	"time_in_force": true, "post_only": true,
}

// booleanFields are the request fields that are JSON booleans; every other
// one is a string.
var booleanFields = map[string]bool{"post_only": true}

// idCharacters says whether s is 1 to most bytes of A-Z a-z 0-9 . _ : -,
// the characters of client order ids and request ids: safe in a log line, a
// header and a Redis key as they are. Hand-written rather than a regexp: it
// runs on every request.
func idCharacters(s string, most int) bool {
	if len(s) == 0 || len(s) > most {
		return false
	}
	for i := range len(s) {
		switch b := s[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '.', b == '_', b == ':', b == '-':
		default:
			return false
		}
	}
	return true
}

// instrumentSymbol says whether s is shaped like an instrument symbol: 2 to
// 10 of A-Z 0-9, a '-', and 2 to 10 more (BTC-USD).
func instrumentSymbol(s string) bool {
	base, quote, found := strings.Cut(s, "-")
	return found && symbolPart(base) && symbolPart(quote)
}

func symbolPart(s string) bool {
	if len(s) < 2 || len(s) > 10 {
		return false
	}
	for i := range len(s) {
		if b := s[i]; !('A' <= b && b <= 'Z' || '0' <= b && b <= '9') {
			return false
		}
	}
	return true
}

// maxClientOrderID is the longest client order id, in bytes.
const maxClientOrderID = 64

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(field reflect.StructField) string {
		name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
		return name
	})
	mustRegister := func(tag string, valid func(string) bool) {
		if err := v.RegisterValidation(tag, func(fl validator.FieldLevel) bool {
			return valid(fl.Field().String())
		}); err != nil {
			panic(err)
		}
	}
	mustRegister("client_order_id", func(s string) bool { return idCharacters(s, maxClientOrderID) })
	mustRegister("symbol", instrumentSymbol)
	v.RegisterStructValidation(priceRule, placeRequest{})
	return v
}

// reasons for validator tags, in the words an API user reads.
func validationReason(fe validator.FieldError) string {
	switch fe.Tag() {
	case "required":
		return "is required"
	case "required_if":
		return "is required for limit orders"
	case "excluded_if":
		return "must be absent for market orders; they fill at the reference price"
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case "client_order_id":
		return "must be 1 to 64 characters of A-Z, a-z, 0-9, '.', '_', ':' or '-'"
	case "symbol":
		return "must be an instrument symbol such as BTC-USD"
	}
	return "is invalid (" + fe.Tag() + ")"
}

// readJSONBody reads a size-limited JSON body; the content type must be JSON.
func readJSONBody(r *http.Request, limit int64) ([]byte, error) {
	if contentType := r.Header.Get("Content-Type"); contentType != "application/json" {
		mediaType, _, err := mime.ParseMediaType(contentType)
		if err != nil || mediaType != "application/json" {
			return nil, &requestError{kind: kindMediaType, detail: fmt.Sprintf("Content-Type %q is not application/json", contentType)}
		}
	}
	return readBody(r, limit)
}

// requestBody reads the request's body with read (readBody, readJSONBody)
// up to the body limit, then starts the request timeout again
// (restartDeadline), read or refused.
func (s *Server) requestBody(c echo.Context, read func(*http.Request, int64) ([]byte, error)) ([]byte, error) {
	body, err := read(c.Request(), s.config.BodyLimit)
	s.restartDeadline(c)
	return body, err
}

// readBody reads a body of at most limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if r.ContentLength >= 0 {
		// The server hands over exactly Content-Length bytes, never more:
		// read them into a buffer of that size.
		body := make([]byte, r.ContentLength)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, malformed("", "the body could not be read: %v", err)
		}
		return body, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, limit))
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		return nil, tooLarge(limit)
	}
	if err != nil {
		return nil, malformed("", "the body could not be read: %v", err)
	}
	return body, nil
}

func tooLarge(limit int64) *requestError {
	return &requestError{kind: kindTooLarge, detail: fmt.Sprintf("the body is over the limit of %d bytes", limit)}
}

// decodePlaceRequest holds the body to the document rules before any field is
// looked at: one JSON object, valid UTF-8, no duplicate keys, nothing after it,
// only known fields, and every field a string. Null counts as absent.
func decodePlaceRequest(body []byte) (placeRequest, error) {
	if req, ok := decodePlainPlaceRequest(body); ok {
		return req, nil
	}
	return decodeCheckedPlaceRequest(body)
}

// decodeCheckedPlaceRequest is decodePlaceRequest for any body: it walks the
// whole document with encoding/json and names what is wrong.
func decodeCheckedPlaceRequest(body []byte) (placeRequest, error) {
	if !utf8.Valid(body) {
		return placeRequest{}, malformed("", "the body is not valid UTF-8")
	}
	if err := checkDocument(body); err != nil {
		return placeRequest{}, err
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return placeRequest{}, malformed("", "the body must be a JSON object: %v", err)
	}
	var fields []FieldError
	values := make(map[string]string, len(raw))
	postOnly := false
	for name, value := range raw {
		pointer := "/" + escapePointer(name)
		switch {
		case !placeFields[name]:
			fields = append(fields, FieldError{Pointer: pointer, Reason: "is not a field of an order request"})
		case bytes.Equal(value, []byte("null")):
		case booleanFields[name]:
			switch string(value) {
			case "true":
				postOnly = true
			case "false":
			default:
				fields = append(fields, FieldError{Pointer: pointer, Reason: "must be a JSON boolean, true or false"})
			}
		case value[0] != '"':
			fields = append(fields, FieldError{Pointer: pointer, Reason: "must be a JSON string" + stringHint(name)})
		default:
			var s string
			if err := json.Unmarshal(value, &s); err != nil {
				fields = append(fields, FieldError{Pointer: pointer, Reason: "must be a JSON string"})
				continue
			}
			values[name] = s
		}
	}
	if len(fields) > 0 {
		sortFieldErrors(fields)
		return placeRequest{}, &requestError{kind: kindMalformed, detail: fmt.Sprintf("%d field(s) refused", len(fields)), fields: fields}
	}
	return placeRequest{
		ClientOrderID: values["client_order_id"],
		Symbol:        values["symbol"],
		Side:          values["side"],
		Type:          values["type"],
		Quantity:      values["quantity"],
		Price:         values["price"],
		TimeInForce:   values["time_in_force"],
		PostOnly:      postOnly,
	}, nil
}

// decodePlainPlaceRequest reads the body every client sends, in one pass
// and without allocating per token: one flat object of known fields, no key
// twice, each value a string without escapes (post_only: true or false) or
// null, valid UTF-8, nothing
// after it. ok is false for any other body, which then takes the checked
// path: what this accepts, the checked path accepts with the same result
// (FuzzDecodePlaceRequest holds the two to that), and everything it refuses
// gets the checked path's precise problem.
func decodePlainPlaceRequest(body []byte) (req placeRequest, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return placeRequest{}, false
	}
	// The values are cut from one copy of the body: one allocation, not
	// one a key and a value.
	text := string(body)
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return placeRequest{}, skipSpace(body, i+1) == len(body)
	}
	var seen [8]bool
	for {
		key, next, ok := plainString(text, body, i)
		if !ok {
			return placeRequest{}, false
		}
		i = skipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return placeRequest{}, false
		}
		i = skipSpace(body, i+1)
		if string(key) == "post_only" {
			if seen[7] {
				return placeRequest{}, false
			}
			seen[7] = true
			switch {
			case i+4 <= len(body) && string(body[i:i+4]) == "true":
				req.PostOnly, i = true, i+4
			case i+5 <= len(body) && string(body[i:i+5]) == "false":
				i += 5
			case i+4 <= len(body) && string(body[i:i+4]) == "null":
				i += 4
			default:
				return placeRequest{}, false
			}
		} else {
			var value string
			if i+4 <= len(body) && string(body[i:i+4]) == "null" {
				i += 4
			} else if value, i, ok = plainString(text, body, i); !ok {
				return placeRequest{}, false
			}
			var field *string
			var index int
			switch string(key) {
			case "client_order_id":
				field, index = &req.ClientOrderID, 0
			case "symbol":
				field, index = &req.Symbol, 1
			case "side":
				field, index = &req.Side, 2
			case "type":
				field, index = &req.Type, 3
			case "quantity":
				field, index = &req.Quantity, 4
			case "price":
				field, index = &req.Price, 5
			case "time_in_force":
				field, index = &req.TimeInForce, 6
			default:
				return placeRequest{}, false
			}
			if seen[index] {
				return placeRequest{}, false
			}
			seen[index] = true
			*field = value
		}
		i = skipSpace(body, i)
		if i >= len(body) {
			return placeRequest{}, false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return req, skipSpace(body, i+1) == len(body)
		default:
			return placeRequest{}, false
		}
	}
}

// skipSpace skips JSON whitespace from i.
func skipSpace(body []byte, i int) int {
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\n' || body[i] == '\r') {
		i++
	}
	return i
}

// plainString reads a JSON string at i of body, which text holds too, that
// needs no unescaping: no backslash, no control character, valid UTF-8. It
// returns the string, a part of text, and the index after its closing
// quote.
func plainString(text string, body []byte, i int) (value string, next int, ok bool) {
	if i >= len(body) || body[i] != '"' {
		return "", 0, false
	}
	start := i + 1
	for j := start; j < len(body); j++ {
		switch c := body[j]; {
		case c == '"':
			if !utf8.Valid(body[start:j]) {
				return "", 0, false
			}
			return text[start:j], j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

func stringHint(name string) string {
	if name == "quantity" || name == "price" {
		return `; amounts are decimal strings such as "0.015", never JSON numbers`
	}
	return ""
}

// checkDocument walks the tokens of the body: encoding/json would silently keep
// the last of two duplicate keys and ignore what follows the first value.
func checkDocument(body []byte) error {
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	first, err := decoder.Token()
	if err != nil {
		return malformed("", "the body is not valid JSON: %v", syntaxReason(err))
	}
	if first != json.Delim('{') {
		return malformed("", "the body must be a JSON object")
	}
	if err := checkObject(decoder, "", 1); err != nil {
		return err
	}
	if _, err := decoder.Token(); err != io.EOF {
		return malformed("", "the body holds data after the JSON object")
	}
	return nil
}

// maxDepth bounds nesting: an order is one flat object, and an unbounded walk
// would let a small body of nested brackets cost memory quadratic in its size.
const maxDepth = 8

// checkObject reads an object's members after its '{', refusing repeated keys
// at any depth.
func checkObject(decoder *json.Decoder, pointer string, depth int) error {
	if depth > maxDepth {
		return malformed(pointer, "nests deeper than %d levels", maxDepth)
	}
	seen := make(map[string]bool)
	for decoder.More() {
		token, err := decoder.Token()
		if err != nil {
			return malformed(pointer, "the body is not valid JSON: %v", syntaxReason(err))
		}
		key, _ := token.(string)
		member := pointer + "/" + escapePointer(key)
		if seen[key] {
			return malformed(member, "appears more than once")
		}
		seen[key] = true
		if err := checkValue(decoder, member, depth); err != nil {
			return err
		}
	}
	if _, err := decoder.Token(); err != nil { // the closing '}'
		return malformed(pointer, "the body is not valid JSON: %v", syntaxReason(err))
	}
	return nil
}

func checkValue(decoder *json.Decoder, pointer string, depth int) error {
	token, err := decoder.Token()
	if err != nil {
		return malformed(pointer, "the body is not valid JSON: %v", syntaxReason(err))
	}
	switch token {
	case json.Delim('{'):
		return checkObject(decoder, pointer, depth+1)
	case json.Delim('['):
		if depth+1 > maxDepth {
			return malformed(pointer, "nests deeper than %d levels", maxDepth)
		}
		for i := 0; decoder.More(); i++ {
			if err := checkValue(decoder, pointer+"/"+strconv.Itoa(i), depth+1); err != nil {
				return err
			}
		}
		if _, err := decoder.Token(); err != nil {
			return malformed(pointer, "the body is not valid JSON: %v", syntaxReason(err))
		}
	}
	return nil
}

func syntaxReason(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// placeCommand turns a decoded request into a command for the account: field
// rules, exact amounts, then the instrument's rules. Every refused field is
// reported, not just the first.
func (s *Server) placeCommand(account string, req placeRequest) (orders.PlaceCommand, error) {
	var refused []orders.FieldError
	refuse := func(field, reason string) {
		refused = append(refused, orders.FieldError{Field: field, Reason: reason})
	}
	// errors.AsType, not errors.As: the latter's target is on the heap,
	// every request.
	if err := s.validate.Struct(req); err != nil {
		invalid, ok := errors.AsType[validator.ValidationErrors](err)
		if !ok {
			return orders.PlaceCommand{}, fmt.Errorf("gateway: validate order request: %w", err)
		}
		for _, fe := range invalid {
			refuse(fe.Field(), validationReason(fe))
		}
	}
	cmd := orders.PlaceCommand{
		Account:       account,
		ClientOrderID: req.ClientOrderID,
		Symbol:        req.Symbol,
		Side:          orders.Side(req.Side),
		Type:          orders.OrderType(req.Type),
		TimeInForce:   orders.TimeInForce(req.TimeInForce),
		PostOnly:      req.PostOnly,
	}
	for _, refusal := range timeInForceRules(req) {
		refuse(refusal.Field, refusal.Reason)
	}
	amountsOK := true
	parse := func(field, text string) {
		if text == "" {
			amountsOK = false
			return
		}
		amount, err := orders.ParseAmount(text)
		if amountErr, ok := errors.AsType[*orders.AmountError](err); ok {
			refuse(field, "must be a decimal string such as \"0.015\": it "+amountErr.Reason)
			amountsOK = false
			return
		}
		if field == "quantity" {
			cmd.Quantity = amount
		} else {
			cmd.Price = amount
		}
	}
	parse("quantity", req.Quantity)
	if cmd.Type == orders.Limit {
		parse("price", req.Price)
	}
	var instrument orders.Instrument
	if instrumentSymbol(req.Symbol) {
		var err error
		instrument, err = s.instruments.Lookup(req.Symbol)
		switch {
		case errors.Is(err, orders.ErrUnknownInstrument):
			refuse("symbol", "is not an instrument traded here")
		case err != nil:
			return orders.PlaceCommand{}, err
		case len(refused) == 0 && amountsOK:
			refused = append(refused, instrument.Check(cmd)...)
		case instrument.Halted:
			refuse("symbol", "instrument "+instrument.Symbol+" is halted; it accepts no orders")
		}
	}
	if len(refused) > 0 {
		sortOrderFieldErrors(refused)
		return orders.PlaceCommand{}, &orders.InvalidError{Fields: refused}
	}
	// The band, then the digit budget, on an order that keeps every other
	// rule: each its own problem type, since the same price may pass once
	// the reference moves (and with it the band's top, where a sell or a
	// market order is budgeted). Both are computed from the cached
	// instrument, no round trip.
	if cmd.Type == orders.Limit {
		if err := instrument.CheckBand(cmd.Price); err != nil {
			return orders.PlaceCommand{}, err
		}
	}
	if err := instrument.CheckAmounts(cmd); err != nil {
		return orders.PlaceCommand{}, err
	}
	// The domain's rules of every order: the request's rules above refuse
	// all of it first, in the API's words, so this is the last guard.
	if err := cmd.Validate(); err != nil {
		return orders.PlaceCommand{}, err
	}
	return cmd, nil
}

// timeInForceRules refuses the combinations of type, time_in_force and
// post_only no order may have: a market order is ioc, and only a limit gtc
// order may be post-only. An unknown time in force is the validator's.
func timeInForceRules(req placeRequest) []orders.FieldError {
	var refused []orders.FieldError
	if req.Type == string(orders.Market) && (req.TimeInForce == string(orders.GTC) || req.TimeInForce == string(orders.FOK)) {
		refused = append(refused, orders.FieldError{Field: "time_in_force", Reason: "must be ioc or absent for market orders"})
	}
	if req.PostOnly && (req.Type != string(orders.Limit) || (req.TimeInForce != "" && req.TimeInForce != string(orders.GTC))) {
		refused = append(refused, orders.FieldError{Field: "post_only", Reason: "is allowed only on limit orders whose time_in_force is gtc"})
	}
	return refused
}

// fieldRank orders reported fields as the request documents them.
var fieldRank = map[string]int{"client_order_id": 1, "symbol": 2, "side": 3, "type": 4, "quantity": 5, "price": 6,
	"time_in_force": 7, "post_only": 8}

func lessField(a, b string) bool {
	ra, rb := fieldRank[a], fieldRank[b]
	if ra == 0 {
		ra = len(fieldRank) + 1
	}
	if rb == 0 {
		rb = len(fieldRank) + 1
	}
	if ra != rb {
		return ra < rb
	}
	return a < b
}

func sortFieldErrors(fields []FieldError) {
	sort.SliceStable(fields, func(i, j int) bool {
		return lessField(strings.TrimPrefix(fields[i].Pointer, "/"), strings.TrimPrefix(fields[j].Pointer, "/"))
	})
}

func sortOrderFieldErrors(fields []orders.FieldError) {
	sort.SliceStable(fields, func(i, j int) bool { return lessField(fields[i].Field, fields[j].Field) })
}
