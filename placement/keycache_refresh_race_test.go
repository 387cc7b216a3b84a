package placement_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// gatedStamps passes stamp reads to a StampReader; once armed, the next
// read signals entered and waits for release before it reads.
type gatedStamps struct {
	placement.StampReader
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStamps) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.entered, g.release = true, make(chan struct{}), make(chan struct{})
}

func (g *gatedStamps) Stamp(ctx context.Context, table, id string) (int64, error) {
	g.mu.Lock()
	armed, entered, release := g.armed, g.entered, g.release
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(entered)
		<-release
	}
	return g.StampReader.Stamp(ctx, table, id)
}

// TestKeyCacheRefreshInFlightAcrossStampOnlyRevocation: a refresh that
// read the key active, then the key is revoked and its stamp raised (the
// broadcast not followed here), leaves a copy the raised stamp ends.
func TestKeyCacheRefreshInFlightAcrossStampOnlyRevocation(t *testing.T) {
	testserver.Parallel(t)
	srv := testserver.SingleRedis(t, "tracks its keys")
	tracking := newTracking(t, srv)
	f := newRefreshFixture(t, placement.TrackRevocations(coherence.New(tracking.Client())))
	id, key := f.issue(t)
	if _, err := f.use(t, key); err != nil {
		t.Fatal(err)
	}
	release := f.refreshHeld(t, key)
	if err := control.New(f.pool, coherence.New(srv.Client(t))).RevokeKey(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the revocation's invalidation arrives", func() bool { return tracking.Stats().Invalidations > 0 })
	release()
	waitFor(t, 5*time.Second, "the refresh is done", func() bool { return placement.KeyRefreshesPending(f.cache) == 0 })
	if got, err := f.cache.Authenticate(context.Background(), key); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Fatalf("after the invalidation: %q, %v; want the revoked key refused", got.Account, err)
	}
}

// TestKeyCacheRefreshKeepsTheStampOfTheCopyItRefreshed: a refresh replaces
// only the copy it refreshed. A request that began before the refresh but
// read the raised stamp and the changed row after the refresh read
// PostgreSQL keeps its newer answer: the refresh's older one must not
// overwrite it under the newer stamp. Today only a revocation raises a
// key's stamp (and its answer goes to the unknown cache, which refreshes
// leave alone), so the change is a scope change here.
func TestKeyCacheRefreshKeepsTheStampOfTheCopyItRefreshed(t *testing.T) {
	testserver.Parallel(t)
	srv := testserver.SingleRedis(t, "tracks its keys")
	tracking := newTracking(t, srv)
	stamps := &gatedStamps{StampReader: coherence.New(tracking.Client())}
	f := newRefreshFixture(t, placement.TrackRevocations(stamps))
	id, key := f.issue(t)
	if got, err := f.use(t, key); err != nil || got.Scopes&orders.ScopeTrade == 0 {
		t.Fatalf("first use: %v, %v; want the trade scope", got.Scopes, err)
	}
	looked, release := f.holdLookups()
	f.clock.move(refreshTTL - time.Second)

	// A request takes its time, then waits on its stamp read.
	stamps.arm()
	type answer struct {
		caller orders.Caller
		err    error
	}
	slow := make(chan answer, 1)
	go func() {
		caller, err := f.cache.Authenticate(context.Background(), key)
		slow <- answer{caller, err}
	}()
	<-stamps.entered
	// A moment later, another request queues the refresh, which reads
	// the key with both scopes and is held back.
	f.clock.move(time.Millisecond)
	if _, err := f.cache.Authenticate(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	awaitLookup(t, looked)
	// The key loses the trade scope, and its stamp is raised.
	if _, err := f.pool.Exec(context.Background(), `UPDATE api_keys SET scopes = '{read}' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	hash := sha256.Sum256([]byte(key))
	if err := coherence.New(srv.Client(t)).Touch(context.Background(), placement.APIKeysTable, hex.EncodeToString(hash[:])); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the invalidation arrives", func() bool { return tracking.Stats().Invalidations > 0 })
	// The slow request reads the raised stamp and looks the key up.
	close(stamps.release)
	a := <-slow
	if a.err != nil || a.caller.Scopes&orders.ScopeTrade != 0 {
		t.Fatalf("the slow request: %v, %v; want read only", a.caller.Scopes, a.err)
	}
	release()
	waitFor(t, 5*time.Second, "the refresh is done", func() bool { return placement.KeyRefreshesPending(f.cache) == 0 })
	if got, err := f.cache.Authenticate(context.Background(), key); err != nil || got.Scopes&orders.ScopeTrade != 0 {
		t.Fatalf("after the refresh: %v, %v; want read only (the stamp was raised after the refresh read PostgreSQL)", got.Scopes, err)
	}
}

// TestKeyCacheRefreshRateOfASteadyKey: a key used every 100 ms is looked
// up (refreshed) about once a half ttl, twice as often as the once a ttl
// a request's lookup costs without the refresher. A measurement, not a
