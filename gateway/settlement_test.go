package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/ordergen"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestRandomOrdersSettleExactlyOnce places 5,000 random orders from 50
// accounts through the gateway while 4 workers settle them: every admitted
// order gets exactly one row (resting, filled, canceled or rejected), the
// orders trade with each other, and the books audit clean.
//
// On the cluster and Valkey legs (testserver.RerunLeg) it places 1,000: the
// same scripts on the same three queues, each order crossing admit, claim
// and complete as in the first leg, which runs the 5,000. The cluster leg
// runs its tests one at a time, so there the 5,000 cost 48 s of wall.
func TestRandomOrdersSettleExactlyOnce(t *testing.T) {
	testserver.Parallel(t)
	if testing.Short() {
		t.Skip("5,000 orders")
	}
	const accounts, workers = 50, 4
	total := 5000
	if testserver.RerunLeg() {
		total = 1000
	}
	ctx := context.Background()
	f := newFixture(t, accounts)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(uint64(seed), 0))

	ledger := postgres.NewLedger(f.db)
	// Some accounts are rich, some poor: the poor ones' orders are rejected.
	for i, account := range f.accounts {
		scale := []string{"10", "1000", "100000"}[i%3]
		for _, asset := range []string{"USD", "BTC", "ETH"} {
			amount := scale
			if asset != "USD" {
				amount = map[string]string{"10": "0.001", "1000": "0.5", "100000": "40"}[scale]
			}
			if err := ledger.Deposit(ctx, account, asset, amount); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Four workers, each with its own pool, as four processes would have.
	workCtx, stopWorkers := context.WithCancel(ctx)
	var working sync.WaitGroup
	quiet := slog.New(slog.DiscardHandler)
	for range workers {
		pool, err := pgxpool.New(ctx, f.databaseURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		relay := placement.NewOutboxRelay(postgres.NewOutbox(pool), f.client, placement.CoherenceModes, quiet)
		settler := postgres.NewSettler(pool, relay, quiet)
		// Each instrument's queue worked by every worker: what the test
		// proves is settlement's exactness, not the ownership.
		for _, symbol := range []string{"BTC-USD", "ETH-USD", "ETH-BTC"} {
			working.Go(func() {
				err := f.client.Queue(orders.InstrumentQueue(symbol)).Work(workCtx, settlement.Settle(settler), emq.WorkerOptions{
					Concurrency: 4, Lease: 10 * time.Second, Logger: quiet,
					Retry: emq.RetryPolicy{MaxAttempts: 50, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second},
				})
				if err != nil {
					t.Errorf("worker: %v", err)
				}
			})
		}
	}
	defer func() {
		stopWorkers()
		working.Wait()
	}()

	bodies := make(chan [2]string, total)
	for i := range total {
		account := r.IntN(accounts)
		bodies <- [2]string{f.keys[account], ordergen.Random(r, fmt.Sprintf("e2e-%05d", i))}
	}
	close(bodies)
	admitted := make(chan string, total)
	var clients sync.WaitGroup
	for range 16 {
		clients.Go(func() {
			for body := range bodies {
				res := f.place(t, body[0], body[1])
				if res.status != http.StatusAccepted {
					t.Errorf("place %s: %d %s", body[1], res.status, res.body)
					continue
				}
				admitted <- res.json(t)["id"].(string)
			}
		})
	}
	clients.Wait()
	close(admitted)
	ids := make([]string, 0, total)
	for id := range admitted {
		ids = append(ids, id)
	}

	deadline := time.Now().Add(3 * time.Minute)
	var final int
	for ; time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := f.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1)`, ids).Scan(&final); err != nil {
			t.Fatal(err)
		}
		if final == len(ids) {
			break
		}
	}
	// Every order a worker took has its row: resting, filled, canceled by
	// the market, or rejected.
	var taken, rejected, rows, trades int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'rejected'), count(*) FILTER (WHERE status = 'rejected'),
		count(*), (SELECT count(*) FROM trades) FROM orders`).Scan(&taken, &rejected, &rows, &trades); err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d: taken %d (trades %d), rejected %d", len(ids), taken, trades, rejected)
	if len(ids) != total || final != total || rows != total || taken+rejected != total {
		t.Fatalf("admitted %d, final %d, rows %d, taken %d + rejected %d", len(ids), final, rows, taken, rejected)
	}
	if trades == 0 || rejected == 0 {
		t.Errorf("the mix should both trade and reject: trades %d, rejected %d", trades, rejected)
	}
	violations, err := postgres.Audit(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("audit: %+v", v)
	}
	// The queue holds nothing in flight once every order is final.
	stopWorkers()
	working.Wait()
	stats, err := f.queue.Stats(ctx)
	if err != nil || stats.Pending+stats.Active+stats.Delayed+stats.Dead != 0 {
		t.Errorf("queue after settlement: %+v, %v", stats, err)
	}
}
