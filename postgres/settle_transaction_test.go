package postgres_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// TestSettleDecidesAgainWhenAFundsCheckWouldChange moves the taker's
// balance between the batch's unlocked read and its locks, as a withdrawal
// or another instrument's settlement can: the order comes out as a
// decision on the locked balance says, and the batch decides again only
// when a funds check would come out differently.
func TestSettleDecidesAgainWhenAFundsCheckWouldChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		// usd is what the buyer holds when the order is read; meanwhile
		// moves by this (a deposit, or a withdrawal when negative).
		usd, meanwhile string
		wantStatus     string
		wantAvailable  string
		wantRedecided  float64
	}{
		// 1 BTC at 50000 holds 50000 + 20 bps = 50100 USD.
		{name: "a withdrawal leaves too little", usd: "100000", meanwhile: "-60000",
			wantStatus: "rejected", wantAvailable: "40000", wantRedecided: 1},
		{name: "a deposit pays for a refused order", usd: "1000", meanwhile: "60000",
			wantStatus: "open", wantAvailable: "10900", wantRedecided: 1},
		{name: "a deposit changes no check", usd: "100000", meanwhile: "1",
			wantStatus: "open", wantAvailable: "49901", wantRedecided: 0},
		{name: "a withdrawal that still leaves enough", usd: "100000", meanwhile: "-49900",
			wantStatus: "open", wantAvailable: "0", wantRedecided: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMarket(t)
			buyer := m.newCustomerWith(t, map[string]string{"USD": tc.usd, "BTC": "1"})
			settler, registry := meteredSettler(t, m)
			ledger := postgres.NewLedger(m.db)
			var once sync.Once
			postgres.SetAfterFirstDecision(t, func() {
				once.Do(func() {
					var err error
					if amount, withdraw := strings.CutPrefix(tc.meanwhile, "-"); withdraw {
						err = ledger.Withdraw(context.Background(), buyer, "USD", amount)
					} else {
						err = ledger.Deposit(context.Background(), buyer, "USD", amount)
					}
					if err != nil {
						t.Errorf("moving the balance meanwhile: %v", err)
					}
				})
			})
			order := newOrder(buyer, "BTC-USD", orders.Buy, "1", "50000")
			if err := settlement.Settle(settler)(context.Background(), claimOf(t, order, 1)); err != nil {
				t.Fatal(err)
			}
			if got := mustOrder(t, m.db, order.ID).status; got != tc.wantStatus {
				t.Errorf("status %s, want %s", got, tc.wantStatus)
			}
			if got := balanceOf(t, m.db, buyer, "USD").available; got != tc.wantAvailable {
				t.Errorf("USD available %s, want %s", got, tc.wantAvailable)
			}
			if got := counterValue(t, registry, "orders_settlement_redecided_total"); got != tc.wantRedecided {
				t.Errorf("decided again %v times, want %v", got, tc.wantRedecided)
			}
			if found := auditFinds(t, m.db); len(found) > 0 {
				t.Errorf("the audit found %v", found)
			}
		})
	}
}

// counterValue reads a counter without labels from registry.
func counterValue(t testing.TB, registry *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if family.GetName() == name {
			return family.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s series", name)
	return 0
}

// TestSettleDecidingAgainLocksRowsTheFirstDecisionDidNotWrite: the first
// decision refuses a buy for want of USD; a deposit meanwhile pays for it;
// deciding again, it takes an ask whose seller has no USD row yet, which is
// opened and locked outside the first lock set.
func TestSettleDecidingAgainLocksRowsTheFirstDecisionDidNotWrite(t *testing.T) {
	m := newMarket(t)
	seller := m.newCustomerWith(t, map[string]string{"BTC": "1"})
	m.settle(t, newOrder(seller, "BTC-USD", orders.Sell, "0.5", "50000"), 1)
	buyer := m.newCustomerWith(t, map[string]string{"USD": "10"})
	settler, registry := meteredSettler(t, m)
	var once sync.Once
	postgres.SetAfterFirstDecision(t, func() {
		once.Do(func() {
			if err := postgres.NewLedger(m.db).Deposit(context.Background(), buyer, "USD", "60000"); err != nil {
				t.Error(err)
			}
		})
	})
	order := newOrder(buyer, "BTC-USD", orders.Buy, "0.5", "50000")
	if err := settlement.Settle(settler)(context.Background(), claimOf(t, order, 1)); err != nil {
		t.Fatal(err)
	}
	if got := mustOrder(t, m.db, order.ID); got.status != "filled" {
		t.Errorf("buy is %s, want filled", got.state())
	}
	// 0.5 × 50000 less the 10 bps maker fee.
	if got := balanceOf(t, m.db, seller, "USD").available; got != "24975" {
		t.Errorf("seller USD available %s, want 24975", got)
	}
	if got := counterValue(t, registry, "orders_settlement_redecided_total"); got != 1 {
		t.Errorf("decided again %v times, want 1", got)
	}
	mustAudit(t, m.db)
}
