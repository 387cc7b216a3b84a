package placement_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// deadDatabase is a pool whose every query fails at once, as with
// PostgreSQL down, without stopping the server other tests share.
func deadDatabase(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// balanceList renders balances to compare; a balance without a held part
// holds zero, with its available part's decimals.
func balanceList(balances []orders.Balance) string {
	balances = slices.Clone(balances)
	for i, b := range balances {
		if b.Held == "" {
			balances[i].Held = "0"
			if _, fraction, found := strings.Cut(b.Available, "."); found {
				balances[i].Held = "0." + strings.Repeat("0", len(fraction))
			}
		}
	}
	return fmt.Sprint(balances)
}

func TestBalancesOfReadsThroughTheCache(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	none, err := f.balances.Of(ctx, f.newAccount(t))
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("balances of an account without any = %#v, %v; want an empty list", none, err)
	}

	account := f.newAccount(t)
	f.depositWithOutbox(t, account, "USD", "10")
	f.depositWithOutbox(t, account, "BTC", "1.5")
	f.depositWithOutbox(t, account, "BTC", "0.25")
	want := []orders.Balance{
		{Asset: "BTC", Available: "1.75000000", Version: 2},
		{Asset: "USD", Available: "10.00", Version: 1},
	}
	got, err := f.balances.Of(ctx, account)
	if err != nil || balanceList(got) != balanceList(want) {
		t.Fatalf("Of = %v, %v; want %v (sorted by asset, at least the asset's decimals)", got, err, want)
	}
	if cached := f.cachedBalance(t, account, "BTC"); cached.Version != 2 || cached.Value != "1.75000000" {
		t.Errorf("the read cached BTC as %+v", cached)
	}

	// Served from the cache now: a change nobody announced stays unseen...
	if err := f.ledger.Deposit(ctx, account, "USD", "1"); err != nil {
		t.Fatal(err)
	}
	if got, err := f.balances.Of(ctx, account); err != nil || balanceList(got) != balanceList(want) {
		t.Errorf("Of = %v, %v; want the cached %v", got, err, want)
	}
	// ...until its coherence job is handled.
	if _, err := f.consumer.Apply(ctx, orders.BalanceName(account, "USD")+"@2"); err != nil {
		t.Fatal(err)
	}
	want[1] = orders.Balance{Asset: "USD", Available: "11.00", Version: 2}
	if got, err := f.balances.Of(ctx, account); err != nil || balanceList(got) != balanceList(want) {
		t.Errorf("after the coherence job Of = %v, %v; want %v", got, err, want)
	}

	// A fill can leave more decimals than the asset's scale; none is lost.
	if _, err := f.db.Exec(ctx, `UPDATE balances SET available = 11.0000001, version = version + 1
		WHERE account_id = $1 AND asset = 'USD'`, account); err != nil {
		t.Fatal(err)
	}
	if _, err := f.consumer.Apply(ctx, orders.BalanceName(account, "USD")+"@3"); err != nil {
		t.Fatal(err)
	}
	if got := f.cachedBalance(t, account, "USD"); got.Value != "11.0000001" || got.Version != 3 {
		t.Errorf("cache holds %+v, want version 3 of 11.0000001", got)
	}
}

// A balance row that never moved (what a rejected order leaves behind: the
// rows it would have moved, inserted to be locked) is not listed.
func TestBalancesOfLeavesOutRowsThatNeverMoved(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	if _, err := f.db.Exec(ctx, `INSERT INTO balances (account_id, asset) VALUES ($1, 'ETH'), ($1, 'BTC')`, account); err != nil {
		t.Fatal(err)
	}
	f.depositWithOutbox(t, account, "USD", "10")
	want := []orders.Balance{{Asset: "USD", Available: "10.00", Version: 1}}
	for _, read := range []string{"from PostgreSQL", "from the cache"} {
		if got, err := f.balances.Of(ctx, account); err != nil || balanceList(got) != balanceList(want) {
			t.Errorf("%s: Of = %v, %v; want %v", read, got, err, want)
		}
	}
}

func TestBalancesOfCompletesAHashTheConsumerStarted(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	f.depositWithOutbox(t, account, "ETH", "2")
	usd := f.depositWithOutbox(t, account, "USD", "3")
	// The consumer refreshes the one balance it heard of, creating the hash.
	if _, err := f.consumer.Apply(ctx, usd.Payload); err != nil {
		t.Fatal(err)
	}
	got, err := f.balances.Of(ctx, account)
	want := []orders.Balance{{Asset: "ETH", Available: "2.00000000", Version: 1}, {Asset: "USD", Available: "3.00", Version: 1}}
	if err != nil || balanceList(got) != balanceList(want) {
		t.Errorf("Of = %v, %v; want %v: the balance the consumer did not touch is read too", got, err, want)
	}
}

