package postgres_test

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/postgres"
)

// TestOwnerPlansItsOwnStatements: on a connection the locked path used
// first, an owner's batches run none of the statements the locked path
// prepared there, and plan every statement of theirs generically, under
// their own settings. A statement shared by text would keep the plan the
// locked path's transaction made it with, under the default settings: on
// statistics of small tables, a scan once a key when the tables grew
// (TestSettlementGrownPlansProbeKeys).
func TestOwnerPlansItsOwnStatements(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	accounts := []string{m.alice, m.bob, m.newCustomer(t), m.newCustomer(t)}
	// One connection, so the two paths meet on it.
	config := m.db.Config().Copy()
	config.MaxConns, config.MinConns = 1, 0
	one, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)

	random := rand.New(rand.NewPCG(7, 24))
	locked := postgres.NewSettler(one, nil, slog.New(slog.DiscardHandler))
	for _, order := range randomOrders(random, accounts, 40) {
		if err := locked.Settle(ctx, order, 1); err != nil {
			t.Fatalf("locked path: %v", err)
		}
	}
	lockedTexts, ownedTexts := postgres.SharedStatements()
	before := preparedPlans(t, one)
	for name, text := range lockedTexts {
		if before[text].generic+before[text].custom == 0 && name != "settle_guard" && name != "settle_open" {
			t.Errorf("the locked path never ran %s", name)
		}
	}

	s := postgres.NewSettler(one, nil, slog.New(slog.DiscardHandler))
	if err := s.TakeOver(ctx, "BTC-USD", 1); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(settleInOrder(t, s, randomOrders(random, accounts, 40))...); err != nil {
		t.Fatalf("owner: %v", err)
	}
	s.GiveUp("BTC-USD")
	after := preparedPlans(t, one)

	for name, text := range lockedTexts {
		if got, was := after[text].generic, before[text].generic; got != was {
			t.Errorf("the owner ran %s's generic plan prepared by the locked path %d times", name, got-was)
		}
	}
	for name, text := range ownedTexts {
		plans := after[text]
		if plans.custom > 0 {
			t.Errorf("the owner planned %s for its parameters %d times, want a generic plan only", name, plans.custom)
		}
		if plans.generic == 0 && name != "settle_guard" && name != "settle_open" {
			t.Errorf("the owner never ran its %s", name)
		}
	}
}

type preparedPlanCounts struct{ generic, custom int64 }

// preparedPlans is every statement prepared on db's one connection, by its
// text, with how many times it ran on a generic and on a custom plan.
func preparedPlans(t testing.TB, db *pgxpool.Pool) map[string]preparedPlanCounts {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
	if err != nil {
		t.Fatal(err)
	}
	plans := map[string]preparedPlanCounts{}
	var text string
	var counts preparedPlanCounts
	if _, err := pgx.ForEachRow(rows, []any{&text, &counts.generic, &counts.custom}, func() error {
		plans[text] = counts
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return plans
}

// TestOwnerStatementsKeepTheirFileNames: an owner's copy of a shared
// statement is a text of its own, yet named by the statement's file
// (postgres.StatementFile), as the locked path's is: pg_stat_statements
// and pg_stat_activity show either text, and the bench's profile counts
// both under the file.
func TestOwnerStatementsKeepTheirFileNames(t *testing.T) {
	lockedTexts, ownedTexts := postgres.SharedStatements()
	for name, text := range ownedTexts {
		if text == lockedTexts[name] {
			t.Errorf("the owner's %s is the locked path's text", name)
		}
		if got := postgres.StatementFile(text); got != name {
			t.Errorf("the owner's %s is named %q", name, got)
		}
		if got := postgres.StatementFile(lockedTexts[name]); got != name {
			t.Errorf("the locked path's %s is named %q", name, got)
		}
	}
}
