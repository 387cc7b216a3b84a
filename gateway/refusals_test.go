package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/ordergate/ordergate/api"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestRefusedRequestsWriteNothing sends requests that must each be refused
// with a problem naming the field, and checks that no key reached Redis.
func TestRefusedRequestsWriteNothing(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	if _, err := f.db.Exec(context.Background(), `INSERT INTO assets (code, scale) VALUES ('SOL', 8);
		INSERT INTO instruments (symbol, base, quote, tick_size, lot_size, min_notional, reference_price, status)
		VALUES ('SOL-USD', 'SOL', 'USD', 0.01, 0.01, 1, 150, 'halted')`); err != nil {
		t.Fatal(err)
	}
	if err := f.instruments.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	valid := map[string]string{
		"client_order_id": `"r-1"`, "symbol": `"BTC-USD"`, "side": `"buy"`, "type": `"limit"`,
		"quantity": `"0.01000"`, "price": `"50000.00"`,
	}
	// with returns the valid body with fields replaced ("" value drops the field).
	with := func(changes ...string) string {
		fields := map[string]string{}
		for k, v := range valid {
			fields[k] = v
		}
		for i := 0; i < len(changes); i += 2 {
			if changes[i+1] == "" {
				delete(fields, changes[i])
			} else {
				fields[changes[i]] = changes[i+1]
			}
		}
		var parts []string
		for _, name := range []string{"client_order_id", "symbol", "side", "type", "quantity", "price", "extra"} {
			if v, ok := fields[name]; ok {
				parts = append(parts, `"`+name+`":`+v)
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	tests := []struct {
		name        string
		contentType string
		body        string
		status      int
		pointer     string // a pointer the problem must name; "-" for none
	}{
		// The document itself (400).
		{"empty body", "application/json", ``, 400, ""},
		{"not JSON", "application/json", `quantity=1`, 400, ""},
		{"truncated JSON", "application/json", `{"client_order_id":"r-1"`, 400, ""},
		{"array instead of object", "application/json", `[` + with() + `]`, 400, ""},
		{"string instead of object", "application/json", `"order"`, 400, ""},
		{"trailing object", "application/json", with() + `{}`, 400, ""},
		{"trailing garbage", "application/json", with() + ` x`, 400, ""},
		{"duplicate key", "application/json", strings.TrimSuffix(with(), "}") + `,"quantity":"1.00000"}`, 400, "/quantity"},
		{"unknown field", "application/json", with("extra", `"x"`), 400, "/extra"},
		{"quantity as number", "application/json", with("quantity", `0.01`), 400, "/quantity"},
		{"price as number", "application/json", with("price", `50000`), 400, "/price"},
		{"quantity as exponent number", "application/json", with("quantity", `1e-2`), 400, "/quantity"},
		{"side as boolean", "application/json", with("side", `true`), 400, "/side"},
		{"client order id as object", "application/json", with("client_order_id", `{"a":1}`), 400, "/client_order_id"},
		{"invalid UTF-8", "application/json", "{\"client_order_id\":\"r-\xff\"}", 400, ""},
		// Fields (422).
		{"missing client order id", "application/json", with("client_order_id", ""), 422, "/client_order_id"},
		{"empty client order id", "application/json", with("client_order_id", `""`), 422, "/client_order_id"},
		{"client order id too long", "application/json", with("client_order_id", `"`+strings.Repeat("a", 65)+`"`), 422, "/client_order_id"},
		{"client order id with space", "application/json", with("client_order_id", `"a b"`), 422, "/client_order_id"},
		{"client order id with slash", "application/json", with("client_order_id", `"a/b"`), 422, "/client_order_id"},
		{"missing symbol", "application/json", with("symbol", ""), 422, "/symbol"},
		{"unknown symbol", "application/json", with("symbol", `"DOGE-USD"`), 422, "/symbol"},
		{"lowercase symbol", "application/json", with("symbol", `"btc-usd"`), 422, "/symbol"},
		{"halted instrument", "application/json", with("symbol", `"SOL-USD"`, "price", `"150.00"`, "quantity", `"1.00"`), 422, "/symbol"},
		{"bad side", "application/json", with("side", `"short"`), 422, "/side"},
		{"missing side", "application/json", with("side", ""), 422, "/side"},
		{"bad type", "application/json", with("type", `"stop"`), 422, "/type"},
		{"missing quantity", "application/json", with("quantity", ""), 422, "/quantity"},
		{"negative quantity", "application/json", with("quantity", `"-0.01000"`), 422, "/quantity"},
		{"zero quantity", "application/json", with("quantity", `"0"`), 422, "/quantity"},
		{"quantity with exponent", "application/json", with("quantity", `"1e-2"`), 422, "/quantity"},
		{"quantity with leading zero", "application/json", with("quantity", `"00.01"`), 422, "/quantity"},
		{"quantity too many decimals", "application/json", with("quantity", `"0.010001"`), 422, "/quantity"},
		{"quantity off the lot grid", "application/json", with("symbol", `"ETH-BTC"`, "price", `"0.06000"`, "quantity", `"1.012"`), 422, "/quantity"},
		{"quantity over 18 digits", "application/json", with("quantity", `"1234567890123456789"`), 422, "/quantity"},
		{"price too many decimals", "application/json", with("price", `"50000.001"`), 422, "/price"},
		{"price off the tick grid", "application/json", with("symbol", `"ETH-USD"`, "quantity", `"0.010"`, "price", `"3000.03"`), 422, "/price"},
		{"negative price", "application/json", with("price", `"-50000.00"`), 422, "/price"},
		{"zero price", "application/json", with("price", `"0.00"`), 422, "/price"},
		{"limit without price", "application/json", with("price", ""), 422, "/price"},
		{"market with price", "application/json", with("type", `"market"`), 422, "/price"},
		{"notional under the minimum", "application/json", with("quantity", `"0.00001"`, "price", `"100.00"`), 422, "/quantity"},
		{"market notional under the minimum", "application/json", with("type", `"market"`, "price", "", "quantity", `"0.00010"`), 422, "/quantity"},
		{"notional past the digit budget", "application/json", with("quantity", `"99999999999.00000"`, "price", `"50000.00"`), 422, "/quantity"},
		{"several bad fields at once", "application/json", with("side", `"up"`, "type", `"stop"`, "quantity", `"-1"`), 422, "/side"},
		// Transport (413, 415).
		{"too large", "application/json", with("client_order_id", `"`+strings.Repeat("a", 20000)+`"`), 413, "-"},
		{"text/plain", "text/plain", with(), 415, "-"},
		{"form encoded", "application/x-www-form-urlencoded", with(), 415, "-"},
		{"no content type", "", with(), 415, "-"},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := f.do(t, f.http, http.MethodPost, "/v1/orders", f.keys[0], tt.contentType, tt.body)
			if res.status != tt.status {
				t.Fatalf("status %d, want %d: %s", res.status, tt.status, res.body)
			}
			if ct := res.header.Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
			problem := res.json(t)
			if problem["status"] != float64(tt.status) || problem["type"] == "" || problem["title"] == "" {
				t.Errorf("problem = %s", res.body)
			}
			if tt.pointer != "-" {
				errs, _ := problem["errors"].([]any)
				found := false
				for _, e := range errs {
					entry := e.(map[string]any)
					if entry["pointer"] == tt.pointer && entry["reason"] != "" {
						found = true
					}
				}
				if !found {
					t.Errorf("problem does not name %q: %s", tt.pointer, res.body)
				}
			}
			if written := f.queueKeys(t); len(written) != 0 {
				t.Fatalf("a refused request wrote %v", written)
			}
		})
	}
}

func TestSeveralBadFieldsAreAllReported(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	res := f.place(t, f.keys[0], `{"client_order_id":"a b","symbol":"BTC-USD","side":"up","type":"market","quantity":"-1","price":"1"}`)
	if res.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d: %s", res.status, res.body)
	}
	var pointers []string
	for _, e := range res.json(t)["errors"].([]any) {
		pointers = append(pointers, e.(map[string]any)["pointer"].(string))
	}
	if got, want := strings.Join(pointers, " "), "/client_order_id /side /quantity /price"; got != want {
		t.Errorf("pointers = %s, want %s", got, want)
	}
}

