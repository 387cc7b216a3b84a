package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestPostgresOutageAnswers503 stops the shared PostgreSQL under a running
// gateway: every read answers a prompt 503 problem (never a hang, never a
// 500), readiness names the database, and service resumes on its own when it
// is back. Placement goes on while the key is in the gateway's key cache
// (the fixture's ttl is an hour; past its ttl a copy answers while lookups
// fail, see placement.StaleIfError): it needs only Redis, and the orders settle
// when PostgreSQL is back. (Redis outages: TestHealthAndReadiness.)
func TestPostgresOutageAnswers503(t *testing.T) {
	f := newFixture(t, 1)
	server := testserver.PostgresServer(t)
	placed := f.place(t, f.keys[0], limitOrder("before"))
	if placed.status != http.StatusAccepted {
		t.Fatalf("before the outage: %d %s", placed.status, placed.body)
	}
	id := placed.json(t)["id"].(string)

	server.Stop(t)
	for _, call := range []struct {
		name string
		do   func() response
		want int
	}{
		{"place", func() response { return f.place(t, f.keys[0], limitOrder("during")) }, http.StatusAccepted},
		{"get", func() response { return f.get(t, f.keys[0], id) }, http.StatusServiceUnavailable},
		{"list", func() response { return f.do(t, f.http, http.MethodGet, "/v1/orders", f.keys[0], "", "") }, http.StatusServiceUnavailable},
		{"balances", func() response { return f.do(t, f.http, http.MethodGet, "/v1/balances", f.keys[0], "", "") }, http.StatusServiceUnavailable},
	} {
		began := time.Now()
		res := call.do()
		if took := time.Since(began); took > 6*time.Second {
			t.Errorf("%s took %s during the outage", call.name, took)
		}
		if res.status != call.want {
			t.Errorf("%s during the outage: %d %s, want %d", call.name, res.status, res.body, call.want)
		}
		if call.want == http.StatusServiceUnavailable && res.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s during the outage: Content-Type %q, want a problem", call.name, res.header.Get("Content-Type"))
		}
	}
	ready := f.readyWithin(t, http.StatusServiceUnavailable)
	checks, _ := ready.json(t)["checks"].(map[string]any)
	if ready.status != http.StatusServiceUnavailable || checks["postgres"] == "ok" || checks["redis"] != "ok" {
		t.Errorf("readyz during the outage: %d %s", ready.status, ready.body)
	}

	server.Start(t)
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := f.place(t, f.keys[0], limitOrder("after"))
		if res.status == http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the outage: %d %s", res.status, res.body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
