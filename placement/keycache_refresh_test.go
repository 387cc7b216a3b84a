package placement_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// refreshingLookups passes lookups to postgres.Accounts and records the
// keys each batch asked about; fail makes every lookup fail as a
// PostgreSQL that does not answer, and hold, when set, keeps a batch's
// answer back until the channel is closed, after sending on looked.
type refreshingLookups struct {
	*postgres.Accounts
	fail   atomic.Bool
	mu     sync.Mutex
	asked  map[[sha256.Size]byte]int
	hold   chan struct{}
	looked chan struct{}
}

func (l *refreshingLookups) Key(ctx context.Context, hash [sha256.Size]byte) (orders.ActiveKey, error) {
	if l.fail.Load() {
		return orders.ActiveKey{}, fmt.Errorf("%w: PostgreSQL down for the test", orders.ErrUnavailable)
	}
	return l.Accounts.Key(ctx, hash)
}

func (l *refreshingLookups) Keys(ctx context.Context, hashes [][sha256.Size]byte) ([]orders.ActiveKey, error) {
	if l.fail.Load() {
		return nil, fmt.Errorf("%w: PostgreSQL down for the test", orders.ErrUnavailable)
	}
	keys, err := l.Accounts.Keys(ctx, hashes)
	l.mu.Lock()
	for _, hash := range hashes {
		l.asked[hash]++
	}
	hold, looked := l.hold, l.looked
	l.mu.Unlock()
	if hold != nil {
		looked <- struct{}{}
		<-hold
	}
	return keys, err
}

// timesAsked is how many batches asked about the key.
func (l *refreshingLookups) timesAsked(key string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asked[sha256.Sum256([]byte(key))]
}

// fakeClock is a time a test moves by hand.
type fakeClock struct{ at atomic.Int64 }

func (c *fakeClock) now() time.Time        { return time.Unix(0, c.at.Load()) }
func (c *fakeClock) move(by time.Duration) { c.at.Add(int64(by)) }

// refreshFixture is a key cache with a refresher running, on a clock of
// the test's, and an account with keys.
type refreshFixture struct {
	pool    *pgxpool.Pool
	db      *postgres.Accounts
	lookups *refreshingLookups
	cache   *placement.KeyCache
	clock   *fakeClock
	account string
}

const refreshTTL = 5 * time.Second

func newRefreshFixture(t testing.TB, opts ...placement.KeyCacheOption) *refreshFixture {
	t.Helper()
	pool := migratedPool(t)
	db := postgres.NewAccounts(pool)
	account, err := db.Create(context.Background(), "grace")
	if err != nil {
		t.Fatal(err)
	}
	f := &refreshFixture{pool: pool, db: db, account: account, clock: &fakeClock{},
		lookups: &refreshingLookups{Accounts: db, asked: map[[sha256.Size]byte]int{}}}
	f.clock.at.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	f.cache = placement.NewKeyCache(f.lookups, refreshTTL, opts...)
	placement.SetKeyCacheClock(f.cache, f.clock.now)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.cache.RefreshAhead(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-done
	})
	// Nothing is queued for a refresh until the loop runs, and the test's
	// clock does not wait for it to be scheduled.
	waitFor(t, 5*time.Second, "the refresher runs", func() bool { return placement.KeyRefreshersRunning(f.cache) > 0 })
	return f
}

// holdLookups has each lookup from now on signal looked once it has read
// PostgreSQL and keep its answer back until release is called.
func (f *refreshFixture) holdLookups() (looked <-chan struct{}, release func()) {
	hold, signal := make(chan struct{}), make(chan struct{}, 1)
	f.lookups.mu.Lock()
	f.lookups.hold, f.lookups.looked = hold, signal
	f.lookups.mu.Unlock()
	return signal, func() { close(hold) }
}

