package gateway_test

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestRequestHeadLimit: a request head (request line, headers, the empty
// line) of gateway.MaxHeaderBytes is served, one byte more is refused with
// 431. net/http reads 4096 bytes beyond http.Server.MaxHeaderBytes before
// it refuses, so a server set to 16 KiB took heads of up to 20 KiB. The
// refusal is net/http's own, written before any handler: text/plain, as
// docs/api.md says. Raw TCP, to send heads of an exact size (a client adds
// headers of its own), and no contract check: these answers are outside it.
func TestRequestHeadLimit(t *testing.T) {
	testserver.Parallel(t)
	addr := serveGateway(t)
	tests := []struct {
		name   string
		size   int
		status int
	}{
		{"at the limit", gateway.MaxHeaderBytes, http.StatusOK},
		{"a byte over", gateway.MaxHeaderBytes + 1, http.StatusRequestHeaderFieldsTooLarge},
		{"4 KiB over, within net/http's slack", gateway.MaxHeaderBytes + 4096, http.StatusRequestHeaderFieldsTooLarge},
		{"well under", 1 << 10, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := exchange(t, addr, headOfSize(t, tt.size))
			if res.StatusCode != tt.status {
				t.Fatalf("a %d-byte head: %d %s, want %d", tt.size, res.StatusCode, body, tt.status)
			}
			if tt.status == http.StatusRequestHeaderFieldsTooLarge {
				if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("431 Content-Type %q: net/http's own answer is text/plain (docs/api.md)", ct)
				}
			}
		})
	}
}

// TestMalformedRequestsAreNetHTTPsAnswer pins what docs/api.md and the
// spec say of requests net/http refuses itself: its own answer, text/plain
// (417 has no body), with no X-Request-Id, never the gateway's problem+json.
func TestMalformedRequestsAreNetHTTPsAnswer(t *testing.T) {
	testserver.Parallel(t)
	addr := serveGateway(t)
	tests := []struct {
		name, head string
		status     int
	}{
		{"header line without a colon", "GET /healthz HTTP/1.1\r\nHost: gateway\r\nno colon here\r\n\r\n", http.StatusBadRequest},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", http.StatusBadRequest},
		{"two Hosts", "GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", http.StatusBadRequest},
		{"malformed request line", "GET\r\n\r\n", http.StatusBadRequest},
		{"unknown transfer coding", "POST /v1/orders HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusNotImplemented},
		{"HTTP/2 in an HTTP/1 request line", "GET /healthz HTTP/2.0\r\nHost: gateway\r\n\r\n", http.StatusHTTPVersionNotSupported},
		{"unknown expectation", "GET /healthz HTTP/1.1\r\nHost: gateway\r\nExpect: coffee\r\n\r\n", http.StatusExpectationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := exchange(t, addr, tt.head)
			ct := res.Header.Get("Content-Type")
			plain := strings.HasPrefix(ct, "text/plain") || (tt.status == http.StatusExpectationFailed && body == "")
			if res.StatusCode != tt.status || !plain || res.Header.Get("X-Request-Id") != "" {
				t.Errorf("%d %q (X-Request-Id %q) %q, want net/http's own %d",
					res.StatusCode, ct, res.Header.Get("X-Request-Id"), body, tt.status)
			}
		})
	}
}

// serveGateway serves a gateway with no dependencies (its /healthz needs
// none) through NewHTTPServer, as cmd/gateway does, and returns its address.
func serveGateway(t testing.TB) string {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := gateway.NewHTTPServer(listener.Addr().String(), gateway.New(gateway.Deps{Logger: logger}, gateway.DefaultConfig()), logger)
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	t.Cleanup(func() {
		_ = server.Close()
		<-served
	})
	return listener.Addr().String()
}

// headOfSize is a GET /healthz head of exactly size bytes, padded with an
// X-Pad header.
func headOfSize(t testing.TB, size int) string {
	t.Helper()
	const start, padName, end = "GET /healthz HTTP/1.1\r\nHost: gateway\r\n", "X-Pad: ", "\r\n\r\n"
	pad := size - len(start) - len(padName) - len(end)
	if pad < 1 {
		t.Fatalf("a head of %d bytes is too small to pad", size)
	}
	head := start + padName + strings.Repeat("a", pad) + end
	if len(head) != size {
		t.Fatalf("head of %d bytes, want %d", len(head), size)
	}
	return head
}

// exchange sends head on a connection of its own and reads the answer.
func exchange(t testing.TB, addr, head string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a %d-byte head: %v", len(head), err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}
