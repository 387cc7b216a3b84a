package placement_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/signing"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestKeyCacheOpensSigningSecrets: a key that requires signatures comes
// out of the cache with its secret opened, whether it was looked up or
// preloaded, when the cache has the encryption key it was sealed under;
// without it, or with another, the key is still known to require
// signatures but has no secret, and Preload counts it.
func TestKeyCacheOpensSigningSecrets(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	sealer, err := signing.ParseSealer(strings.Repeat("01", signing.EncryptionKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	another, err := signing.ParseSealer(strings.Repeat("02", signing.EncryptionKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	accounts := postgres.NewAccounts(db, postgres.SealSecretsWith(sealer))
	account, err := accounts.Create(ctx, "erin")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := accounts.IssueKeyFor(ctx, account, orders.KeySpec{Scopes: orders.ScopeTrade, Signed: true})
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := accounts.IssueKeyFor(ctx, account, orders.KeySpec{Scopes: orders.ScopeRead})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		opts       []placement.KeyCacheOption
		wantSecret string
	}{
		{"the encryption key it was sealed under", []placement.KeyCacheOption{placement.OpenSecretsWith(sealer)}, signed.SigningSecret.Reveal()},
		{"no encryption key", nil, ""},
		{"another encryption key", []placement.KeyCacheOption{placement.OpenSecretsWith(another)}, ""},
	}
	for _, tt := range tests {
		for _, preload := range []bool{false, true} {
			name := tt.name + ", looked up"
			if preload {
				name = tt.name + ", preloaded"
			}
			t.Run(name, func(t *testing.T) {
				cache := placement.NewKeyCache(postgres.NewAccounts(db), time.Hour, tt.opts...)
				if preload {
					wantUnverifiable := 0
					if tt.wantSecret == "" {
						wantUnverifiable = 1
					}
					if loaded, unverifiable, err := cache.Preload(ctx); err != nil || loaded != 2 || unverifiable != wantUnverifiable {
						t.Fatalf("Preload = %d (%d unverifiable), %v; want 2 (%d)", loaded, unverifiable, err, wantUnverifiable)
					}
				}
				got, err := cache.Authenticate(ctx, signed.Key.Reveal())
				opened := got.SigningSecret.Reveal()
				got.SigningSecret = secret.Text{}
				want := orders.Caller{Account: account, Scopes: orders.ScopeTrade, Signed: true}
				if err != nil || got != want || opened != tt.wantSecret {
					t.Errorf("signed key = %+v with the issued secret %v, %v; want %+v with it %v", got, opened == signed.SigningSecret.Reveal(), err, want, tt.wantSecret != "")
				}
				want = orders.Caller{Account: account, Scopes: orders.ScopeRead}
				if got, err := cache.Authenticate(ctx, unsigned.Key.Reveal()); err != nil || got != want {
					t.Errorf("unsigned key = %+v, %v; want %+v", got, err, want)
				}
			})
		}
	}
}

// TestSignaturesFirstUseOnce: a signature is used once per API key while
// its record lives, and again once the record expired; the same signature
// of another key is apart.
func TestSignaturesFirstUseOnce(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	signatures := placement.NewSignatures(rdb)
	signature := bytes.Repeat([]byte{0xAB}, 32)
	const ttl = 300 * time.Millisecond
	steps := []struct {
		name   string
		digest string
		wait   time.Duration
		first  bool
	}{
		{"first use", "aaaa", 0, true},
		{"again", "aaaa", 0, false},
		{"another key", "bbbb", 0, true},
		{"after the record expired", "aaaa", ttl + 50*time.Millisecond, true},
	}
	for _, step := range steps {
		time.Sleep(step.wait)
		first, err := signatures.FirstUse(ctx, step.digest, signature, ttl)
		if err != nil || first != step.first {
			t.Fatalf("%s: FirstUse = %v, %v; want %v", step.name, first, err, step.first)
		}
	}
	left, err := rdb.PTTL(ctx, placement.SignatureKey("aaaa", signature)).Result()
	if err != nil || left <= 0 || left > ttl {
		t.Errorf("the record expires in %s (%v), want within %s", left, err, ttl)
	}
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := signatures.FirstUse(ctx, "cccc", signature, ttl); !errors.Is(err, orders.ErrUnavailable) {
		t.Errorf("FirstUse without Redis = %v, want ErrUnavailable", err)
	}
}

// TestSignaturesResentSetIsStillTheFirstUse: when the reply to the SET is
// lost (the connection dropped, or the reply later than the read timeout),
// go-redis sends it again; the record the first send made holds this
// call's token, so the call is still the first use, not a replay of
// itself. Another call with the signature is a replay.
func TestSignaturesResentSetIsStillTheFirstUse(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	server := testserver.SingleRedis(t, "a proxy before it drops and delays replies")
	proxy := testserver.StartProxy(t, server.Addr)
	faults := []struct {
		name string
		arm  func(match string) *testserver.Fault
	}{
		{"reply dropped with its connection", proxy.DropReply},
		{"reply delayed past the read timeout", func(match string) *testserver.Fault { return proxy.DelayReply(match, 10*time.Second) }},
	}
	for i, tt := range faults {
		t.Run(tt.name, func(t *testing.T) {
			// go-redis's default retries, as the gateway's client has them.
			rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(server.Addr), ReadTimeout: 500 * time.Millisecond})
			t.Cleanup(func() { _ = rdb.Close() })
			signatures := placement.NewSignatures(rdb)
			signature := bytes.Repeat([]byte{byte(i)}, 32)
			fault := tt.arm(placement.SignatureKey("aaaa", signature))
			first, err := signatures.FirstUse(ctx, "aaaa", signature, time.Minute)
			if err != nil || !first {
				t.Errorf("FirstUse with its reply lost = %v, %v; want the first use", first, err)
			}
			if n := fault.Seen(); n != 2 {
				t.Errorf("the SET was sent %d times, want twice (sent again after the lost reply)", n)
			}
			if again, err := signatures.FirstUse(ctx, "aaaa", signature, time.Minute); err != nil || again {
				t.Errorf("FirstUse again = %v, %v; want a replay", again, err)
			}
		})
	}
}