func TestMethodNotAllowedAndUnknownRoutesAreProblems(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{http.MethodPut, "/v1/orders", http.StatusMethodNotAllowed},
		{http.MethodGet, "/v1/nothing-here", http.StatusNotFound},
		{http.MethodGet, "/nothing", http.StatusNotFound},
	} {
		res := f.do(t, http.DefaultClient, tt.method, tt.path, f.keys[0], "", "")
		if res.status != tt.want || res.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %d %q %s", tt.method, tt.path, res.status, res.header.Get("Content-Type"), res.body)
		}
	}
}

// TestOtherMethodsAre405WithTheRoutesAllow holds every path of the contract
// to its global rule: a method the path does not have is a 405
// method-not-allowed problem, OPTIONS and HEAD included (Echo answered
// OPTIONS 204 itself), and Allow names exactly the path's operations in the
// spec (Echo's listed OPTIONS too). Authentication does not come first: the
// method is wrong whoever asks. Read with a plain client: these exchanges
// are outside the contract's operations by definition.
func TestOtherMethodsAre405WithTheRoutesAllow(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatal(err)
	}
	example := strings.NewReplacer("{id}", "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2", "{symbol}", "BTC-USD")
	if len(doc.Paths.Map()) < 8 {
		t.Fatalf("only %d paths in the spec", len(doc.Paths.Map()))
	}
	for pattern, item := range doc.Paths.Map() {
		var served []string
		for method := range item.Operations() {
			served = append(served, method)
		}
		slices.Sort(served)
		want := strings.Join(served, ", ")
		path := example.Replace(pattern)
		for _, method := range []string{http.MethodOptions, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodTrace, http.MethodPost, http.MethodDelete, "BREW"} {
			if slices.Contains(served, method) {
				continue
			}
			for _, key := range []string{"", f.keys[0]} {
				res := f.do(t, http.DefaultClient, method, path, key, "", "")
				if res.status != http.StatusMethodNotAllowed || res.header.Get("Content-Type") != "application/problem+json" {
					t.Errorf("%s %s (key %v): %d %q %s, want a 405 problem", method, path, key != "", res.status, res.header.Get("Content-Type"), res.body)
					continue
				}
				if got := res.header.Get("Allow"); got != want {
					t.Errorf("%s %s: Allow %q, want %q (the spec's operations)", method, path, got, want)
				}
				if method == http.MethodHead {
					if len(res.body) != 0 {
						t.Errorf("HEAD %s answered a body: %s", path, res.body)
					}
					continue
				}
				if problem := res.json(t); problem["type"] != "urn:ordergate:problem:method-not-allowed" || problem["status"] != float64(405) {
					t.Errorf("%s %s: problem %s", method, path, res.body)
				}
			}
		}
	}
}
