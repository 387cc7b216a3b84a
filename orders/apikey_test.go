package orders_test

import (
	"errors"
	"testing"

	"github.com/ordergate/ordergate/orders"
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