// refreshHeld has a request find key's copy in its refresh window and
// waits until the refresh it queued has read PostgreSQL; the refresh's
// answer is held back until release is called.
func (f *refreshFixture) refreshHeld(t testing.TB, key string) (release func()) {
	t.Helper()
	looked, release := f.holdLookups()
	f.clock.move(refreshTTL - time.Second)
	if _, err := f.cache.Authenticate(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	awaitLookup(t, looked)
	return release
}

// revokeHeard revokes key id with a broadcast and waits until the cache
// heard it (heard, from NotifyRevocations).
func (f *refreshFixture) revokeHeard(t testing.TB, caches *coherence.Client, id string, heard <-chan [sha256.Size]byte) {
	t.Helper()
	if err := control.New(f.pool, caches).RevokeKey(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(5 * time.Second):
		t.Fatal("the revocation broadcast not heard within 5 s")
	}
}

// awaitLookup waits for a held lookup to have read PostgreSQL.
func awaitLookup(t testing.TB, looked <-chan struct{}) {
	t.Helper()
	select {
	case <-looked:
	case <-time.After(5 * time.Second):
		t.Fatal("no refresh within 5 s")
	}
}

func (f *refreshFixture) issue(t testing.TB) (id, key string) {
	t.Helper()
	id, key, err := f.db.IssueKey(context.Background(), f.account)
	if err != nil {
		t.Fatal(err)
	}
	return id, key
}

// use authenticates the key and waits for any refresh it queued.
func (f *refreshFixture) use(t testing.TB, key string) (orders.Caller, error) {
	t.Helper()
	caller, err := f.cache.Authenticate(context.Background(), key)
	waitFor(t, 5*time.Second, "the refreshes queued are done", func() bool {
		return placement.KeyRefreshesPending(f.cache) == 0
	})
	return caller, err
}

// TestKeyCacheRefreshesKeysInUseAheadOfExpiry: a key used every second
// over several ttls is looked up on a request's path once, its first
// time, and refreshed off it after; a key used once, and a key found
// unknown, are not refreshed.
func TestKeyCacheRefreshesKeysInUseAheadOfExpiry(t *testing.T) {
	testserver.Parallel(t)
	f := newRefreshFixture(t)
	_, steady := f.issue(t)
	_, idle := f.issue(t)
	unknown := orders.APIKeyPrefix + strings.Repeat("u", 40)
	if _, err := f.use(t, idle); err != nil {
		t.Fatal(err)
	}
	for second := range 4 * int(refreshTTL/time.Second) {
		if got, err := f.use(t, steady); err != nil || got.Account != f.account {
			t.Fatalf("second %d: authenticate = %q, %v; want %s", second, got.Account, err, f.account)
		}
		if _, err := f.use(t, unknown); !errors.Is(err, orders.ErrUnauthenticated) {
			t.Fatalf("second %d: the unknown key: %v", second, err)
		}
		f.clock.move(time.Second)
	}
	// The steady key once, the idle one once, the unknown one once a ttl.
	if n := f.cache.Lookups(placement.RequestLookup); n != 2+4 {
		t.Errorf("%d lookups on requests' path, want 6: the steady key's first, the idle key's, the unknown key's each ttl", n)
	}
	if n := f.lookups.timesAsked(steady); n < 3 {
		t.Errorf("the steady key refreshed %d times over 4 ttls, want at least 3", n)
	}
	if n := f.cache.Lookups(placement.RefreshLookup); n != uint64(f.lookups.timesAsked(steady)) {
		t.Errorf("%d refresh lookups, want one a refresh of the steady key (%d)", n, f.lookups.timesAsked(steady))
	}
	if n, m := f.lookups.timesAsked(idle), f.lookups.timesAsked(unknown); n != 0 || m != 0 {
		t.Errorf("the idle key refreshed %d times, the unknown one %d; want neither", n, m)
	}
}

// TestKeyCacheRefreshKeepsTheRevocationBounds: with a key in steady use
// and refreshed, a revocation still ends it as without the refresher: at
// once when its broadcast is heard, and within a ttl when it is not.
func TestKeyCacheRefreshKeepsTheRevocationBounds(t *testing.T) {
	testserver.Parallel(t)
	caches := coherence.New(testserver.QueueRedis(t))
	for _, tt := range []struct {
		name      string
		broadcast bool
	}{
		{"broadcast: refused at once", true},
		{"no broadcast: refused within a ttl", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newRefreshFixture(t)
			followRevocations(t, f.cache, caches)
			heard := make(chan [sha256.Size]byte, 1)
			f.cache.NotifyRevocations(func(hash [sha256.Size]byte) { heard <- hash })
			id, key := f.issue(t)
			for range 7 { // into its second ttl, refreshed once
				if _, err := f.use(t, key); err != nil {
					t.Fatal(err)
				}
				f.clock.move(time.Second)
			}
			if tt.broadcast {
				f.revokeHeard(t, caches, id, heard)
				if _, err := f.use(t, key); !errors.Is(err, orders.ErrUnauthenticated) {
					t.Fatalf("after the broadcast: %v, want the key refused", err)
				}
				return
			}
			if _, err := f.db.RevokeKey(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			revoked := f.clock.now()
			for {
				_, err := f.use(t, key)
				if errors.Is(err, orders.ErrUnauthenticated) {
					break
				}
				if err != nil || f.clock.now().Sub(revoked) > refreshTTL {
					t.Fatalf("revoked %v ago, a ttl is %v: still %v", f.clock.now().Sub(revoked), refreshTTL, err)
				}
				f.clock.move(500 * time.Millisecond)
			}
		})
	}
}

// TestKeyCacheRefreshThatRacedARevocationIsNotKept: a refresh that read
// the key active, then the revocation's broadcast was heard before its
// answer came back, leaves the key dropped: the next request looks it up
// and is refused.
func TestKeyCacheRefreshThatRacedARevocationIsNotKept(t *testing.T) {
	testserver.Parallel(t)
	caches := coherence.New(testserver.QueueRedis(t))
	f := newRefreshFixture(t)
	followRevocations(t, f.cache, caches)
	heard := make(chan [sha256.Size]byte, 1)
	f.cache.NotifyRevocations(func(hash [sha256.Size]byte) { heard <- hash })
	id, key := f.issue(t)
	if _, err := f.use(t, key); err != nil {
		t.Fatal(err)
	}
	release := f.refreshHeld(t, key) // the refresh read the key active; its answer is held back
	f.revokeHeard(t, caches, id, heard)
	release()
	waitFor(t, 5*time.Second, "the refresh is done", func() bool { return placement.KeyRefreshesPending(f.cache) == 0 })
	before := f.cache.Lookups(placement.RequestLookup)
	if got, err := f.cache.Authenticate(context.Background(), key); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Fatalf("after the revocation: %q, %v; want the key refused", got.Account, err)
	}
	if n := f.cache.Lookups(placement.RequestLookup) - before; n != 1 {
		t.Errorf("%d lookups on the request's path, want 1: the refresh's answer was kept", n)
	}
}

