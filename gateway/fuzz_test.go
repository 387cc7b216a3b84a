package gateway

// Fuzzing the order request path: untrusted bytes → readJSONBody →
// decodePlaceRequest → field validation → exact amounts → instrument rules.
//
//	go test -run '^$' -fuzz '^FuzzDecodePlaceRequest$' -fuzztime 60s ./gateway/
//
// (or `make fuzz`). The seeds are the f.Add calls below plus every file in
// testdata/fuzz/FuzzDecodePlaceRequest/. A failing input the fuzzer finds is
// written there; plain `go test` runs every file of that directory as a
// subtest, so a crasher kept there stays a regression test. Inputs that only
// widened coverage go to the build cache ($GOCACHE/fuzz), not to the repo.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-playground/validator/v10"
	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
)

// fuzzDecodeSeeds are the essential seeds; testdata/fuzz holds more.
var fuzzDecodeSeeds = []string{
	`{"client_order_id":"demo-1","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00"}`,
	`{"client_order_id":"demo-2","symbol":"ETH-USD","side":"sell","type":"market","quantity":"0.500"}`,
	`{"client_order_id":"demo-3","symbol":"ETH-BTC","side":"buy","type":"market","quantity":"1.000","price":null}`,
	`{"client_order_id":"a","symbol":"BTC-USD","side":"buy","type":"limit","quantity":0.01,"price":"50000.00"}`,
	`{"client_order_id":"a","symbol":"BTC-USD","side":"buy","side":"sell","type":"market","quantity":"1"}`,
	`{"client_order_id":"a","symbol":"BTC-USD","side":"buy","s\u0069de":"sell","type":"market","quantity":"1"}`,
	`{"client_order_id":"a","symbol":"BTC-USD","side":"buy","type":"market","quantity":"1"} {}`,
	`{"client_order_id":"a","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"1e5","price":"1E2"}`,
	`{"client_order_id":"a","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"123456789012345678901234567890","price":"0.01"}`,
	`{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[{"a":1,"a":2}]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"client_order_id":null,"symbol":null,"side":null,"type":null,"quantity":null,"price":null}`,
	`[{"client_order_id":"a"}]`,
	`{"client_order_id":"\u00e9t\u00e9","symbol":"BTC\u2010USD","side":"buy","type":"market","quantity":"\u0661"}`,
	"{\"client_order_id\":\"a\",\"symbol\":\"BTC-USD\",\"side\":\"buy\",\"type\":\"market\",\"quantity\":\"\xff\"}",
	`{"quantity":1e400,"price":-0.0}`,
	``,
	` { "client_order_id" : "a" ,` + "\t\r\n" + `"symbol":"BTC-USD","price": null } `,
	`{}`,
	`{} x`,
	`{"price":nullx}`,
	`{"price":"1","price":null}`,
	`{"symbol":"BTC-USD",}`,
	`{"symbol":"café","side":"é"}`,
	`{"side":"b\"uy"}`,
	`{"client_order_id":"demo-4","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00","time_in_force":"ioc"}`,
	`{"client_order_id":"demo-5","symbol":"BTC-USD","side":"sell","type":"limit","quantity":"0.01","price":"51000","time_in_force":"gtc","post_only":true}`,
	`{"client_order_id":"demo-6","symbol":"BTC-USD","side":"buy","type":"market","quantity":"0.01","time_in_force":"fok","post_only":false}`,
	`{"client_order_id":"demo-7","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"1","price":"10.00"}`,
	`{"post_only":"true","time_in_force":true}`,
	`{"post_only":null,"post_only":true}`,
	`{"post_only":truex}`,
}

// fuzzRequestFields are the members an order request may have, written out
// here rather than taken from placeFields so the test is a second opinion.
var fuzzRequestFields = []string{"client_order_id", "symbol", "side", "type", "quantity", "price", "time_in_force", "post_only"}

