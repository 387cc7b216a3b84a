package settlement_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestAGatewaysCoherenceJobIsAppliedAtOnce: a relay of a process that works
// no coherence queue (a gateway's, relaying a cancel) admits onto the
// remote queue, whose workers wait on its wake token: an idle worker, whose
// shards' claim loops poll only every settlement.CoherenceIdlePoll, has the
// balance cached well within that poll, each of several times.
func TestAGatewaysCoherenceJobIsAppliedAtOnce(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	database := testserver.MigratedPostgres(t)
	redisServer := testserver.QueueRedisServer(t)
	logger := slog.New(slog.DiscardHandler)
	config := settlement.DefaultConfig()
	config.Concurrency = 8
	runWorker(t, database.URL, redisServer.URL(), config, logger, nil)

	db := database.Pool(t)
	rdb := redisServer.Client(t)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	gateway := placement.NewOutboxRelay(postgres.NewOutbox(db), client, placement.CoherenceModes, logger, placement.WithRemoteCoherence())
	if err := gateway.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	caches := coherence.New(rdb)
	account, err := postgres.NewAccounts(db).Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	// Past the shards' first claims: their loops are at their idle poll.
	time.Sleep(settlement.CoherenceIdlePoll + 200*time.Millisecond)

	for i := range 3 {
		if err := postgres.NewLedger(db).Deposit(ctx, account, "USD", "1.00"); err != nil {
			t.Fatal(err)
		}
		var entry orders.OutboxEntry
		if err := db.QueryRow(ctx, `SELECT j.id, j.name, j.version, j.payload FROM outbox j
			JOIN balances b ON j.name = $1 AND j.version = b.version WHERE b.account_id = $2 AND b.asset = 'USD'`,
			orders.BalanceName(account, "USD"), account).Scan(&entry.ID, &entry.Name, &entry.Version, &entry.Payload); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		gateway.Relay(ctx, []orders.OutboxEntry{entry})
		for {
			cached, err := caches.ReadCache(ctx, placement.BalanceCacheKey(account))
			if err != nil {
				t.Fatal(err)
			}
			if cached["USD"].Version >= entry.Version {
				break
			}
			if took := time.Since(start); took > settlement.CoherenceIdlePoll/2 {
				t.Fatalf("relay %d: balance not cached %v after the relay, want well within the shards' poll %v",
					i, took, settlement.CoherenceIdlePoll)
			}
			time.Sleep(2 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond)
	}
}
