package settlement_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestWorkerPrunesTheRelayedOutbox: a running worker deletes the outbox
// rows relayed longer ago than its retention, and keeps the ones relayed
// since, which a relay may still read back: a retention shorter than
// that window (a Config built in code; the flag refuses it) keeps them
// the window.
func TestWorkerPrunesTheRelayedOutbox(t *testing.T) {
	ctx := context.Background()
	database := testserver.MigratedPostgres(t)
	redisServer := testserver.QueueRedisServer(t)
	db := database.Pool(t)
	config := settlement.DefaultConfig()
	config.Concurrency = 16
	config.OutboxRetention = time.Second // raised to postgres.EventRowsWindow
	config.OutboxPruneInterval = 20 * time.Millisecond
	insert := func(name string, relayedAgo time.Duration) {
		t.Helper()
		if _, err := db.Exec(ctx, `INSERT INTO outbox (name, version, payload, created_at, relayed_at)
			VALUES ($1, 1, '{}', now() - $2::interval - interval '1 second', now() - $2::interval)`, name, relayedAgo); err != nil {
			t.Fatal(err)
		}
	}
	const old, young = orders.EventsTable + ":ACC_OLD:BTC-USD", orders.EventsTable + ":ACC_YOUNG:BTC-USD"
	insert(old, 2*time.Minute)
	insert(young, 30*time.Second)
	exists := func(name string) bool {
		t.Helper()
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE name = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	runWorker(t, database.URL, redisServer.URL(), config, slog.New(slog.DiscardHandler), nil)
	waitUntil(t, 10*time.Second, "the row relayed two minutes ago deleted", func() bool { return !exists(old) })
	if !exists(young) {
		t.Errorf("the row relayed 30 s ago, inside the window of %s, is gone", postgres.EventRowsWindow)
	}
}