// fuzzInstruments is the instruments table as the migrations seed it (see the
// README), built by hand: placement.Instruments is only filled from PostgreSQL.
func fuzzInstruments(t testing.TB) map[string]orders.Instrument {
	amount := func(s string) decimal.Decimal {
		d, err := orders.ParseAmount(s)
		if err != nil {
			t.Fatalf("amount %q: %v", s, err)
		}
		return d
	}
	return map[string]orders.Instrument{
		"BTC-USD": {Symbol: "BTC-USD", Base: "BTC", Quote: "USD", TickSize: amount("0.01"), LotSize: amount("0.00001"),
			MinNotional: amount("10"), ReferencePrice: amount("50000"), PriceBandPercent: amount("10")},
		"ETH-USD": {Symbol: "ETH-USD", Base: "ETH", Quote: "USD", TickSize: amount("0.05"), LotSize: amount("0.001"),
			MinNotional: amount("10"), ReferencePrice: amount("3000"), PriceBandPercent: amount("10")},
		"ETH-BTC": {Symbol: "ETH-BTC", Base: "ETH", Quote: "BTC", TickSize: amount("0.00001"), LotSize: amount("0.005"),
			MinNotional: amount("0.0001"), ReferencePrice: amount("0.06"), PriceBandPercent: amount("10")},
	}
}

