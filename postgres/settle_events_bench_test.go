package postgres_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// BenchmarkSettleEvents is settle_events.sql on its own, as an owner's
// write of the sustained load runs it: on a database that settlements
// filled (200 accounts, 3 instruments), a write's orders (the 50 last
// settled, as its takers, and the makers they traded with), committed
// after each call, so the sources' versions and the outbox grow as they do.
// It reports the CPU the backend spent per call and per order (pg-µs, from
// /proc/<pid>/schedstat: run it on the machine of the server) and the
// outbox rows per call. Compare the figures of one run.
func BenchmarkSettleEvents(b *testing.B) {
	ctx := context.Background()
	db, touched, takers := eventsBench(b)
	conn, err := db.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	call := func() int {
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer tx.Rollback(ctx)
		rows, _ := tx.Query(ctx, postgres.SettleEventsSQL, touched, takers, takers)
		entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
		if err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		return len(entries)
	}
	// Warm: the connection's plan is made.
	for range 10 {
		call()
	}
	entries := 0
	cpu := backendCPU(b, db)
	b.ResetTimer()
	for range b.N {
		entries += call()
	}
	b.StopTimer()
	spent := float64(backendCPU(b, db) - cpu)
	b.ReportMetric(spent/1e3/float64(b.N), "pg-µs/call")
	b.ReportMetric(spent/1e3/float64(b.N*len(touched)), "pg-µs/order")
	b.ReportMetric(float64(entries)/float64(b.N), "rows/call")
}

// eventsBench fills a database by settling orders of 200 accounts on 3
// instruments, as owners in batches, and returns it with a write's orders
// as settle_events.sql takes them: every order the write touched (its
// takers, the 50 last settled, then the makers they traded with) and its
// takers.
func eventsBench(b *testing.B) (db *pgxpool.Pool, touched, takers []string) {
	b.Helper()
	ctx := context.Background()
	db, accounts := benchCustomers(b, "&pool_max_conns=20", 200)
	markets := []struct{ symbol, quantity, price string }{
		{"BTC-USD", "0.00100", "50000.00"}, {"ETH-USD", "0.010", "3000.00"}, {"ETH-BTC", "0.005", "0.06000"},
	}
	settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler))
	for epoch, market := range markets {
		if err := settler.TakeOver(ctx, market.symbol, int64(epoch)+1); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { settler.GiveUp(market.symbol) })
	}
	const n = 3000
	work := make(chan orders.Order, n)
	for i := range n {
		market := markets[i%len(markets)]
		side := orders.Buy
		if i/len(markets)%2 == 1 {
			side = orders.Sell
		}
		work <- newOrder(accounts[i*7%len(accounts)], market.symbol, side, market.quantity, market.price)
	}
	close(work)
	var wg sync.WaitGroup
	for range 120 {
		wg.Go(func() {
			for order := range work {
				if err := settler.Settle(ctx, order, 1); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := db.QueryRow(ctx, `SELECT array_agg(id) FROM (SELECT id FROM orders ORDER BY created_at DESC, id DESC LIMIT 50) AS last`).
		Scan(&takers); err != nil {
		b.Fatal(err)
	}
	var makers []string
	if err := db.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT maker_order_id), '{}') FROM trades WHERE taker_order_id = ANY($1)`, takers).
		Scan(&makers); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return db, append(append([]string{}, takers...), makers...), takers
}
