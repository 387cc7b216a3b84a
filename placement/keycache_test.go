package placement_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestKeyCacheServesFromMemoryUntilRevoked: the cache answers without
// PostgreSQL while its copy is fresh, and a revocation ends that copy either
// by its broadcast (at once, long before the hour-long ttl) or by the ttl
// running out when nobody broadcast it.
func TestKeyCacheServesFromMemoryUntilRevoked(t *testing.T) {
	testserver.Parallel(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db := migratedPool(t)
	caches := coherence.New(testserver.QueueRedis(t))
	accounts := postgres.NewAccounts(db)
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
			cache := placement.NewKeyCache(accounts, tt.ttl)
			followRevocations(t, cache, caches)
			keyID, key, err := accounts.IssueKey(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := cache.Authenticate(ctx, key); err != nil || got.Account != account {
				t.Fatalf("authenticate = %q, %v; want %s", got.Account, err, account)
			}
			// Revoked behind the cache's back: the copy still answers.
			if _, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, keyID); err != nil {
				t.Fatal(err)
			}
			if got, err := cache.Authenticate(ctx, key); err != nil || got.Account != account {
				t.Fatalf("cached authenticate = %q, %v; want %s from memory", got.Account, err, account)
			}
			if tt.broadcast {
				if _, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = NULL WHERE id = $1`, keyID); err != nil {
					t.Fatal(err)
				}
				if err := control.New(db, caches).RevokeKey(ctx, keyID); err != nil {
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

// TestKeyCacheSaysUntilWhenItsAnswerStands: AuthenticateUntil gives the
// time the cache next asks PostgreSQL about the key (a ttl after it last
// did, whatever the answer), and the cache tells NotifyRevocations of
// each revocation broadcast it hears, with the key's hash, once its copy
// is gone: what a follower of the key (the gateway's event streams)
// needs to check the key only when its answer may have changed.
func TestKeyCacheSaysUntilWhenItsAnswerStands(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	caches := coherence.New(testserver.StartRedis(t).Client(t))
	accounts := postgres.NewAccounts(db)
	account, err := accounts.Create(ctx, "erin")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = time.Hour
	lookups := &countingAccounts{Accounts: accounts}
	cache := placement.NewKeyCache(lookups, ttl)
	heard := make(chan [sha256.Size]byte, 8)
	cache.NotifyRevocations(func(hash [sha256.Size]byte) { heard <- hash })
	followRevocations(t, cache, caches)
	keyID, key, err := accounts.IssueKey(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte(key))
	for _, tt := range []struct {
		name        string
		before      func(t *testing.T)
		wantErr     error
		wantLookups int64
	}{
		{"first asked: looked up", nil, nil, 1},
		{"asked again: from memory, until the same time", nil, nil, 0},
		{"revoked and broadcast: told, and looked up again", func(t *testing.T) {
			if err := control.New(db, caches).RevokeKey(ctx, keyID); err != nil {
				t.Fatal(err)
			}
			select {
			case got := <-heard:
				if got != hash {
					t.Errorf("told of %x, want the key's hash %x", got, hash)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("not told of the revocation within 5 s")
			}
		}, orders.ErrUnauthenticated, 1},
		{"revoked, asked again: from memory", nil, orders.ErrUnauthenticated, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			lookedUp := lookups.n.Load()
			asked := time.Now()
			got, until, err := cache.AuthenticateUntil(ctx, key)
			if !errors.Is(err, tt.wantErr) || (err == nil && got.Account != account) {
				t.Fatalf("authenticate = %q, %v; want %v", got.Account, err, tt.wantErr)
			}
			if n := lookups.n.Load() - lookedUp; n != tt.wantLookups {
				t.Errorf("%d lookups, want %d", n, tt.wantLookups)
			}
			// A lookup just made stands a ttl from now; one from memory
			// stands until the lookup's ttl ran out.
			if latest := asked.Add(ttl); until.After(latest.Add(time.Second)) || until.Before(latest.Add(-5*time.Second)) {
				t.Errorf("stands until %v, want about a ttl from now (%v)", until, latest)
			}
		})
	}
	if _, until, err := cache.AuthenticateUntil(ctx, "not a key"); !errors.Is(err, orders.ErrUnauthenticated) || !until.IsZero() {
		t.Errorf("a malformed key: until %v, %v; want zero, ErrUnauthenticated", until, err)
	}
}

// TestKeyCacheAnswersStaleWhilePostgresIsDown: once lookups fail, a copy
// PostgreSQL confirmed within the stale-if-error window still answers (a
// known key and an unknown one alike) and the key is not asked again on
// every request; past the window, for a key never seen, or once a
// revocation broadcast dropped the copy, the answer is ErrUnavailable.
func TestKeyCacheAnswersStaleWhilePostgresIsDown(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	database := testserver.MigratedPostgres(t)
	db := database.Pool(t)
	accounts := postgres.NewAccounts(db)
	caches := coherence.New(testserver.QueueRedis(t))
	account, err := accounts.Create(ctx, "dave")
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 50 * time.Millisecond
	tests := []struct {
		name       string
		window     time.Duration
		revoke     bool
		wantStale  bool
		wantErrKey error
	}{
		{"within the window", time.Hour, false, true, nil},
		{"no window", 0, false, false, orders.ErrUnavailable},
		{"past the window", 2 * ttl, false, false, orders.ErrUnavailable},
		{"revoked during the outage", time.Hour, true, false, orders.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keyID, key, err := accounts.IssueKey(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			lookups := database.Pool(t) // closed below: PostgreSQL "down" for this cache alone
			cache := placement.NewKeyCache(postgres.NewAccounts(lookups), ttl, placement.StaleIfError(tt.window))
			followRevocations(t, cache, caches)
			unknown := "ogk_" + strings.Repeat("x", 40)
			if got, err := cache.Authenticate(ctx, key); err != nil || got.Account != account {
				t.Fatalf("authenticate = %q, %v; want %s", got.Account, err, account)
			}
			if _, err := cache.Authenticate(ctx, unknown); !errors.Is(err, orders.ErrUnauthenticated) {
				t.Fatalf("unknown key: %v, want ErrUnauthenticated", err)
			}
			lookups.Close()
			time.Sleep(tt.window%time.Hour + ttl + 10*time.Millisecond) // past the ttl, and past a short window
			if tt.revoke {
				// Revoked (in a PostgreSQL the cache cannot reach) and broadcast:
				// the copy is dropped, and nothing stale answers for the key.
				if err := control.New(db, caches).RevokeKey(ctx, keyID); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 8*time.Second, "the revocation broadcast drops the copy", func() bool {
					_, err := cache.Authenticate(ctx, key)
					return errors.Is(err, orders.ErrUnavailable)
				})
			}
			asked := time.Now()
			got, until, err := cache.AuthenticateUntil(ctx, key)
			switch {
			case tt.wantStale && (err != nil || got.Account != account):
				t.Fatalf("during the outage = %q, %v; want %s from the stale copy", got.Account, err, account)
			case tt.wantStale && (until.Before(asked) || until.After(asked.Add(ttl+time.Second))):
				// Asked again a ttl later, not on every request.
				t.Errorf("the stale answer stands until %v, want within a ttl of %v", until, asked)
			case !tt.wantStale && !errors.Is(err, tt.wantErrKey):
				t.Fatalf("during the outage = %q, %v; want %v", got.Account, err, tt.wantErrKey)
			case !tt.wantStale && !until.IsZero():
				t.Errorf("no answer, yet it stands until %v", until)
			}
			if !tt.wantStale {
				return
			}
			if _, err := cache.Authenticate(ctx, unknown); !errors.Is(err, orders.ErrUnauthenticated) {
				t.Errorf("unknown key during the outage: %v, want ErrUnauthenticated from the stale copy", err)
			}
			before := cache.StaleAnswers()
			for range 5 {
				if got, err := cache.Authenticate(ctx, key); err != nil || got.Account != account {
					t.Fatalf("again during the outage = %q, %v", got.Account, err)
				}
			}
			if after := cache.StaleAnswers(); after != before {
				t.Errorf("stale answers went %d → %d: the key was asked again within its ttl", before, after)
			}
			if _, err := cache.Authenticate(ctx, "ogk_"+strings.Repeat("y", 40)); !errors.Is(err, orders.ErrUnavailable) {
				t.Errorf("a key never seen during the outage: %v, want ErrUnavailable", err)
			}
		})
	}
}

// followRevocations has cache follow the revocations broadcast through caches
// until the test ends, and waits for its subscription to stop then.
func followRevocations(t testing.TB, cache *placement.KeyCache, caches *coherence.Client) {
	t.Helper()
	following, stop := context.WithCancel(context.Background())
	subscription, err := cache.FollowRevocations(following, caches)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		<-subscription.Done()
	})
}

// mapLookup answers key lookups from a map of hashes to accounts, and
// counts them.
type mapLookup struct {
	accounts map[[sha256.Size]byte]string
	n        atomic.Int64
}

func (l *mapLookup) Key(_ context.Context, hash [sha256.Size]byte) (orders.ActiveKey, error) {
	l.n.Add(1)
	if account, ok := l.accounts[hash]; ok {
		return orders.ActiveKey{Hash: hash, Account: account, Scopes: orders.AllScopes}, nil
	}
	return orders.ActiveKey{}, orders.ErrUnauthenticated
}

// TestKeyCacheKeepsCustomersThroughAFloodOfMadeUpKeys: made-up keys,
// however many, only evict other made-up keys (least recently used first):
// a customer's key stays in memory, and the cache recognizes it.
func TestKeyCacheKeepsCustomersThroughAFloodOfMadeUpKeys(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	const customer = orders.APIKeyPrefix + "customer"
	hash, _ := orders.KeyHash(customer)
	lookup := &mapLookup{accounts: map[[sha256.Size]byte]string{hash: "ACC_CUSTOMER"}}
	cache := placement.NewKeyCache(lookup, time.Hour)
	if cache.Recognizes(customer) {
		t.Fatal("the cache recognizes a key never looked up")
	}
	if got, err := cache.Authenticate(ctx, customer); err != nil || got.Account != "ACC_CUSTOMER" {
		t.Fatalf("authenticate = %q, %v", got.Account, err)
	}
	for i := range 250_000 {
		if _, err := cache.Authenticate(ctx, fmt.Sprintf("%smade-up-%d", orders.APIKeyPrefix, i)); !errors.Is(err, orders.ErrUnauthenticated) {
			t.Fatalf("a made-up key: %v", err)
		}
	}
	looked := lookup.n.Load()
	if !cache.Recognizes(customer) || cache.Recognizes(orders.APIKeyPrefix+"made-up-249999") {
		t.Errorf("after the flood the cache does not recognize the customer, or recognizes a made-up key")
	}
	if got, err := cache.Authenticate(ctx, customer); err != nil || got.Account != "ACC_CUSTOMER" || lookup.n.Load() != looked {
		t.Errorf("the customer after the flood: %q, %v, %d more lookups; want none", got.Account, err, lookup.n.Load()-looked)
	}
	// The most recent made-up key is still remembered unknown; the first
	// was evicted and costs a lookup again.
	if _, err := cache.Authenticate(ctx, orders.APIKeyPrefix+"made-up-249999"); !errors.Is(err, orders.ErrUnauthenticated) || lookup.n.Load() != looked {
		t.Errorf("the latest made-up key cost a lookup")
	}
	if _, err := cache.Authenticate(ctx, orders.APIKeyPrefix+"made-up-0"); !errors.Is(err, orders.ErrUnauthenticated) || lookup.n.Load() != looked+1 {
		t.Errorf("the first made-up key was still remembered")
	}
}

// countingAccounts counts the lookups that reach postgres.Accounts, which
// also lists the active keys.
type countingAccounts struct {
	*postgres.Accounts
	n atomic.Int64
}

func (c *countingAccounts) Key(ctx context.Context, hash [sha256.Size]byte) (orders.ActiveKey, error) {
	c.n.Add(1)
	return c.Accounts.Key(ctx, hash)
}

// countingBatches counts the lookups of several keys at once apart from
// the single ones.
type countingBatches struct {
	countingAccounts
	batches atomic.Int64
}

func (c *countingBatches) Keys(ctx context.Context, hashes [][sha256.Size]byte) ([]orders.ActiveKey, error) {
	c.batches.Add(1)
	return c.Accounts.Keys(ctx, hashes)
}

// TestKeyCacheAuthenticatesKeysDueTogetherWithOneLookup: AuthenticateAll
// answers from memory the keys it holds fresh answers about, and looks
// all the others up in one query; each answer says until when it stands,
// and a key revoked behind the cache's back is refused once its answer
// is due again.
func TestKeyCacheAuthenticatesKeysDueTogetherWithOneLookup(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	accounts := postgres.NewAccounts(db)
	account, err := accounts.Create(ctx, "frank")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var revokedID string
	for i := range 3 {
		id, key, err := accounts.IssueKey(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		if i == 2 {
			revokedID = id
		}
	}
	keys = append(keys, "ogk_"+strings.Repeat("u", 40), "not a key")
	const ttl = 300 * time.Millisecond
	lookups := &countingBatches{countingAccounts: countingAccounts{Accounts: accounts}}
	cache := placement.NewKeyCache(lookups, ttl)
	active, unknown := account, orders.ErrUnauthenticated
	for _, tt := range []struct {
		name        string
		before      func(t *testing.T)
		wantBatches int64
		// want is each key's account; "" refused.
		want []string
	}{
		{"first: one lookup for all", nil, 1, []string{active, active, active, "", ""}},
		{"revoked behind its back, within the ttl: from memory", func(t *testing.T) {
			if _, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, revokedID); err != nil {
				t.Fatal(err)
			}
		}, 0, []string{active, active, active, "", ""}},
		{"past the ttl: one lookup, the revoked key refused", func(t *testing.T) { time.Sleep(ttl) }, 1, []string{active, active, "", "", ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			batches, singles := lookups.batches.Load(), lookups.n.Load()
			asked := time.Now()
			answers := cache.AuthenticateAll(ctx, keys)
			if n := lookups.batches.Load() - batches; n != tt.wantBatches {
				t.Errorf("%d lookups of several keys, want %d", n, tt.wantBatches)
			}
			if n := lookups.n.Load() - singles; n != 0 {
				t.Errorf("%d lookups of one key, want none", n)
			}
			for i, answer := range answers {
				switch {
				case tt.want[i] != "" && (answer.Err != nil || answer.Caller.Account != tt.want[i]):
					t.Errorf("key %d: %q, %v; want %s", i, answer.Caller.Account, answer.Err, tt.want[i])
				case tt.want[i] == "" && !errors.Is(answer.Err, unknown):
					t.Errorf("key %d: %q, %v; want %v", i, answer.Caller.Account, answer.Err, unknown)
				case i == len(keys)-1 && !answer.Until.IsZero():
					t.Errorf("the malformed key's answer stands until %v, want zero", answer.Until)
				case i < len(keys)-1 && (answer.Until.Before(asked) || answer.Until.After(asked.Add(ttl+time.Second))):
					t.Errorf("key %d's answer stands until %v, want within a ttl of %v", i, answer.Until, asked)
				}
			}
		})
	}
}

// TestKeyCachePreloadsActiveKeys: after Preload the active keys are
// recognized and answered without a lookup, and a revoked one is not
// loaded.
func TestKeyCachePreloadsActiveKeys(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	accounts := postgres.NewAccounts(db)
	account, err := accounts.Create(ctx, "dave")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var revokedID string
	for i := range 3 {
		keyID, key, err := accounts.IssueKey(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		if i == 2 {
			revokedID = keyID
		}
	}
	if _, err := db.Exec(ctx, `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, revokedID); err != nil {
		t.Fatal(err)
	}
	counting := &countingAccounts{Accounts: accounts}
	cache := placement.NewKeyCache(counting, time.Hour)
	if loaded, unverifiable, err := cache.Preload(ctx); err != nil || loaded != 2 || unverifiable != 0 {
		t.Fatalf("Preload = %d (%d unverifiable), %v; want the 2 active keys", loaded, unverifiable, err)
	}
	for _, key := range keys[:2] {
		if !cache.Recognizes(key) {
			t.Errorf("an active key is not recognized after Preload")
		}
		if got, err := cache.Authenticate(ctx, key); err != nil || got.Account != account {
			t.Errorf("authenticate = %q, %v", got.Account, err)
		}
	}
	if cache.Recognizes(keys[2]) {
		t.Error("the revoked key was preloaded")
	}
	if n := counting.n.Load(); n != 0 {
		t.Errorf("%d lookups for preloaded keys, want none", n)
	}
}

// TestKeyCacheRefusesARevokedKeyOnTheNextRequest: with revocations tracked,
// a key revoked through control is refused on the first request after its
// stamp's invalidation reached the gateway's local copy, long before the
// hour-long ttl, and without a broadcast being followed.
func TestKeyCacheRefusesARevokedKeyOnTheNextRequest(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	srv := testserver.SingleRedis(t, "tracks its keys")
	tracking := newTracking(t, srv)
	accounts := &countingAccounts{Accounts: postgres.NewAccounts(db)}
	cache := placement.NewKeyCache(accounts, time.Hour, placement.TrackRevocations(coherence.New(tracking.Client())))
	account, err := postgres.NewAccounts(db).Create(ctx, "dave")
	if err != nil {
		t.Fatal(err)
	}
	keyID, key, err := postgres.NewAccounts(db).IssueKey(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got, err := cache.Authenticate(ctx, key); err != nil || got.Account != account {
			t.Fatalf("authenticate = %q, %v; want %s", got.Account, err, account)
		}
	}
	if lookups := accounts.n.Load(); lookups != 1 {
		t.Errorf("%d lookups for three requests, want one: the stamp is read from the local copy", lookups)
	}
	if stats := tracking.Stats(); stats.Hits < 2 {
		t.Errorf("stamp reads %+v, want the repeats answered from the local copy", stats)
	}
	if err := control.New(db, coherence.New(srv.Client(t))).RevokeKey(ctx, keyID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the revocation's invalidation arrives", func() bool { return tracking.Stats().Invalidations > 0 })
	if got, err := cache.Authenticate(ctx, key); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Errorf("after the invalidation: %q, %v; want the revoked key refused", got.Account, err)
	}
}
