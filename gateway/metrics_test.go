package gateway_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestMetricsCountRequestsByRoutePattern scrapes the gateway's series the
// way Prometheus does.
func TestMetricsCountRequestsByRoutePattern(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	key := f.keys[0]
	id := f.placeNew(t, key, "m-1")
	if res := f.place(t, key, limitOrder("m-1")); res.status != http.StatusOK {
		t.Fatalf("replay: %d %s", res.status, res.body)
	}
	if res := f.place(t, key, `{"client_order_id":"m-2"}`); res.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid order: %d %s", res.status, res.body)
	}
	if res := f.place(t, "", limitOrder("m-3")); res.status != http.StatusUnauthorized {
		t.Fatalf("no key: %d %s", res.status, res.body)
	}
	f.get(t, key, id)
	f.get(t, key, "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2")
	f.cancel(t, key, id)
	f.do(t, http.DefaultClient, http.MethodGet, "/no/such/path/"+id, key, "", "")
	f.do(t, http.DefaultClient, "BREW", "/v1/orders", key, "", "")

	scrape := f.scrape(t)
	samples := parseSamples(t, scrape)
	tests := []struct {
		series string
		want   string
	}{
		{`orders_admitted_total`, "1"},
		{`orders_replayed_total`, "1"},
		{`orders_refused_total{status="422"}`, "1"},
		{`orders_refused_total{status="401"}`, "1"},
		{`http_requests_total{method="POST",route="/v1/orders",status="202"}`, "1"},
		{`http_requests_total{method="POST",route="/v1/orders",status="200"}`, "1"},
		{`http_requests_total{method="GET",route="/v1/orders/:id",status="200"}`, "1"},
		{`http_requests_total{method="GET",route="/v1/orders/:id",status="404"}`, "1"},
		{`http_requests_total{method="DELETE",route="/v1/orders/:id",status="200"}`, "1"},
		{`http_requests_total{method="GET",route="unmatched",status="404"}`, "1"},
		{`http_requests_total{method="other",route="/v1/orders",status="405"}`, "1"},
		{`http_request_duration_seconds_count{method="GET",route="/v1/orders/:id"}`, "2"},
	}
	for _, tt := range tests {
		if got, found := samples[tt.series]; !found || got != tt.want {
			t.Errorf("%s = %q (present %v), want %s", tt.series, got, found, tt.want)
		}
	}
	if bytes.Contains(scrape, []byte(id)) {
		t.Errorf("/metrics carries a raw order path: series per order id would grow without bound")
	}
}

// parseSamples reads the text exposition format into series → value.
func parseSamples(t testing.TB, body []byte) map[string]string {
	t.Helper()
	samples := map[string]string{}
	lines := bufio.NewScanner(bytes.NewReader(body))
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cut := strings.LastIndexByte(line, ' ')
		if cut < 0 {
			t.Fatalf("unreadable sample line %q", line)
		}
		samples[line[:cut]] = line[cut+1:]
	}
	return samples
}

// TestMetricsAreNotOnTheAPI: the series (route counts, admissions, the Go
// runtime) are for the operator, on cmd/gateway's METRICS_ADDR. The public
// listener answers /metrics as any path it does not serve, with a 404
// problem (read with a plain client: no unknown path is in the contract).
func TestMetricsAreNotOnTheAPI(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	for _, key := range []string{"", f.keys[0]} {
		res := f.do(t, http.DefaultClient, http.MethodGet, "/metrics", key, "", "")
		if res.status != http.StatusNotFound || res.header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("GET /metrics (key %v): %d %q, want a 404 problem", key != "", res.status, res.header.Get("Content-Type"))
		}
		if problem := res.json(t); problem["type"] != "urn:ordergate:problem:not-found" {
			t.Errorf("GET /metrics: problem %s", res.body)
		}
		if bytes.Contains(res.body, []byte("http_requests_total")) {
			t.Errorf("GET /metrics on the API carries series: %s", res.body)
		}
	}
}
