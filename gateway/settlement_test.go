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
)

// randomOrder is a valid order on the seeded instruments' grids; funds decide
// whether it settles.
func randomOrder(r *rand.Rand, clientOrderID string) string {
	side := []string{"buy", "sell"}[r.IntN(2)]
	switch r.IntN(3) {
	case 0: // BTC-USD: 0.00100–0.05000 BTC around 50000
		quantity := decimalText(100+r.IntN(4900), 5)
		price := fmt.Sprintf("%d.%02d", 49000+r.IntN(2000), r.IntN(100))
		return order(clientOrderID, "BTC-USD", side, r.IntN(4) == 0, quantity, price)
	case 1: // ETH-USD: 0.010–2.000 ETH around 3000, tick 0.05
		quantity := decimalText(10+r.IntN(1990), 3)
		price := fmt.Sprintf("%d.%02d", 2900+r.IntN(200), 5*r.IntN(20))
		return order(clientOrderID, "ETH-USD", side, r.IntN(4) == 0, quantity, price)
	default: // ETH-BTC: 0.010–5.000 ETH in lots of 0.005 around 0.06
		quantity := decimalText(5*(2+r.IntN(998)), 3)
		price := fmt.Sprintf("0.0%d", 5000+r.IntN(2000))
		return order(clientOrderID, "ETH-BTC", side, r.IntN(4) == 0, quantity, price)
	}
}

// decimalText writes units × 10^-decimals exactly, with all its decimals.
func decimalText(units, decimals int) string {
	scale := 1
	for range decimals {
		scale *= 10
	}
	return fmt.Sprintf("%d.%0*d", units/scale, decimals, units%scale)
}

func order(clientOrderID, symbol, side string, market bool, quantity, price string) string {
	if market {
		return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"market","quantity":%q}`, clientOrderID, symbol, side, quantity)
	}
	return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"limit","quantity":%q,"price":%q}`, clientOrderID, symbol, side, quantity, price)
}

// TestRandomOrdersSettleExactlyOnce places 5,000 random orders from 50
// accounts through the gateway while 4 workers settle them: every admitted
// order reaches exactly one final state and the books audit clean.
func TestRandomOrdersSettleExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("5,000 orders")
	}
	const accounts, total, workers = 50, 5000, 4
	ctx := context.Background()
	f := newFixture(t, accounts)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(uint64(seed), 0))

	ledger := orders.NewLedger(f.db)
	for _, funds := range [][2]string{{"USD", "50000000.00"}, {"BTC", "1000"}, {"ETH", "20000"}} {
		if err := ledger.Deposit(ctx, orders.VenueAccount, funds[0], funds[1]); err != nil {
			t.Fatal(err)
		}
	}
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
		relay := orders.NewJournalRelay(pool, f.client, orders.CoherenceLanes, quiet)
		settler := orders.NewSettler(pool, relay, quiet)
		working.Go(func() {
			err := f.queue.Work(workCtx, settler.Settle, emq.WorkerOptions{
				Concurrency: 4, Lease: 10 * time.Second, Logger: quiet,
				Retry: emq.RetryPolicy{MaxAttempts: 50, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second},
			})
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		})
	}
	defer func() {
		stopWorkers()
		working.Wait()
	}()

	bodies := make(chan [2]string, total)
	for i := range total {
		account := r.IntN(accounts)
		bodies <- [2]string{f.keys[account], randomOrder(r, fmt.Sprintf("e2e-%05d", i))}
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
	var settled, rejected, rows int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'settled'), count(*) FILTER (WHERE status = 'rejected'), count(*) FROM orders`).
		Scan(&settled, &rejected, &rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d: settled %d, rejected %d", len(ids), settled, rejected)
	if len(ids) != total || final != total || rows != total || settled+rejected != total {
		t.Fatalf("admitted %d, final %d, rows %d, settled %d + rejected %d", len(ids), final, rows, settled, rejected)
	}
	if settled == 0 || rejected == 0 {
		t.Errorf("the mix should both settle and reject: settled %d, rejected %d", settled, rejected)
	}
	var transactions int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM ledger_transactions WHERE kind = 'settlement'`).Scan(&transactions); err != nil || transactions != settled {
		t.Errorf("settlement transactions %d (%v), settled orders %d", transactions, err, settled)
	}
	violations, err := orders.Audit(ctx, f.db)
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
