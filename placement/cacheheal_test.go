package placement_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
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
	log := slog.New(slog.DiscardHandler)
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
	balances := placement.NewBalances(truth, caches, log)
	consumer := placement.NewBalanceCoherence(truth, caches, log)
	healer := placement.NewBalanceCacheHealer(truth, caches, log, placement.WithHealTiming(placement.CacheHealInterval, 200*time.Millisecond))

	accounts := postgres.NewAccounts(db)
	ledger := postgres.NewLedger(db)
	const n = 200
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

	primary.Stop(t)
	serverAddr.Store(replica.Addr)
	failover := time.Now()
	stale := staleBalances(t, caches, truth, ids)
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
