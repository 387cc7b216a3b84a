package client

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/signing"
)

// TestSignerSignsTheRequestAndKeepsItsBody: the signature covers the
// request as the transport sends it, the body is still there to send, and
// requests signed in one millisecond get timestamps one apart.
func TestSignerSignsTheRequestAndKeepsItsBody(t *testing.T) {
	signer := NewSigner("ogk_key", "ogs_secret")
	signer.now = func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	const body = `{"client_order_id":"c-1"}`
	tests := []struct {
		name, method, url, body, wantTimestamp string
	}{
		{"with a body", http.MethodPost, "http://gateway/v1/orders", body, "1700000000000"},
		{"with a query, in the same millisecond", http.MethodGet, "http://gateway/v1/orders?limit=5&status=open", "", "1700000000001"},
		{"with an escaped path", http.MethodDelete, "http://gateway/v1/orders/ORD%5F1", "", "1700000000002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reader io.Reader
			if tt.body != "" {
				reader = strings.NewReader(tt.body)
			}
			req, err := http.NewRequest(tt.method, tt.url, reader)
			if err != nil {
				t.Fatal(err)
			}
			if err := signer.Edit(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			timestamp := req.Header.Get(signing.HeaderTimestamp)
			target := strings.TrimPrefix(tt.url, "http://gateway")
			want := signing.Sign(secret.New("ogs_secret"), timestamp, tt.method, target, []byte(tt.body))
			if timestamp != tt.wantTimestamp || req.Header.Get(signing.HeaderSignature) != want || req.Header.Get("Authorization") != "Bearer ogk_key" {
				t.Errorf("headers %v; want timestamp %s, signature %s over %s", req.Header, tt.wantTimestamp, want, target)
			}
			if tt.body == "" {
				return
			}
			for _, read := range []func() (io.ReadCloser, error){func() (io.ReadCloser, error) { return req.Body, nil }, req.GetBody} {
				sent, err := read()
				if err != nil {
					t.Fatal(err)
				}
				if got, _ := io.ReadAll(sent); string(got) != tt.body {
					t.Errorf("the body to send is %q, want %q", got, tt.body)
				}
			}
		})
	}
}
