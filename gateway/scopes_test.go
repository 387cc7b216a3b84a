package gateway_test

import (
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/ordergate/ordergate/api"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestScopesRefuseWhatTheKeyMayNotDo: every operation the contract marks
// with the scope it needs (x-ordergate-scope) is refused 403 forbidden to
// a key without that scope, and served to one with it: a read-only key
// reads but neither places nor cancels, a trade-only key places and
// cancels but reads nothing. A refused placement queues nothing.
func TestScopesRefuseWhatTheKeyMayNotDo(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	readOnly := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.ScopeRead}).Key.Reveal()
	tradeOnly := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.ScopeTrade}).Key.Reveal()
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatal(err)
	}
	scoped := 0
	for pattern, item := range doc.Paths.Map() {
		for method, operation := range item.Operations() {
			scope, ok := operation.Extensions["x-ordergate-scope"].(string)
			if !ok {
				continue
			}
			scoped++
			path := strings.ReplaceAll(pattern, "{id}", "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2")
			contentType, body := "", ""
			if method == http.MethodPost {
				contentType, body = "application/json", limitOrder("scoped-"+scope)
			}
			keys := []struct {
				name    string
				key     string
				allowed bool
			}{
				{"read-only key", readOnly, scope == "read"},
				{"trade-only key", tradeOnly, scope == "trade"},
			}
			// A stream is answered by its status alone: its body never ends.
			streams := operation.Responses.Status(http.StatusOK).Value.Content.Get("text/event-stream") != nil
			for _, k := range keys {
				t.Run(method+" "+pattern+" with a "+k.name, func(t *testing.T) {
					var res response
					if streams {
						opened := requestEvents(t, f.http, f.url, k.key, "", nil)
						res = response{status: opened.StatusCode, header: opened.Header}
						if opened.StatusCode != http.StatusOK {
							res.body, _ = io.ReadAll(opened.Body)
						}
						opened.Body.Close()
					} else {
						res = f.do(t, f.http, method, path, k.key, contentType, body)
					}
					forbidden := res.status == http.StatusForbidden && res.json(t)["type"] == "urn:ordergate:problem:forbidden"
					if forbidden == k.allowed {
						t.Errorf("%d %s; want it allowed: %v", res.status, res.body, k.allowed)
					}
					if forbidden && !strings.Contains(res.json(t)["detail"].(string), "needs "+scope) {
						t.Errorf("the refusal does not name the scope %s: %s", scope, res.body)
					}
				})
			}
		}
	}
	if scoped != 8 {
		t.Errorf("%d operations name their scope, want every authenticated one (8)", scoped)
	}
	if admitted := parseSamples(t, f.scrape(t))["orders_admitted_total"]; admitted != "1" {
		t.Errorf("%s orders admitted, want only the trade-only key's", admitted)
	}
}

// TestATradeOnlyKeyIsToldWhatItAskedNotWhatBecameOfIt: a key without the
// read scope may place and cancel but not read an order's state. Its
// identical re-POST is answered 200 Idempotent-Replayed with the order as
// its placement was answered (the id and what was asked, status pending),
// and its cancel of an order no longer cancelable 409 without the status;
// a key that reads gets both as they are now.
func TestATradeOnlyKeyIsToldWhatItAskedNotWhatBecameOfIt(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	for _, tt := range []struct {
		name   string
		scopes orders.Scopes
		reads  bool
	}{
		{"trade-only key", orders.ScopeTrade, false},
		{"key that reads and trades", orders.AllScopes, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := newFixtureKey(t, f, orders.KeySpec{Scopes: tt.scopes}).Key.Reveal()
			placed := f.place(t, key, limitOrder("told"))
			if placed.status != http.StatusAccepted {
				t.Fatalf("place: %d %s", placed.status, placed.body)
			}
			id := placed.json(t)["id"].(string)
			if res := f.cancel(t, key, id); res.status != http.StatusOK {
				t.Fatalf("cancel: %d %s", res.status, res.body)
			}
			replay := f.place(t, key, limitOrder("told"))
			if replay.status != http.StatusOK || replay.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("replay: %d %v %s", replay.status, replay.header, replay.body)
			}
			if tt.reads {
				if got := replay.json(t); got["id"] != id || got["status"] != "canceled" || got["canceled_at"] == nil {
					t.Errorf("replay %s, want order %s as it is now, canceled", replay.body, id)
				}
			} else if got, want := replay.json(t), placed.json(t); !reflect.DeepEqual(got, want) {
				t.Errorf("replay %s, want the order as placed, as the 202 answered it: %s", replay.body, placed.body)
			}
			again := f.cancel(t, key, id)
			if again.status != http.StatusConflict || again.json(t)["type"] != "urn:ordergate:problem:order-not-cancelable" {
				t.Fatalf("cancel again: %d %s, want 409 order-not-cancelable", again.status, again.body)
			}
			detail := again.json(t)["detail"].(string)
			if names := strings.Contains(detail, "canceled;"); names != tt.reads || !strings.Contains(detail, id) {
				t.Errorf("409 detail %q: names the order %s, and its status: %v, want %v", detail, id, names, tt.reads)
			}
		})
	}
}