// TestKeyCacheFailedRefreshLeavesStaleIfError: a refresh that fails
// leaves the copy to expire, not refreshed again; the request after it
// then looks the key up on its path as without the refresher and,
// PostgreSQL still down, is answered from the stale copy within the
// stale-if-error period; once PostgreSQL answers, the key is refreshed
// again.
func TestKeyCacheFailedRefreshLeavesStaleIfError(t *testing.T) {
	testserver.Parallel(t)
	f := newRefreshFixture(t, placement.StaleIfError(time.Minute))
	_, key := f.issue(t)
	if _, err := f.use(t, key); err != nil {
		t.Fatal(err)
	}
	f.lookups.fail.Store(true)
	f.clock.move(refreshTTL - time.Second)
	if got, err := f.use(t, key); err != nil || got.Account != f.account {
		t.Fatalf("in the refresh window = %q, %v; want the copy", got.Account, err)
	}
	f.clock.move(500 * time.Millisecond)
	if _, err := f.use(t, key); err != nil {
		t.Fatal(err)
	}
	if n := f.cache.Lookups(placement.RefreshLookup); n != 1 {
		t.Fatalf("%d refresh lookups, want the one that failed, not tried again for the same copy", n)
	}
	f.clock.move(500 * time.Millisecond)
	requests := f.cache.Lookups(placement.RequestLookup)
	if got, err := f.use(t, key); err != nil || got.Account != f.account {
		t.Fatalf("past the copy's expiry = %q, %v; want the stale copy", got.Account, err)
	}
	if n, stale := f.cache.Lookups(placement.RequestLookup)-requests, f.cache.StaleAnswers(); n != 1 || stale != 1 {
		t.Errorf("%d lookups on the request's path and %d stale answers, want 1 and 1", n, stale)
	}
	// PostgreSQL back: the key in use is refreshed again.
	f.lookups.fail.Store(false)
	f.clock.move(refreshTTL - time.Second)
	refreshes := f.cache.Lookups(placement.RefreshLookup)
	if _, err := f.use(t, key); err != nil {
		t.Fatal(err)
	}
	if n := f.cache.Lookups(placement.RefreshLookup) - refreshes; n != 1 {
		t.Errorf("%d refreshes once PostgreSQL answers again, want 1", n)
	}
}

// TestKeyCacheRefreshedCopyKeepsItsStamp: with revocations tracked, a
// refreshed copy is answered from memory, and a revocation's raised stamp
// ends it on the next request as it ends a looked up one.
func TestKeyCacheRefreshedCopyKeepsItsStamp(t *testing.T) {
	testserver.Parallel(t)
	srv := testserver.SingleRedis(t, "tracks its keys")
	tracking := newTracking(t, srv)
	f := newRefreshFixture(t, placement.TrackRevocations(coherence.New(tracking.Client())))
	id, key := f.issue(t)
	for range 7 { // into its second ttl, refreshed once
		if _, err := f.use(t, key); err != nil {
			t.Fatal(err)
		}
		f.clock.move(time.Second)
	}
	if n, m := f.cache.Lookups(placement.RequestLookup), f.cache.Lookups(placement.RefreshLookup); n != 1 || m < 1 {
		t.Fatalf("%d lookups on requests' path and %d refreshes, want 1 and at least 1", n, m)
	}
	if err := control.New(f.pool, coherence.New(srv.Client(t))).RevokeKey(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "the revocation's invalidation arrives", func() bool { return tracking.Stats().Invalidations > 0 })
	if got, err := f.use(t, key); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Errorf("after the invalidation: %q, %v; want the revoked key refused", got.Account, err)
	}
}