// FuzzDecodePlaceRequest: for any body, no panic; every refusal is a
// *requestError or *orders.InvalidError that problemFor maps to a 4xx (never
// a 5xx, never an internal error); an accepted body is one flat JSON object
// of known string (or null) members without repeats, and its fields survive
// a JSON round trip.
func FuzzDecodePlaceRequest(f *testing.F) {
	for _, seed := range fuzzDecodeSeeds {
		f.Add([]byte(seed))
	}
	server := &Server{validate: newValidator()} // what placeCommand uses of New's wiring, bar instruments
	instruments := fuzzInstruments(f)
	limit := DefaultConfig().BodyLimit
	f.Fuzz(func(t *testing.T, body []byte) {
		// The body as placeOrder reads it.
		r := httptest.NewRequest(http.MethodPost, placeOrderRoute, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json; charset=utf-8")
		read, err := readJSONBody(r, limit)
		switch {
		case int64(len(body)) > limit:
			// placeOrder stops here with a 413; the decoder never sees such a
			// body. (Decoding it anyway would mostly time checkDocument, whose
			// cost grows with the square of the nesting depth: the fuzzer
			// stalled on bodies of a few hundred KiB.)
			fuzzWantProblem(t, "readJSONBody", err, http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			t.Fatalf("readJSONBody refused a %d-byte body: %v", len(body), err)
		case !bytes.Equal(read, body):
			t.Fatalf("readJSONBody changed the body: %q, want %q", read, body)
		}

		// The plain path may only take what the checked path reads the same.
		if plain, ok := decodePlainPlaceRequest(body); ok {
			checked, err := decodeCheckedPlaceRequest(body)
			if err != nil || checked != plain {
				t.Fatalf("the plain path read %q as %+v; the checked path as %+v, %v", body, plain, checked, err)
			}
		}

		req, err := decodePlaceRequest(body)
		if err != nil {
			var request *requestError
			if !errors.As(err, &request) {
				t.Fatalf("decodePlaceRequest(%q) = %T %v; want a *requestError", body, err, err)
			}
			fuzzWantProblem(t, "decodePlaceRequest", err, http.StatusBadRequest)
			return
		}
		fuzzCheckAcceptedDocument(t, body, req)
		fuzzCheckRoundTrip(t, req)
		fuzzCheckPlaceCommand(t, server, req)
		fuzzCheckRules(t, server, instruments, req)
	})
}

// fuzzWantProblem holds err to a client error among the statuses allowed.
func fuzzWantProblem(t *testing.T, step string, err error, allowed ...int) Problem {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted; want a refusal with status %v", step, allowed)
	}
	problem, internal := problemFor(err)
	if internal != nil {
		t.Fatalf("%s: %v answers %d as an internal error (%v)", step, err, problem.Status, internal)
	}
	ok := false
	for _, status := range allowed {
		ok = ok || problem.Status == status
	}
	if !ok || problem.Status < 400 || problem.Status > 499 {
		t.Fatalf("%s: %v answers %d; want one of %v", step, err, problem.Status, allowed)
	}
	if problem.Detail == "" || !utf8.ValidString(problem.Detail) {
		t.Fatalf("%s: problem %+v has no readable detail", step, problem)
	}
	return problem
}

// fuzzCheckAcceptedDocument reads an accepted body again independently: one
// JSON value, an object, only request fields, each once, each a string or
// null, and the decoded strings are what the request holds.
func fuzzCheckAcceptedDocument(t *testing.T, body []byte, req placeRequest) {
	t.Helper()
	if !utf8.Valid(body) || !json.Valid(body) {
		t.Fatalf("accepted a body that is not valid UTF-8 JSON: %q", body)
	}
	got := map[string]string{
		"client_order_id": req.ClientOrderID, "symbol": req.Symbol, "side": req.Side,
		"type": req.Type, "quantity": req.Quantity, "price": req.Price, "time_in_force": req.TimeInForce,
		"post_only": strconv.FormatBool(req.PostOnly),
	}
	want := map[string]string{"post_only": "false"}
	seen := map[string]bool{}
	decoder := json.NewDecoder(bytes.NewReader(body))
	token := func() json.Token {
		tok, err := decoder.Token()
		if err != nil {
			t.Fatalf("accepted %q, yet reading it again fails: %v", body, err)
		}
		return tok
	}
	if token() != json.Delim('{') {
		t.Fatalf("accepted a body that is not an object: %q", body)
	}
	for decoder.More() {
		key, _ := token().(string)
		if !strings.Contains(","+strings.Join(fuzzRequestFields, ",")+",", ","+key+",") {
			t.Fatalf("accepted the unknown member %q in %q", key, body)
		}
		if seen[key] {
			t.Fatalf("accepted the member %q twice in %q", key, body)
		}
		seen[key] = true
		switch value := token().(type) {
		case string:
			if key == "post_only" {
				t.Fatalf("accepted post_only holding a string in %q", body)
			}
			want[key] = value
		case bool:
			if key != "post_only" {
				t.Fatalf("accepted member %q holding a boolean in %q", key, body)
			}
			want[key] = strconv.FormatBool(value)
		case nil:
			if key != "post_only" {
				want[key] = ""
			}
		default:
			t.Fatalf("accepted member %q holding %T (%v) in %q; only strings, post_only's boolean and null are fields", key, value, value, body)
		}
	}
	if token() != json.Delim('}') {
		t.Fatalf("accepted %q, whose object does not close", body)
	}
	if _, err := decoder.Token(); err != io.EOF {
		t.Fatalf("accepted %q with data after the object (%v)", body, err)
	}
	for _, name := range fuzzRequestFields {
		if got[name] != want[name] {
			t.Fatalf("accepted %q as %s=%q; the body says %q", body, name, got[name], want[name])
		}
	}
}

// fuzzCheckRoundTrip encodes the accepted fields as JSON, all of them and
// then only the non-empty ones (absent and "" are the same request), and
// decodes each: the same request must come back.
func fuzzCheckRoundTrip(t *testing.T, req placeRequest) {
	t.Helper()
	full, err := json.Marshal(req)
	if err != nil {
		t.Fatalf("encode %+v: %v", req, err)
	}
	sparse := map[string]any{}
	for name, value := range map[string]string{
		"client_order_id": req.ClientOrderID, "symbol": req.Symbol, "side": req.Side,
		"type": req.Type, "quantity": req.Quantity, "price": req.Price, "time_in_force": req.TimeInForce,
	} {
		if value != "" {
			sparse[name] = value
		}
	}
	if req.PostOnly {
		sparse["post_only"] = true
	}
	short, err := json.Marshal(sparse)
	if err != nil {
		t.Fatalf("encode %v: %v", sparse, err)
	}
	for _, encoded := range [][]byte{full, short} {
		again, err := decodePlaceRequest(encoded)
		if err != nil {
			t.Fatalf("round trip: %+v encoded as %s is refused: %v", req, encoded, err)
		}
		if again != req {
			t.Fatalf("round trip: %+v encoded as %s decodes as %+v", req, encoded, again)
		}
	}
}

// fuzzCheckPlaceCommand runs the gateway's own placeCommand. Its instrument
// lookup needs an placement.Instruments, which only PostgreSQL can fill, so a
// symbol that would be looked up is blanked first: the field rules and the
// amount parsing still run on the real code, and every answer is a refusal
// (the symbol is then missing or malformed) that must be a 422 naming only
// request fields.
func fuzzCheckPlaceCommand(t *testing.T, server *Server, req placeRequest) {
	t.Helper()
	probe := req
	if instrumentSymbol(probe.Symbol) {
		probe.Symbol = ""
	}
	cmd, err := server.placeCommand("ACC_FUZZ", probe)
	if err == nil {
		t.Fatalf("placeCommand(%+v) = %+v; want symbol refused", probe, cmd)
	}
	var invalid *orders.InvalidError
	if !errors.As(err, &invalid) {
		t.Fatalf("placeCommand(%+v) = %T %v; want *orders.InvalidError", probe, err, err)
	}
	problem := fuzzWantProblem(t, "placeCommand", err, http.StatusUnprocessableEntity)
	fuzzCheckPointers(t, problem)
	symbolRefused := false
	for _, field := range problem.Errors {
		symbolRefused = symbolRefused || field.Pointer == "/symbol"
	}
	if !symbolRefused {
		t.Fatalf("placeCommand(%+v) refused %+v but not the symbol", probe, problem.Errors)
	}
}

func fuzzCheckPointers(t *testing.T, problem Problem) {
	t.Helper()
	if len(problem.Errors) == 0 {
		t.Fatalf("422 problem %+v names no field", problem)
	}
	for _, field := range problem.Errors {
		known := false
		for _, name := range fuzzRequestFields {
			known = known || field.Pointer == "/"+name
		}
		if !known || field.Reason == "" {
			t.Fatalf("422 problem names %q (%q), not a request field with a reason", field.Pointer, field.Reason)
		}
	}
}

// fuzzCheckRules is placeCommand's path with the hand-built instruments in
// place of the database-backed lookup: the validator, orders.ParseAmount and
// orders.Instrument.Check. Keep it in step with placeCommand. A refusal must
// be a 422 naming request fields; an acceptance must carry the amounts
// exactly as sent, positive, on the instrument's grid and over its minimum
// notional.
func fuzzCheckRules(t *testing.T, server *Server, instruments map[string]orders.Instrument, req placeRequest) {
	t.Helper()
	var refused []orders.FieldError
	refuse := func(field, reason string) {
		refused = append(refused, orders.FieldError{Field: field, Reason: reason})
	}
	var invalid validator.ValidationErrors
	if err := server.validate.Struct(req); errors.As(err, &invalid) {
		for _, fe := range invalid {
			refuse(fe.Field(), validationReason(fe))
		}
	} else if err != nil {
		t.Fatalf("validate %+v: %v", req, err)
	}
	cmd := orders.PlaceCommand{Account: "ACC_FUZZ", ClientOrderID: req.ClientOrderID, Symbol: req.Symbol,
		Side: orders.Side(req.Side), Type: orders.OrderType(req.Type),
		TimeInForce: orders.TimeInForce(req.TimeInForce), PostOnly: req.PostOnly}
	refused = append(refused, timeInForceRules(req)...)
	amountsOK := true
	parse := func(field, text string) decimal.Decimal {
		if text == "" {
			amountsOK = false
			return decimal.Decimal{}
		}
		amount, err := orders.ParseAmount(text)
		if err != nil {
			var amountErr *orders.AmountError
			if !errors.As(err, &amountErr) || !errors.Is(err, orders.ErrAmount) {
				t.Fatalf("ParseAmount(%q) = %T %v; want *orders.AmountError", text, err, err)
			}
			refuse(field, "must be a decimal string: it "+amountErr.Reason)
			amountsOK = false
		}
		return amount
	}
	cmd.Quantity = parse("quantity", req.Quantity)
	if cmd.Type == orders.Limit {
		cmd.Price = parse("price", req.Price)
	}
	if instrumentSymbol(req.Symbol) {
		instrument, found := instruments[req.Symbol]
		switch {
		case !found:
			refuse("symbol", "is not an instrument traded here")
		case len(refused) == 0 && amountsOK:
			refused = append(refused, instrument.Check(cmd)...)
		}
	}
	if len(refused) > 0 {
		fuzzCheckPointers(t, fuzzWantProblem(t, "order rules", &orders.InvalidError{Fields: refused}, http.StatusUnprocessableEntity))
		return
	}
	instrument := instruments[req.Symbol]
	if cmd.Type == orders.Limit {
		if err := instrument.CheckBand(cmd.Price); err != nil {
			problem := fuzzWantProblem(t, "price band", err, http.StatusUnprocessableEntity)
			if problem.Code != "price_out_of_band" || len(problem.Errors) != 1 || problem.Errors[0].Pointer != "/price" {
				t.Fatalf("price band refusal %+v: want code price_out_of_band naming /price", problem)
			}
			return
		}
	}
	if err := cmd.Validate(); err != nil {
		t.Fatalf("accepted %+v, which the domain refuses: %v", req, err)
	}
	if cmd.Type == orders.Market && cmd.TimeInForceOrDefault() != orders.IOC {
		t.Fatalf("accepted a market order that is not ioc: %+v", req)
	}
	if cmd.PostOnly && (cmd.Type != orders.Limit || cmd.TimeInForceOrDefault() != orders.GTC) {
		t.Fatalf("accepted a post-only order that is not limit gtc: %+v", req)
	}
	if cmd.Quantity.String() != req.Quantity || (cmd.Type == orders.Limit && cmd.Price.String() != req.Price) {
		t.Fatalf("accepted %+v with quantity %s and price %s: not the amounts sent", req, cmd.Quantity, cmd.Price)
	}
	if cmd.Type == orders.Market && req.Price != "" {
		t.Fatalf("accepted a market order with a price: %+v", req)
	}
	rat := func(s string) *big.Rat {
		r, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("accepted amount %q is not a number", s)
		}
		return r
	}
	quantity, price := rat(req.Quantity), rat(instrument.ReferencePrice.String())
	if cmd.Type == orders.Limit {
		price = rat(req.Price)
	}
	onGrid := func(amount *big.Rat, grid decimal.Decimal) bool {
		return amount.Sign() > 0 && new(big.Rat).Quo(amount, rat(grid.String())).IsInt()
	}
	notional := new(big.Rat).Mul(quantity, price)
	if !onGrid(quantity, instrument.LotSize) || !onGrid(price, instrument.TickSize) ||
		notional.Cmp(rat(instrument.MinNotional.String())) < 0 {
		t.Fatalf("accepted %+v: off the grid of %s or under its minimum notional (notional %s)",
			req, instrument.Symbol, notional.FloatString(10))
	}
}

// BenchmarkDecodePlaceRequest compares the two decoding paths on the body
// every client sends: plain is decodePlaceRequest as the gateway calls it
// (the hand-written one-pass decoder takes the body), checked is the
// encoding/json walk it replaced on that body. The one-pass decoder stays
// only while it is at least twice as fast.
func BenchmarkDecodePlaceRequest(b *testing.B) {
	body := []byte(fuzzDecodeSeeds[0])
	for _, path := range []struct {
		name   string
		decode func([]byte) (placeRequest, error)
	}{
		{"plain", decodePlaceRequest},
		{"checked", decodeCheckedPlaceRequest},
	} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := path.decode(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
