package placement_test

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestCachedBalancesHealAfterAFailover: the balance cache is filled on a
// primary; replication is cut, and the primary takes newer fills the replica
// never gets; the primary dies and the replica is promoted. Every cached
// balance is then older on the new server than readers already saw, and no
// coherence job is coming for it. The healer notices the new server and
// refills the cache from PostgreSQL: every cached balance equals PostgreSQL's
// within 5 s of the failover (the figure is logged), and a reader sees the
// versions it saw before the failover again or newer ones.
func TestCachedBalancesHealAfterAFailover(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db := migratedPool(t)
	primary, replica, replicaClient := replicatedRedis(t)
	// The processes reach Redis by one address, which the failover points at
	// the replica, as a DNS name or a proxy would.
	var serverAddr atomic.Value
	serverAddr.Store(primary.Addr)
	rdb := redis.NewClient(&redis.Options{
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var dialer net.Dialer
			return dialer.DialContext(ctx, network, serverAddr.Load().(string))
		},
		MaxRetries: -1,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	caches := coherence.New(rdb)
	truth := postgres.NewBalances(db)
	balances := placement.NewBalances(truth, caches, logger)
	consumer := placement.NewBalanceCoherence(truth, caches, logger)
	healer := placement.NewBalanceCacheHealer(truth, caches, logger)

	accounts := postgres.NewAccounts(db)
	ledger := postgres.NewLedger(db)
	// A hundred accounts, each cached on the primary, then filled past
	// the replica: more than one refill call of the heal's (coherence's
	// fillHashesPerCall is 64), so the promoted replica, with no script
	// cached, answers several calls' NOSCRIPT in one pipeline, as it did
	// at 200 accounts; those took 25 s of the test's 27 to set up under
	// -race, where the heal took 1.2 s.
	const n = 100
	ids := make([]string, n)
	seen := map[string]int64{} // the newest version a reader saw, by balance name
	read := func(account string) {
		t.Helper()
		list, err := balances.Of(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		for _, balance := range list {
			seen[orders.BalanceName(account, balance.Asset)] = max(seen[orders.BalanceName(account, balance.Asset)], balance.Version)
		}
	}
	deposit := func(account, asset string) {
		t.Helper()
		if err := ledger.Deposit(ctx, account, asset, "1"); err != nil {
			t.Fatal(err)
		}
		current, err := truth.OfAccounts(ctx, []string{account})
		if err != nil {
			t.Fatal(err)
		}
		for _, balance := range current[account] {
			if balance.Asset == asset {
				if _, err := consumer.Apply(ctx, orders.BalanceName(account, asset)+"@"+itoa(balance.Version)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i := range ids {
		account, err := accounts.Create(ctx, "trader")
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = account
		deposit(account, "USD")
		deposit(account, "BTC")
		read(account) // cached whole: served from the cache from now on
	}
	if healed, err := healer.Heal(ctx); err != nil || !healed {
		t.Fatalf("the first heal of a new server: %v, %v; want healed", healed, err)
	}
	// The healer runs throughout, as in every worker: it finds the cache
	// healed on the primary until the failover.
	runCtx, stop := context.WithCancel(ctx)
	healerDone := make(chan struct{})
	go func() {
		defer close(healerDone)
		healer.Run(runCtx)
	}()
	t.Cleanup(func() { stop(); <-healerDone })
	if n, err := rdb.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	// Replication cut: the newer fills reach the primary alone.
	if err := replicaClient.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	for i, account := range ids {
		deposit(account, "USD")
		if i%2 == 0 {
			deposit(account, "ETH") // a balance the replica's complete hash lacks
		}
		read(account)
	}

	// What the promoted replica holds, read before the processes reach it:
	// once they do, the healer, running throughout, may heal some first.
	onReplica := redis.NewClient(&redis.Options{Addr: replica.Addr})
	t.Cleanup(func() { _ = onReplica.Close() })
	stale := staleBalances(t, coherence.New(onReplica), truth, ids)
	primary.Stop(t)
	serverAddr.Store(replica.Addr)
	failover := time.Now()
	if len(stale) < n {
		t.Fatalf("only %d accounts stale on the promoted replica, want all %d: the test would prove nothing", len(stale), n)
	}

	for {
		stale = staleBalances(t, caches, truth, ids)
		if len(stale) == 0 {
			break
		}
		if time.Since(failover) > 5*time.Second {
			t.Fatalf("%d accounts still stale 5 s after the failover, e.g. %v", len(stale), stale[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("every cached balance equals PostgreSQL's %s after the failover", time.Since(failover).Round(time.Millisecond))
	for _, account := range ids {
		list, err := balances.Of(ctx, account)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, balance := range list {
			got[orders.BalanceName(account, balance.Asset)] = balance.Version
		}
		for _, asset := range []string{"USD", "BTC", "ETH"} {
			name := orders.BalanceName(account, asset)
			if got[name] < seen[name] {
				t.Errorf("%s: served version %d after the heal, a reader saw %d before the failover", name, got[name], seen[name])
			}
		}
	}
	waitFor(t, 10*time.Second, "the healer marks the new server healed", func() bool {
		server, err := caches.CacheServer(ctx, placement.BalancesTable)
		return err == nil && server.Healed()
	})
}

// staleBalances returns the accounts whose cache hash differs from
// PostgreSQL's balances (a missing balance included), leaving out accounts
// without a hash: a miss reads PostgreSQL.
func staleBalances(t testing.TB, caches *coherence.Client, truth *postgres.Balances, accounts []string) []string {
	t.Helper()
	ctx := context.Background()
	current, err := truth.OfAccounts(ctx, accounts)
	if err != nil {
		t.Fatal(err)
	}
	var stale []string
	for _, account := range accounts {
		cached, err := caches.ReadCache(ctx, placement.BalanceCacheKey(account))
		if err != nil {
			t.Fatal(err)
		}
		if len(cached) == 0 {
			continue
		}
		for _, balance := range current[account] {
			entry, ok := cached[balance.Asset]
			if !ok || entry.Version != balance.Version || entry.Value != balance.Available+" "+balance.Held {
				stale = append(stale, account)
				break
			}
		}
	}
	return stale
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// gatedReader holds the first read of balances from PostgreSQL until open
// is closed, having read: a gateway request slowed between its read and its
// fill.
type gatedReader struct {
	placement.BalanceReader
	read, open chan struct{}
	once       sync.Once
}

func (g *gatedReader) Of(ctx context.Context, account string) ([]orders.Balance, error) {
	balances, err := g.BalanceReader.Of(ctx, account)
	g.once.Do(func() {
		close(g.read)
		<-g.open
	})
	return balances, err
}

// TestAReadBeforeALossDoesNotFillAfterIt: a reader misses, reads PostgreSQL
// at version 1 and is slowed; the balance moves to version 2 and is cached;
// Redis restarts without its data and the cache is healed (nothing to
// refill). The slow reader's fill, carrying the heal mark it read before the
// loss, is fenced off: had it landed, its whole hash at version 1 would be
// served for good, with nothing left to refill it.
func TestAReadBeforeALossDoesNotFillAfterIt(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db := migratedPool(t)
	server := testserver.SingleRedis(t, "restarted without persistence")
	caches := coherence.New(server.Client(t))
	truth := postgres.NewBalances(db)
	gate := &gatedReader{BalanceReader: truth, read: make(chan struct{}), open: make(chan struct{})}
	slowReads := placement.NewBalances(gate, caches, logger)
	reads := placement.NewBalances(truth, caches, logger)
	consumer := placement.NewBalanceCoherence(truth, caches, logger)
	healer := placement.NewBalanceCacheHealer(truth, caches, logger)
	ledger := postgres.NewLedger(db)
	account, err := postgres.NewAccounts(db).Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	deposit := func() int64 {
		t.Helper()
		if err := ledger.Deposit(ctx, account, "USD", "1"); err != nil {
			t.Fatal(err)
		}
		current, err := truth.OfAccounts(ctx, []string{account})
		if err != nil {
			t.Fatal(err)
		}
		v := current[account][0].Version
		if _, err := consumer.Apply(ctx, orders.BalanceName(account, "USD")+"@"+itoa(v)); err != nil {
			t.Fatal(err)
		}
		return v
	}
	deposit() // version 1, cached by the consumer: a hash that is not whole
	if healed, err := healer.Heal(ctx); err != nil || !healed {
		t.Fatalf("heal of the new server: %v, %v", healed, err)
	}
	slowDone := make(chan error, 1)
	go func() { _, err := slowReads.Of(ctx, account); slowDone <- err }()
	<-gate.read // read PostgreSQL at version 1
	v2 := deposit()

	server.Restart(t) // no persistence: everything lost, a new identity
	waitFor(t, 10*time.Second, "a heal of the restarted server", func() bool {
		healed, err := healer.Heal(ctx)
		return err == nil && healed
	})
	close(gate.open)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
	list, err := reads.Of(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Version != v2 {
		t.Errorf("after the heal a reader is served %+v, want version %d as PostgreSQL holds it", list, v2)
	}
}

// TestReadersDoNotTrustWholeHashesWhileAHealRuns: a whole hash older than
// PostgreSQL (a promoted replica's) is served as it is until a heal begins;
// from then on readers answer from PostgreSQL, and fill nothing, until the
// heal ends.
func TestReadersDoNotTrustWholeHashesWhileAHealRuns(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	db := migratedPool(t)
	rdb := testserver.QueueRedis(t)
	caches := coherence.New(rdb)
	truth := postgres.NewBalances(db)
	reads := placement.NewBalances(truth, caches, logger)
	ledger := postgres.NewLedger(db)
	account, err := postgres.NewAccounts(db).Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Deposit(ctx, account, "USD", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := reads.Of(ctx, account); err != nil { // whole, at version 1
		t.Fatal(err)
	}
	key := placement.BalanceCacheKey(account)
	stale, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := ledger.Deposit(ctx, account, "USD", "1"); err != nil {
		t.Fatal(err)
	}
	served := func() int64 {
		t.Helper()
		list, err := reads.Of(ctx, account)
		if err != nil || len(list) != 1 {
			t.Fatalf("read: %v, %v", list, err)
		}
		return list[0].Version
	}
	if got := served(); got != 1 {
		t.Fatalf("served version %d from the whole hash, want 1 (no coherence job ran)", got)
	}
	server, err := caches.CacheServer(ctx, placement.BalancesTable)
	if err != nil {
		t.Fatal(err)
	}
	if begun, err := caches.BeginHeal(ctx, placement.BalancesTable, server.Identity, "test", time.Minute); err != nil || !begun {
		t.Fatal(begun, err)
	}
	if got := served(); got != 2 {
		t.Errorf("served version %d while a heal runs, want PostgreSQL's 2", got)
	}
	if now, err := rdb.HGetAll(ctx, key).Result(); err != nil || !maps.Equal(now, stale) {
		t.Errorf("the hash holds %v (%v) after a read while a heal runs, want it untouched: %v", now, err, stale)
	}
}
