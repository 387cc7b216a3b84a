package apitest_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/ordergate/ordergate/testkit/apitest"
)

// recorder is a testing.TB that records Errorf instead of failing, so a test
// can assert that the transport reports a violation. Everything else (Fatalf,
// Cleanup, Helper...) goes to the real test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

const (
	orderID   = "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2"
	accountID = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"

	validOrder = `{"id":"` + orderID + `","client_order_id":"c-1","account_id":"` + accountID + `",` +
		`"symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.015","price":"64250.50",` +
		`"status":"pending","created_at":"2025-01-15T09:30:00.123Z"}`
	// Fields the spec does not know must pass: the server may add some.
	orderWithExtraField = `{"id":"` + orderID + `","client_order_id":"c-1","account_id":"` + accountID + `",` +
		`"symbol":"ETH-USD","side":"sell","type":"market","quantity":"1","status":"filled",` +
		`"created_at":"2025-01-15T09:30:00Z","filled_quantity":"1"}`
	orderWithoutStatus = `{"id":"` + orderID + `","client_order_id":"c-1","account_id":"` + accountID + `",` +
		`"symbol":"BTC-USD","side":"buy","type":"market","quantity":"1","created_at":"2025-01-15T09:30:00Z"}`

	notFound   = `{"type":"urn:ordergate:problem:not-found","title":"Not found","status":404,"request_id":"r-1"}`
	validation = `{"type":"urn:ordergate:problem:validation","title":"Validation failed","status":422,` +
		`"errors":[{"pointer":"/quantity","reason":"must be greater than zero"},{"pointer":"","reason":"x"}]}`

	validRequest = `{"client_order_id":"c-1","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.015","price":"64250.50"}`
)

