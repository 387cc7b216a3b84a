package gateway_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestPlaceTimeInForceAndPostOnly: the accepted and refused combinations of
// type, time_in_force and post_only, each refusal with its problem body.
func TestPlaceTimeInForceAndPostOnly(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	const limit = `"symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00"`
	const market = `"symbol":"BTC-USD","side":"buy","type":"market","quantity":"0.01000"`
	tests := []struct {
		name   string
		fields string
		status int
		// accepted: the order's time_in_force and post_only; refused: the
		// problem type's slug and the pointers it names.
		timeInForce string
		postOnly    bool
		problem     string
		pointers    []string
	}{
		{"limit, default gtc", limit, 202, "gtc", false, "", nil},
		{"limit gtc", limit + `,"time_in_force":"gtc"`, 202, "gtc", false, "", nil},
		{"limit ioc", limit + `,"time_in_force":"ioc"`, 202, "ioc", false, "", nil},
		{"limit fok", limit + `,"time_in_force":"fok"`, 202, "fok", false, "", nil},
		{"limit post-only", limit + `,"post_only":true`, 202, "gtc", true, "", nil},
		{"limit gtc post-only", limit + `,"time_in_force":"gtc","post_only":true`, 202, "gtc", true, "", nil},
		{"limit post_only false", limit + `,"post_only":false`, 202, "gtc", false, "", nil},
		{"limit post_only null", limit + `,"post_only":null,"time_in_force":null`, 202, "gtc", false, "", nil},
		{"market, default ioc", market, 202, "ioc", false, "", nil},
		{"market ioc", market + `,"time_in_force":"ioc"`, 202, "ioc", false, "", nil},
		{"market gtc", market + `,"time_in_force":"gtc"`, 422, "", false, "validation", []string{"/time_in_force"}},
		{"market fok", market + `,"time_in_force":"fok"`, 422, "", false, "validation", []string{"/time_in_force"}},
		{"market post-only", market + `,"post_only":true`, 422, "", false, "validation", []string{"/post_only"}},
		{"limit ioc post-only", limit + `,"time_in_force":"ioc","post_only":true`, 422, "", false, "validation", []string{"/post_only"}},
		{"limit fok post-only", limit + `,"time_in_force":"fok","post_only":true`, 422, "", false, "validation", []string{"/post_only"}},
		{"unknown time in force", limit + `,"time_in_force":"day"`, 422, "", false, "validation", []string{"/time_in_force"}},
		{"upper case time in force", limit + `,"time_in_force":"GTC"`, 422, "", false, "validation", []string{"/time_in_force"}},
		{"post_only a string", limit + `,"post_only":"true"`, 400, "", false, "malformed-request", []string{"/post_only"}},
		{"post_only a number", limit + `,"post_only":1`, 400, "", false, "malformed-request", []string{"/post_only"}},
		{"time_in_force a boolean", limit + `,"time_in_force":true`, 400, "", false, "malformed-request", []string{"/time_in_force"}},
		{"post_only twice", limit + `,"post_only":true,"post_only":false`, 400, "", false, "malformed-request", []string{"/post_only"}},
		{"unknown field still refused", limit + `,"reduce_only":true`, 400, "", false, "malformed-request", []string{"/reduce_only"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"client_order_id":"tif-` + strings.Repeat("x", i+1) + `",` + tt.fields + `}`
			res := f.place(t, f.keys[0], body)
			if res.status != tt.status {
				t.Fatalf("status %d %s, want %d", res.status, res.body, tt.status)
			}
			got := res.json(t)
			if tt.problem == "" {
				postOnly, _ := got["post_only"].(bool)
				if got["time_in_force"] != tt.timeInForce || postOnly != tt.postOnly {
					t.Errorf("order %s: want time_in_force %s, post_only %v", res.body, tt.timeInForce, tt.postOnly)
				}
				// GET reads it back the same from the queue.
				again := f.get(t, f.keys[0], got["id"].(string)).json(t)
				if again["time_in_force"] != got["time_in_force"] || again["post_only"] != got["post_only"] {
					t.Errorf("read back %v, placed %v", again, got)
				}
				return
			}
			if got["type"] != "urn:ordergate:problem:"+tt.problem {
				t.Errorf("problem %s, want type %s", res.body, tt.problem)
			}
			var pointers []string
			for _, e := range got["errors"].([]any) {
				pointers = append(pointers, e.(map[string]any)["pointer"].(string))
			}
			if !reflect.DeepEqual(pointers, tt.pointers) {
				t.Errorf("problem names %v, want %v: %s", pointers, tt.pointers, res.body)
			}
		})
	}
}

// TestPlaceOutsideThePriceBand: a limit price outside the band around the
// reference price (BTC-USD: 50,000, 10 %: 45,000 to 55,000) is refused at the
// door with its own problem type; the edges are inside.
func TestPlaceOutsideThePriceBand(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	tests := []struct {
		name, side, quantity, price string
		status                      int
	}{
		{"buy far below", "buy", "1", "10.00", 422},
		{"sell far above", "sell", "0.01", "999999999.99", 422},
		{"just below the low edge", "buy", "0.01", "44999.99", 422},
		{"just above the high edge", "sell", "0.01", "55000.01", 422},
		{"the low edge", "buy", "0.01", "45000.00", 202},
		{"the high edge", "sell", "0.01", "55000", 202},
		{"the reference", "buy", "0.01", "50000", 202},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"client_order_id":"band-` + strings.Repeat("x", i+1) + `","symbol":"BTC-USD","side":"` + tt.side +
				`","type":"limit","quantity":"` + tt.quantity + `","price":"` + tt.price + `"}`
			res := f.place(t, f.keys[0], body)
			if res.status != tt.status {
				t.Fatalf("status %d %s, want %d", res.status, res.body, tt.status)
			}
			if tt.status != http.StatusUnprocessableEntity {
				return
			}
			problem := res.json(t)
			errs, _ := problem["errors"].([]any)
			if problem["type"] != "urn:ordergate:problem:price-out-of-band" || problem["code"] != "price_out_of_band" ||
				problem["status"] != float64(422) || len(errs) != 1 {
				t.Fatalf("problem %s", res.body)
			}
			field := errs[0].(map[string]any)
			reason, _ := field["reason"].(string)
			if field["pointer"] != "/price" || !strings.Contains(reason, "45000.00 to 55000.00 USD") || !strings.Contains(reason, "50000") {
				t.Errorf("error %v: want /price naming the band 45000.00 to 55000.00 USD around 50000", field)
			}
		})
	}
	t.Run("a market order has no band at the door", func(t *testing.T) {
		res := f.place(t, f.keys[0], `{"client_order_id":"band-market","symbol":"BTC-USD","side":"buy","type":"market","quantity":"0.01"}`)
		if res.status != http.StatusAccepted {
			t.Fatalf("status %d %s", res.status, res.body)
		}
	})
	t.Run("other refusals come first", func(t *testing.T) {
		res := f.place(t, f.keys[0], `{"client_order_id":"band-grid","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"1","price":"10.001"}`)
		if res.status != http.StatusUnprocessableEntity || res.json(t)["type"] != "urn:ordergate:problem:validation" {
			t.Fatalf("status %d %s, want the validation problem", res.status, res.body)
		}
	})
}
