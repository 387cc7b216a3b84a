package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/testkit/apitest"
)

// roundTripFunc serves a request in the process.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// inProcessGateway is a gateway on the fixture's stores, served in the
// process rather than on a port, so a test can give each request the
// client address it likes: loopback offers one IPv6 address alone.
func (f *fixture) inProcessGateway(t testing.TB) http.Handler {
	t.Helper()
	deps := f.deps
	deps.Metrics = prometheus.NewRegistry()
	return gateway.New(deps, f.config)
}

// clientAt is a contract-checking client whose requests reach handler from
// the connection address remote ("[2001:db8::1]:4000", "192.0.2.1:4000").
func clientAt(t testing.TB, handler http.Handler, remote string) *http.Client {
	t.Helper()
	serve := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		served := req.Clone(req.Context())
		served.RemoteAddr, served.RequestURI = remote, req.URL.RequestURI()
		recorder := httptest.NewRecorder()
		handler.ServeHTTP(recorder, served)
		return recorder.Result(), nil
	})
	return &http.Client{Transport: apitest.Transport(t, serve)}
}

// TestPerAddressLimitsGroupIPv6By64: every limit kept per client address
// keys an IPv6 client by its /64 (a host is handed a whole /64, and
// could otherwise take a fresh bucket with each of its addresses), and an
// IPv4 client by its address. Once one address spent its bucket, another
// in the same /64 is refused at once, and one outside it is served.
func TestPerAddressLimitsGroupIPv6By64(t *testing.T) {
	f := newFixtureWith(t, 1, limited(2, 1))
	handler := f.inProcessGateway(t)
	routes := []struct {
		name, path string
	}{
		{"the book", "/v1/instruments/BTC-USD/book"},
		{"the instruments", "/v1/instruments"},
		{"readiness", "/readyz"},
		{"liveness", "/healthz"},
	}
	clients := []struct {
		name                     string
		spender, sharer, another string
	}{
		{"IPv6", "[2001:db8:%d:1::1]:4000", "[2001:db8:%d:1:ffff:ffff:ffff:fffe]:4001", "[2001:db8:%d:2::1]:4000"},
		{"IPv4", "192.0.2.%d:4000", "192.0.2.%d:4001", "198.51.100.%d:4000"},
		{"IPv4 mapped into IPv6", "[::ffff:203.0.113.%d]:4000", "203.0.113.%d:4001", "[::ffff:203.0.113.1%d]:4000"},
	}
	for i, route := range routes {
		for _, tt := range clients {
			// Each route its own addresses: the public routes share one
			// bucket per address.
			tt.spender, tt.sharer, tt.another = fmt.Sprintf(tt.spender, i), fmt.Sprintf(tt.sharer, i), fmt.Sprintf(tt.another, i)
			t.Run(route.name+"/"+tt.name, func(t *testing.T) {
				spender := clientAt(t, handler, tt.spender)
				spent := false
				for range 10 {
					if res := f.do(t, spender, http.MethodGet, route.path, "", "", ""); res.status == http.StatusTooManyRequests {
						spent = true
						break
					}
				}
				if !spent {
					t.Fatalf("%s: 10 requests from %s with a burst of 2, none refused 429", route.path, tt.spender)
				}
				if res := f.do(t, clientAt(t, handler, tt.sharer), http.MethodGet, route.path, "", "", ""); res.status != http.StatusTooManyRequests {
					t.Errorf("%s from %s after %s spent the bucket: %d %s, want 429 (one bucket)", route.path, tt.sharer, tt.spender, res.status, res.body)
				}
				if res := f.do(t, clientAt(t, handler, tt.another), http.MethodGet, route.path, "", "", ""); res.status == http.StatusTooManyRequests {
					t.Errorf("%s from %s: 429 %s, want a bucket of its own", route.path, tt.another, res.body)
				}
			})
		}
	}
}
