package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestTakeOverNeverHangs: a take-over blocked by a stuck transaction
// fails within its bounded wait with ErrTakeOverBlocked, changing nothing,
// whether another connection holds the instrument's row or a batch of the
// settler's own still settles under the instrument's lock; once the holder
// lets go, the take-over succeeds.
func TestTakeOverNeverHangs(t *testing.T) {
	const within = 5 * time.Second
	ctx := context.Background()
	tests := []struct {
		name string
		// hold makes something hold BTC-USD on m (s is the settler taking
		// over) and returns what lets it go.
		hold func(t *testing.T, m *market, s *postgres.Settler) func()
	}{
		{"another connection holds the row", func(t *testing.T, m *market, _ *postgres.Settler) func() {
			stuck, err := m.db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := stuck.Exec(ctx, `UPDATE instruments SET status = status WHERE symbol = 'BTC-USD'`); err != nil {
				t.Fatal(err)
			}
			return func() { _ = stuck.Rollback(ctx) }
		}},
		{"a locked batch of its own", func(t *testing.T, m *market, s *postgres.Settler) func() {
			release, decided := make(chan struct{}), make(chan struct{})
			var once sync.Once
			postgres.SetAfterFirstDecision(t, func() {
				once.Do(func() { close(decided) })
				<-release
			})
			done := make(chan error, 1)
			go func() { done <- s.Settle(ctx, newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "50000"), 1) }()
			<-decided
			return func() {
				close(release)
				if err := <-done; err != nil {
					t.Errorf("the locked batch: %v", err)
				}
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMarket(t)
			s := postgres.NewSettler(m.db, nil, slog.New(slog.DiscardHandler))
			t.Cleanup(func() { s.GiveUp("BTC-USD") })
			letGo := tc.hold(t, m, s)
			start := time.Now()
			err := s.TakeOver(ctx, "BTC-USD", 1)
			if took := time.Since(start); took > within {
				t.Errorf("the take-over took %v, want at most %v", took, within)
			}
			if !errors.Is(err, postgres.ErrTakeOverBlocked) || errors.Is(err, postgres.ErrFenced) {
				t.Errorf("a blocked take-over: %v; want ErrTakeOverBlocked", err)
			}
			if _, ok := s.OwnedBook("BTC-USD"); ok {
				t.Errorf("a blocked take-over left a book")
			}
			letGo()
			var epoch int64
			if err := m.db.QueryRow(ctx, `SELECT owner_epoch FROM instruments WHERE symbol = 'BTC-USD'`).Scan(&epoch); err != nil || epoch != 0 {
				t.Errorf("owner_epoch %d, %v after a blocked take-over; want 0", epoch, err)
			}
			if err := s.TakeOver(ctx, "BTC-USD", 1); err != nil {
				t.Fatalf("once the holder let go: %v", err)
			}
		})
	}
}