func TestBalancesOfNeverServesAVersionBelowTheCache(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	f.depositWithOutbox(t, account, "USD", "3")
	// The cache is ahead of what a read of PostgreSQL returns, as when the
	// consumer refreshed it between the read and the fill.
	if _, err := f.caches.FillIfNewer(ctx, placement.BalanceCacheKey(account), "USD", 9, "9.00"); err != nil {
		t.Fatal(err)
	}
	got, err := f.balances.Of(ctx, account)
	want := []orders.Balance{{Asset: "USD", Available: "9.00", Version: 9}}
	if err != nil || balanceList(got) != balanceList(want) {
		t.Errorf("Of = %v, %v; want the cached %v", got, err, want)
	}
}

func TestBalancesOfOutages(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	cached, uncached := f.newAccount(t), f.newAccount(t)
	f.depositWithOutbox(t, cached, "USD", "5")
	f.depositWithOutbox(t, uncached, "USD", "7")
	want := []orders.Balance{{Asset: "USD", Available: "5.00", Version: 1}}
	if got, err := f.balances.Of(ctx, cached); err != nil || balanceList(got) != balanceList(want) {
		t.Fatalf("Of = %v, %v; want %v", got, err, want)
	}

	t.Run("PostgreSQL down", func(t *testing.T) {
		balances := placement.NewBalances(postgres.NewBalances(deadDatabase(t)), f.caches, f.logger)
		if got, err := balances.Of(ctx, cached); err != nil || balanceList(got) != balanceList(want) {
			t.Errorf("a cached account = %v, %v; want it served from the cache", got, err)
		}
		if got, err := balances.Of(ctx, uncached); !errors.Is(err, orders.ErrUnavailable) {
			t.Errorf("an account not cached = %v, %v; want ErrUnavailable", got, err)
		}
	})

	// Serving PostgreSQL while the cache is unreadable could show a version
	// the cache does not hold, and the next cached read would go back.
	t.Run("Redis down", func(t *testing.T) {
		server := f.redis.Single(t, "stops Redis")
		server.Stop(t)
		defer server.Restart(t)
		for _, account := range []string{cached, uncached} {
			if got, err := f.balances.Of(ctx, account); !errors.Is(err, orders.ErrUnavailable) {
				t.Errorf("Of = %v, %v; want ErrUnavailable", got, err)
			}
		}
	})

	t.Run("both down", func(t *testing.T) {
		server := f.redis.Single(t, "stops Redis")
		server.Stop(t)
		defer server.Restart(t)
		balances := placement.NewBalances(postgres.NewBalances(deadDatabase(t)), f.caches, f.logger)
		if _, err := balances.Of(ctx, cached); !errors.Is(err, orders.ErrUnavailable) {
			t.Errorf("Of = %v, want ErrUnavailable", err)
		}
	})

	t.Run("no cache", func(t *testing.T) {
		balances := placement.NewBalances(postgres.NewBalances(f.db), nil, f.logger)
		if got, err := balances.Of(ctx, cached); err != nil || balanceList(got) != balanceList(want) {
			t.Errorf("Of = %v, %v; want %v", got, err, want)
		}
	})
}

// TestReadersNeverSeeABalanceGoBack runs the whole job mode under load:
// deposits with their outbox rows, relays of them (each twice, in shuffled
// batches), four consumers on the coherence queue, stray late deliveries of
// old versions, and readers polling every account throughout. No reader may
// ever see a balance's version go down, and once the queue is drained the
// cache holds the newest versions.
func TestReadersNeverSeeABalanceGoBack(t *testing.T) {
	testserver.Parallel(t)
	for _, local := range []bool{false, true} {
		t.Run(map[bool]string{false: "reading Redis", true: "through the local copy"}[local], func(t *testing.T) {
			f := newCoherenceFixture(t)
			var tracking *coherence.Tracking
			if local {
				tracking = newTracking(t, f.redis.Single(t, "tracks its keys"))
				f.balances.WithLocalCopy(coherence.New(tracking.Client()))
			}
			readersNeverSeeABalanceGoBack(t, f)
			if local {
				if stats := tracking.Stats(); stats.Hits == 0 || stats.Invalidations == 0 {
					t.Errorf("the local copy %+v: want reads answered from it and invalidated", stats)
				}
			}
		})
	}
}

// newTracking is a local copy of srv's reads, closed at cleanup.
func newTracking(t testing.TB, srv *testserver.Redis) *coherence.Tracking {
	t.Helper()
	tracking, err := coherence.NewTracking(&redis.Options{Addr: srv.Addr}, coherence.TrackingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracking.Close() })
	return tracking
}

