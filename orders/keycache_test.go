package orders_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
)

// TestKeyCacheServesFromMemoryUntilRevoked: the cache answers without
// PostgreSQL while its copy is fresh, and a revocation ends that copy either
// by its broadcast (at once, long before the hour-long ttl) or by the ttl
// running out when nobody broadcast it.
func TestKeyCacheServesFromMemoryUntilRevoked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := migratedPool(t)
	lanes, err := emq.Connect(ctx, testserver.StartRedis(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	accounts := orders.NewAccounts(db)
	account, err := accounts.Create(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		ttl       time.Duration
		broadcast bool
	}{
		{"the broadcast ends the cached copy", time.Hour, true},
		{"the ttl ends the cached copy", 300 * time.Millisecond, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache := orders.NewKeyCache(accounts, tt.ttl)
			following, stop := context.WithCancel(ctx)
			subscription, err := cache.FollowRevocations(following, lanes)
			if err != nil {
				stop()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				stop()
				<-subscription.Done()
			})
			keyID, key, err := accounts.IssueKey(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := cache.Authenticate(ctx, key); err != nil || got != account {
				t.Fatalf("authenticate = %q, %v; want %s", got, err, account)
			}
			// Revoked behind the cache's back: the copy still answers.
			if _, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, keyID); err != nil {
				t.Fatal(err)
			}
			if got, err := cache.Authenticate(ctx, key); err != nil || got != account {
				t.Fatalf("cached authenticate = %q, %v; want %s from memory", got, err, account)
			}
			if tt.broadcast {
				if _, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = NULL WHERE id = $1`, keyID); err != nil {
					t.Fatal(err)
				}
				if err := accounts.RevokeKey(ctx, keyID, lanes); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, err := cache.Authenticate(ctx, key)
				if errors.Is(err, orders.ErrUnauthenticated) {
					break
				}
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("revoked key still authenticates after 5 s (err %v)", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
			for _, bad := range []string{"", "ogk_", key + "x"} {
				if _, err := cache.Authenticate(ctx, bad); !errors.Is(err, orders.ErrUnauthenticated) {
					t.Errorf("key %q: %v, want ErrUnauthenticated", bad, err)
				}
			}
		})
	}
}
