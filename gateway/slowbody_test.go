package gateway_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/apitest"
)

// slowBodyTransport sends each request's body in two halves, the second
// after pause: the body is complete only once pause has passed.
func slowBodyTransport(t testing.TB, pause time.Duration) http.RoundTripper {
	t.Helper()
	base := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(base.CloseIdleConnections)
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Body != nil && req.ContentLength > 1 {
			req = req.Clone(req.Context())
			req.Body = &slowReader{body: req.Body, half: req.ContentLength / 2, pause: pause}
		}
		return base.RoundTrip(req)
	})
}

// slowReader reads body, pausing once after its first half bytes.
type slowReader struct {
	body   io.ReadCloser
	half   int64
	read   int64
	pause  time.Duration
	paused bool
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.read >= r.half && !r.paused {
		r.paused = true
		time.Sleep(r.pause)
	}
	if !r.paused {
		p = p[:min(int64(len(p)), r.half-r.read)]
	}
	n, err := r.body.Read(p)
	r.read += int64(n)
	return n, err
}

func (r *slowReader) Close() error { return r.body.Close() }

// TestBodyCompletedAfterTheRequestTimeout: a body that arrives whole only
// after REQUEST_TIMEOUT has passed (a slow client's, well within the
// server's read timeout) is served as any other: the request timeout
// bounds the gateway's work once the request has arrived, so an order is
// admitted and answered 202 (never 503 for an order the queue holds), a
// bad body refused for what it is, and no rate-limit take counts as the
// limiter being down.
func TestBodyCompletedAfterTheRequestTimeout(t *testing.T) {
	config := gateway.DefaultConfig()
	config.RequestTimeout = 300 * time.Millisecond
	f := newFixtureWith(t, 1, config)
	signed := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	slow := &http.Client{Transport: apitest.Transport(t, slowBodyTransport(t, 2*config.RequestTimeout))}
	tests := []struct {
		name   string
		key    string
		header func(body string) http.Header
		body   string
		status int
	}{
		{"an order", f.keys[0], nil, limitOrder("slow-1"), http.StatusAccepted},
		{"an order of a signed key", signed.Key.Reveal(), func(body string) http.Header {
			return signature{secret: signed.SigningSecret, method: http.MethodPost, target: "/v1/orders", body: body}.header()
		}, limitOrder("slow-2"), http.StatusAccepted},
		{"a malformed body", f.keys[0], nil, `{"client_order_id":"slow-3",`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var header http.Header
			if tt.header != nil {
				header = tt.header(tt.body)
			}
			res := f.doWith(t, slow, http.MethodPost, "/v1/orders", tt.key, "application/json", tt.body, header)
			if res.status != tt.status {
				t.Fatalf("%d %s, want %d", res.status, res.body, tt.status)
			}
			if res.status == http.StatusAccepted {
				id := res.json(t)["id"].(string)
				if got := f.get(t, f.keys[0], id); got.status != http.StatusOK && tt.key == f.keys[0] {
					t.Errorf("the order answered 202: GET %d %s", got.status, got.body)
				}
			}
		})
	}
	if got := parseSamples(t, f.scrape(t))["rate_limit_fail_open_total"]; got != "0" {
		t.Errorf("rate_limit_fail_open_total %s with Redis up, want 0", got)
	}
}