func readersNeverSeeABalanceGoBack(t *testing.T, f *coherenceFixture) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	assets := []string{"USD", "BTC", "ETH"}
	accounts := make([]string, 6)
	for i := range accounts {
		accounts[i] = f.newAccount(t)
	}
	const depositsPerAccount = 30

	workerCtx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, len(f.queues))
	for _, queue := range f.queues {
		go func() {
			workerDone <- queue.Work(workerCtx, f.consumer.Handle, emq.WorkerOptions{
				Concurrency: 4, Lease: 5 * time.Second, IdlePoll: 5 * time.Millisecond, Logger: f.logger,
			})
		}()
	}
	defer func() {
		stopWorker()
		for range f.queues {
			if err := <-workerDone; err != nil {
				t.Errorf("worker: %v", err)
			}
		}
	}()

	var (
		readersStop = make(chan struct{})
		readers     sync.WaitGroup
		reads       atomic.Int64
	)
	for _, account := range accounts {
		for range 2 {
			readers.Go(func() {
				// Staggered, so first reads (a cache miss each) meet the
				// consumer at work on the same account.
				time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
				seen := map[string]int64{}
				for {
					select {
					case <-readersStop:
						return
					default:
					}
					balances, err := f.balances.Of(ctx, account)
					if err != nil {
						t.Errorf("Of(%s): %v", account, err)
						return
					}
					reads.Add(1)
					for _, balance := range balances {
						if balance.Version < seen[balance.Asset] {
							t.Errorf("%s %s went back from version %d to %d", account, balance.Asset, seen[balance.Asset], balance.Version)
						}
						seen[balance.Asset] = max(seen[balance.Asset], balance.Version)
					}
				}
			})
		}
	}

	var writers sync.WaitGroup
	var announced sync.Map // payload -> entry, for the stray late deliveries
	for _, account := range accounts {
		writers.Go(func() {
			var batch []orders.OutboxEntry
			for i := range depositsPerAccount {
				entry := f.depositWithOutbox(t, account, assets[i%len(assets)], "1")
				announced.Store(entry.Payload, entry)
				batch = append(batch, entry)
				if len(batch) < 4 && i < depositsPerAccount-1 {
					continue
				}
				rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
				f.relay.Relay(ctx, batch)
				f.relay.Relay(ctx, batch)
				batch = nil
			}
		})
	}
	strayDone := make(chan struct{})
	go func() {
		defer close(strayDone)
		for {
			select {
			case <-readersStop:
				return
			default:
			}
			announced.Range(func(_, value any) bool {
				if _, err := f.consumer.Apply(ctx, value.(orders.OutboxEntry).Payload); err != nil {
					t.Errorf("stray delivery: %v", err)
				}
				return rand.IntN(8) != 0
			})
			time.Sleep(time.Millisecond)
		}
	}()
	// The readers and the stray deliveries use the clients and t: they
	// stop before the test returns, also when it fails midway.
	stopReading := sync.OnceFunc(func() {
		close(readersStop)
		readers.Wait()
		<-strayDone
	})
	defer stopReading()
	writers.Wait()

	depths := func() emq.Stats {
		var sum emq.Stats
		for _, queue := range f.queues {
			stats, err := queue.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sum.Pending, sum.Active, sum.Delayed = sum.Pending+stats.Pending, sum.Active+stats.Active, sum.Delayed+stats.Delayed
			sum.Dead, sum.Finished = sum.Dead+stats.Dead, sum.Finished+stats.Finished
		}
		return sum
	}
	waitFor(t, 30*time.Second, "the coherence queues drain", func() bool {
		d := depths()
		return d.Pending == 0 && d.Active == 0 && d.Delayed == 0
	})
	if d := depths(); d.Dead != 0 || d.Finished == 0 {
		t.Errorf("coherence queues %+v; want jobs done and none dead", d)
	}
	stopReading()
	if reads.Load() < int64(len(accounts)) {
		t.Errorf("only %d reads ran", reads.Load())
	}

	for _, account := range accounts {
		truth, err := placement.NewBalances(postgres.NewBalances(f.db), nil, f.logger).Of(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		served, err := f.balances.Of(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		if balanceList(served) != balanceList(truth) {
			t.Errorf("%s: served %v once the queue drained, PostgreSQL holds %v", account, served, truth)
		}
		for _, balance := range truth {
			if got := f.cachedBalance(t, account, balance.Asset); got.Version != balance.Version {
				t.Errorf("%s %s: cached version %d, want the newest %d", account, balance.Asset, got.Version, balance.Version)
			}
		}
	}
}

// TestBalancesReadHeldFromTheCache: a cached "<available> <held>" shows
// both parts, and a value cached before balances had a held part reads as
// held zero rather than failing.
func TestBalancesReadHeldFromTheCache(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	key := placement.BalanceCacheKey(account)
	if _, err := f.caches.FillManyIfNewer(ctx, key, []coherence.CacheEntry{
		{Field: "BTC", Version: 4, Value: "1.50000000 0.25000000"},
		{Field: "USD", Version: 2, Value: "10.00"}, // the format before held
		{Field: "~complete"},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := f.balances.Of(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	want := []orders.Balance{
		{Asset: "BTC", Available: "1.50000000", Held: "0.25000000", Version: 4},
		{Asset: "USD", Available: "10.00", Held: "0.00", Version: 2},
	}
	if !slices.Equal(got, want) {
		t.Errorf("balances %+v, want %+v", got, want)
	}
}
