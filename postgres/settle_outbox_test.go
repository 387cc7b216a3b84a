package postgres_test

import (
	"context"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestAWriteAnnouncesItsBalancesInOneRow: whichever path writes it (the
// locked path, an owner's), a settlement write inserts one outbox row for
// its balances, named orders.BalancesWriteName at its own id, listing each
// balance the write moved once, at the version it reached; a balance two
// orders of a batch moved is listed once, at the last. A settler writing
// for the relays of earlier releases (WithBalanceRowEach) inserts a row
// per balance instead, each at the version the balance reached.
func TestAWriteAnnouncesItsBalancesInOneRow(t *testing.T) {
	for _, c := range []struct {
		name  string
		owned bool
		// together: the write is a batch of three orders, not one; each
		// write's bids take the makers' asks (bob's, carol's) at 50000.
		together bool
		// rowEach: the settler writes a row per balance.
		rowEach bool
		// plain: the settler's row lists no amounts.
		plain bool
	}{
		{name: "locked path, one order"},
		{name: "locked path, a batch of three", together: true},
		{name: "an owner's batch", owned: true},
		{name: "locked path, a batch of three, a row per balance", together: true, rowEach: true},
		{name: "an owner's batch, a row per balance", owned: true, rowEach: true},
		{name: "an owner's batch, no amounts", owned: true, plain: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			m := newMarket(t)
			s := m.settler
			if c.owned {
				s = postgres.NewSettler(m.db, m.relay, slog.New(slog.DiscardHandler))
				if err := s.TakeOver(ctx, "BTC-USD", 1); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.GiveUp("BTC-USD") })
			}
			if c.rowEach {
				s.WithBalanceRowEach()
			}
			if c.plain {
				s.WithoutBalanceValues()
			}
			carol := m.newCustomer(t)
			for _, maker := range []orders.Order{
				newOrder(m.bob, "BTC-USD", orders.Sell, "0.2", "50000"),
				newOrder(carol, "BTC-USD", orders.Sell, "0.2", "50000"),
			} {
				if err := s.Settle(ctx, maker, 1); err != nil {
					t.Fatal(err)
				}
			}
			outboxBefore, before := lastOutboxID(t, m.db), balances(t, m.db)

			if c.together {
				// Two of alice's bids move her balances twice in the write.
				batch := []orders.Order{
					newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "50000"),
					newOrder(m.alice, "BTC-USD", orders.Buy, "0.2", "50000"),
					newOrder(carol, "BTC-USD", orders.Buy, "0.05", "49000"),
				}
				errs, err := postgres.SettleTogether(ctx, s, batch)
				if err != nil {
					t.Fatal(err)
				}
				for i, err := range errs {
					if err != nil {
						t.Fatalf("order %d: %v", i, err)
					}
				}
			} else if err := s.Settle(ctx, newOrder(m.alice, "BTC-USD", orders.Buy, "0.3", "50000"), 1); err != nil {
				t.Fatal(err)
			}

			moved := map[string]int64{}
			for name, b := range balances(t, m.db) {
				if b.version != before[name].version {
					moved[name] = b.version
				}
			}
			rows, _ := splitEvents(t, outboxAfter(t, m.db, outboxBefore))
			switch {
			case c.rowEach:
				for _, row := range rows {
					if row.Name == orders.BalancesWriteName || row.Payload != row.Name+"@"+strconv.FormatInt(row.Version, 10) {
						t.Fatalf("the write's balances rows %v, want one a balance", rows)
					}
				}
				if len(rows) != len(moved) {
					t.Errorf("%d balances rows for %d balances moved", len(rows), len(moved))
				}
			case len(rows) != 1 || rows[0].Name != orders.BalancesWriteName || rows[0].Version != rows[0].ID:
				t.Fatalf("the write's balances rows %v, want one %s at its id", rows, orders.BalancesWriteName)
			}
			if got := announced(t, rows); !maps.Equal(got, moved) {
				t.Errorf("the row announces %v, want the balances moved %v", got, moved)
			}
			assertLinesCarryTheBalances(t, m.db, rows, !c.rowEach && !c.plain)
			// alice, bob, carol (both sides), the venue's fees.
			if len(moved) < 6 {
				t.Errorf("the write moved %d balances %v, want at least 6", len(moved), moved)
			}
		})
	}
}

// assertLinesCarryTheBalances fails unless each balance line of rows
// carries its balance's amounts at its version (withAmounts) as the
// coherence consumer's read spells them (postgres.Balances.Current), or
// carries none (!withAmounts).
func assertLinesCarryTheBalances(t testing.TB, db *pgxpool.Pool, rows []orders.OutboxEntry, withAmounts bool) {
	t.Helper()
	for _, row := range rows {
		for _, entry := range orders.BalanceEntries(row) {
			_, available, held, carried := orders.SplitBalanceAmounts(entry.Payload)
			if carried != withAmounts {
				t.Errorf("the line %q carries amounts: %v, want %v", entry.Payload, carried, withAmounts)
				continue
			}
			if !carried {
				continue
			}
			account, asset, _ := strings.Cut(strings.TrimPrefix(entry.Name, orders.BalancesTable+":"), ":")
			read, err := postgres.NewBalances(db).Current(context.Background(),
				[]orders.BalanceVersion{{Account: account, Asset: asset, Version: entry.Version}})
			if err != nil {
				t.Fatal(err)
			}
			if b := read[entry.Name]; b == nil || b.Version != entry.Version || b.Available != available || b.Held != held {
				t.Errorf("the line %q, PostgreSQL holds %+v", entry.Payload, b)
			}
		}
	}
}