// respond answers every request with the given status, headers and body.
func respond(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

const (
	jsonCT    = "application/json"
	problemCT = "application/problem+json"
)

func TestTransport(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		method      string
		path        string
		contentType string
		body        string
		opts        []apitest.Option
		handler     http.HandlerFunc
		// wantErr is a substring of the one reported violation; "" wants none.
		wantErr string
	}{
		{
			name: "conforming order", method: http.MethodGet, path: "/v1/orders/" + orderID,
			handler: respond(200, validOrder, "Content-Type", jsonCT, "X-Request-Id", "r-1"),
		},
		{
			name: "unknown fields in an order are allowed", method: http.MethodGet, path: "/v1/orders/" + orderID,
			handler: respond(200, orderWithExtraField, "Content-Type", jsonCT, "X-Request-Id", "r-1"),
		},
		{
			name: "conforming problem+json", method: http.MethodGet, path: "/v1/orders/nope",
			handler: respond(404, notFound, "Content-Type", problemCT, "X-Request-Id", "r-1"),
		},
		{
			name: "problem+json with charset and field errors", method: http.MethodPost, path: "/v1/orders",
			contentType: jsonCT, body: `{"client_order_id":"c-1"}`,
			handler: respond(422, validation, "Content-Type", problemCT+"; charset=utf-8", "X-Request-Id", "r-1"),
		},
		{
			name: "conforming 202 admission", method: http.MethodPost, path: "/v1/orders",
			contentType: jsonCT, body: validRequest,
			handler: respond(202, validOrder, "Content-Type", jsonCT, "X-Request-Id", "r-1",
				"Location", "/v1/orders/"+orderID),
		},
		{
			name: "conforming 401", method: http.MethodGet, path: "/v1/orders/" + orderID,
			handler: respond(401, `{"type":"urn:ordergate:problem:unauthorized","title":"Unauthorized","status":401}`,
				"Content-Type", problemCT, "X-Request-Id", "r-1", "WWW-Authenticate", "Bearer"),
		},
		{
			name: "conforming readiness 503", method: http.MethodGet, path: "/readyz",
			handler: respond(503, `{"status":"unavailable","checks":{"redis":"down","postgres":"ok","fence":"ok"}}`,
				"Content-Type", jsonCT, "X-Request-Id", "r-1"),
		},
		{
			name: "undeclared status", method: http.MethodGet, path: "/v1/orders/" + orderID,
			handler: respond(http.StatusTeapot, notFound, "Content-Type", problemCT, "X-Request-Id", "r-1"),
			wantErr: "status is not supported",
		},
		{
			name: "unknown route", method: http.MethodGet, path: "/v1/trades",
			handler: respond(404, notFound, "Content-Type", problemCT, "X-Request-Id", "r-1"),
			wantErr: "no such operation",
		},
		{
			name: "method not in spec", method: http.MethodPatch, path: "/v1/orders/" + orderID,
			handler: respond(405, notFound, "Content-Type", problemCT, "X-Request-Id", "r-1"),
			wantErr: "no such operation",
		},
		{
			name: "body missing a required field", method: http.MethodGet, path: "/v1/orders/" + orderID,
			handler: respond(200, orderWithoutStatus, "Content-Type", jsonCT, "X-Request-Id", "r-1"),
			wantErr: `property "status" is missing`,
		},
		{
			name: "problem type outside the catalogue", method: http.MethodGet, path: "/v1/orders/nope",
			handler: respond(404, strings.Replace(notFound, "not-found", "gone", 1),
				"Content-Type", problemCT, "X-Request-Id", "r-1"),
			wantErr: `"/type"`,
		},
		{
			name: "problem served as application/json", method: http.MethodGet, path: "/v1/orders/nope",
			handler: respond(404, notFound, "Content-Type", jsonCT, "X-Request-Id", "r-1"),
			wantErr: "Content-Type",
		},
		{
			name: "no content type", method: http.MethodGet, path: "/healthz",
			handler: func(w http.ResponseWriter, _ *http.Request) {
				w.Header()["Content-Type"] = nil // stop net/http from sniffing one
				w.Header().Set("X-Request-Id", "r-1")
				_, _ = io.WriteString(w, `{"status":"ok"}`)
			},
			wantErr: "Content-Type",
		},
		{
			name: "missing X-Request-Id", method: http.MethodGet, path: "/healthz",
			handler: respond(200, `{"status":"ok"}`, "Content-Type", jsonCT),
			wantErr: `"X-Request-Id" missing`,
		},
		{
			name: "202 without Location", method: http.MethodPost, path: "/v1/orders",
			contentType: jsonCT, body: validRequest,
			handler: respond(202, validOrder, "Content-Type", jsonCT, "X-Request-Id", "r-1"),
			wantErr: `"Location" missing`,
		},
		{
			name: "401 without WWW-Authenticate", method: http.MethodGet, path: "/v1/orders/" + orderID,
			handler: respond(401, `{"type":"urn:ordergate:problem:unauthorized","title":"Unauthorized","status":401}`,
				"Content-Type", problemCT, "X-Request-Id", "r-1"),
			wantErr: `"WWW-Authenticate" missing`,
		},
		{
			name: "malformed request is not checked by default", method: http.MethodPost, path: "/v1/orders",
			contentType: "text/plain", body: `{"qty":`,
			handler: respond(415, `{"type":"urn:ordergate:problem:unsupported-media-type","title":"Unsupported media type","status":415}`,
				"Content-Type", problemCT, "X-Request-Id", "r-1"),
		},
		{
			name: "ValidateRequests catches an unknown field", method: http.MethodPost, path: "/v1/orders",
			contentType: jsonCT, body: strings.Replace(validRequest, `"price"`, `"prise"`, 1),
			opts: []apitest.Option{apitest.ValidateRequests()},
			handler: respond(202, validOrder, "Content-Type", jsonCT, "X-Request-Id", "r-1",
				"Location", "/v1/orders/"+orderID),
			wantErr: "request:",
		},
		{
			name: "ValidateRequests passes a valid request", method: http.MethodPost, path: "/v1/orders",
			contentType: jsonCT, body: validRequest,
			opts: []apitest.Option{apitest.ValidateRequests()},
			handler: respond(202, validOrder, "Content-Type", jsonCT, "X-Request-Id", "r-1",
				"Location", "/v1/orders/"+orderID),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A channel, not a variable: the race detector does not see the
			// socket between server and client as synchronisation.
			gotBody := make(chan string, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				gotBody <- string(b)
				tt.handler(w, r)
			}))
			t.Cleanup(srv.Close)

			rec := &recorder{TB: t}
			req, err := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			resp, err := apitest.Client(rec, tt.opts...).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()

			// The transport must be transparent whatever it reports.
			if got := <-gotBody; got != tt.body {
				t.Errorf("server got body %q, want %q", got, tt.body)
			}
			want := httptest.NewRecorder()
			tt.handler(want, httptest.NewRequest(tt.method, tt.path, nil))
			if b, _ := io.ReadAll(resp.Body); string(b) != want.Body.String() {
				t.Errorf("client got body %q, want %q", b, want.Body.String())
			}

			errs := rec.errors()
			switch {
			case tt.wantErr == "" && len(errs) > 0:
				t.Errorf("want no violation, got %d:\n%s", len(errs), strings.Join(errs, "\n---\n"))
			case tt.wantErr != "" && len(errs) != 1:
				t.Errorf("want one violation containing %q, got %d:\n%s", tt.wantErr, len(errs), strings.Join(errs, "\n---\n"))
			case tt.wantErr != "" && !strings.Contains(errs[0], tt.wantErr):
				t.Errorf("violation does not mention %q:\n%s", tt.wantErr, errs[0])
			}
		})
	}
}

// The report must say which exchange broke the contract.
func TestTransportReportNamesTheExchange(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(respond(http.StatusTeapot, "short and stout", "Content-Type", "text/plain", "X-Request-Id", "r-1"))
	t.Cleanup(srv.Close)

	rec := &recorder{TB: t}
	resp, err := (&http.Client{Transport: apitest.Transport(rec, srv.Client().Transport)}).Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	errs := rec.errors()
	if len(errs) != 1 {
		t.Fatalf("want one violation, got %d: %q", len(errs), errs)
	}
	for _, want := range []string{"GET /healthz", "418", "short and stout"} {
		if !strings.Contains(errs[0], want) {
			t.Errorf("violation does not mention %q:\n%s", want, errs[0])
		}
	}
}
