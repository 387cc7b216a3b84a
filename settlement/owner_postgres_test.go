package settlement_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestTakeOverOutwaitsAStuckTransaction: a transaction holds BTC-USD's row
// for 2.5 s, past the take-over's bounded wait; the worker's take-over
// tries again instead of giving the queue up, and owns the instrument once
// the row is free.
func TestTakeOverOutwaitsAStuckTransaction(t *testing.T) {
	ctx := context.Background()
	db := testserver.MigratedPostgres(t).Pool(t)
	stuck, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stuck.Exec(ctx, `SELECT 1 FROM instruments WHERE symbol = 'BTC-USD' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	const held = 2500 * time.Millisecond
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(held)
		_ = stuck.Rollback(ctx)
	}()
	t.Cleanup(func() { <-released })

	settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler))
	t.Cleanup(func() { settler.GiveUp("BTC-USD") })
	takeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := settlement.TakeOverRetrying(takeCtx, settler, "BTC-USD", 1, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("take over after %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if took := time.Since(start); took < held-100*time.Millisecond {
		t.Errorf("took over in %v, while the row was held %v", took, held)
	}
	if _, ok := settler.OwnedBook("BTC-USD"); !ok {
		t.Errorf("taken over, but no book")
	}
}
