package orders_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/secret"
)

func TestParseScopes(t *testing.T) {
	tests := []struct {
		names []string
		want  orders.Scopes
		ok    bool
	}{
		{[]string{"read"}, orders.ScopeRead, true},
		{[]string{"trade"}, orders.ScopeTrade, true},
		{[]string{"trade", "read"}, orders.AllScopes, true},
		{[]string{"read", "read"}, orders.ScopeRead, true},
		{nil, 0, false},
		{[]string{"write"}, 0, false},
		{[]string{"read", "Trade"}, 0, false},
	}
	for _, tt := range tests {
		got, err := orders.ParseScopes(tt.names)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseScopes(%q) = %v, %v; want %v (ok %v)", tt.names, got, err, tt.want, tt.ok)
		}
		if tt.ok && got.String() != map[orders.Scopes]string{orders.ScopeRead: "read", orders.ScopeTrade: "trade", orders.AllScopes: "read,trade"}[got] {
			t.Errorf("%v reads %q", tt.names, got.String())
		}
	}
}

// TestCallerPermits: each scope allows only itself; neither implies the
// other.
func TestCallerPermits(t *testing.T) {
	tests := []struct {
		has, need orders.Scopes
		allowed   bool
	}{
		{orders.ScopeRead, orders.ScopeRead, true},
		{orders.ScopeRead, orders.ScopeTrade, false},
		{orders.ScopeTrade, orders.ScopeRead, false},
		{orders.ScopeTrade, orders.ScopeTrade, true},
		{orders.AllScopes, orders.ScopeTrade, true},
		{orders.ScopeRead, orders.AllScopes, false},
	}
	for _, tt := range tests {
		err := orders.Caller{Account: "ACC", Scopes: tt.has}.Permits(tt.need)
		var missing *orders.MissingScopeError
		if tt.allowed != (err == nil) || (err != nil && (!errors.Is(err, orders.ErrForbidden) || !errors.As(err, &missing) || missing.Need != tt.need)) {
			t.Errorf("%s needing %s: %v, want allowed %v", tt.has, tt.need, err, tt.allowed)
		}
	}
}

// TestKeysPrintWithoutTheirSecrets: an issued key and a caller print and
// log whole, %#v and slog included, without the API key or the signing
// secret.
func TestKeysPrintWithoutTheirSecrets(t *testing.T) {
	const apiKey, signingSecret = "ogk_the-api-key", "ogs_the-signing-secret"
	issued := orders.IssuedKey{ID: "KEY_1", Key: secret.New(apiKey), Scopes: orders.AllScopes, SigningSecret: secret.New(signingSecret)}
	caller := orders.Caller{Account: "ACC_1", Scopes: orders.AllScopes, Signed: true, SigningSecret: secret.New(signingSecret)}
	var logs bytes.Buffer
	slog.New(slog.NewTextHandler(&logs, nil)).Info("keys", "issued", issued, "caller", caller)
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("keys", "issued", issued, "caller", caller)
	printed := []string{logs.String()}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		printed = append(printed, fmt.Sprintf(verb, issued), fmt.Sprintf(verb, caller), fmt.Sprintf(verb, &caller))
	}
	for _, out := range printed {
		if strings.Contains(out, "the-api-key") || strings.Contains(out, "the-signing-secret") {
			t.Errorf("a secret shows: %s", out)
		}
	}
	if issued.Key.Reveal() != apiKey || caller.SigningSecret.Reveal() != signingSecret {
		t.Error("Reveal does not give the secrets back")
	}
}
