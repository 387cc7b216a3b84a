package postgres_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// TestSettlementMetricsNameStatementsByFile: every file of sql/ is found
// again from its text as pg_stat_statements shows it, its constants
// replaced by $n and its comment kept; a text of none is "".
func TestSettlementMetricsNameStatementsByFile(t *testing.T) {
	files, err := filepath.Glob("sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sql files: %v", err)
	}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(filepath.Base(file), ".sql")
		if got := postgres.StatementFile(string(text)); got != want {
			t.Errorf("%s is named %q", want, got)
		}
		// pg_stat_statements: constants become $n after the comment.
		comment, code := splitComment(string(text))
		normalized := comment + strings.NewReplacer("'", "", "0", "$8", "1", "$7").Replace(code)
		if got := postgres.StatementFile(normalized); comment != "" && got != want {
			t.Errorf("%s normalized is named %q", want, got)
		}
		// pg_stat_activity: the text cut short, inside the comment.
		if len(comment) > 300 {
			if got := postgres.StatementFile(comment[:300]); got != want {
				t.Errorf("%s cut short is named %q", want, got)
			}
		}
	}
	for _, query := range []string{"BEGIN", "COMMIT", "SELECT 1", "-- a comment of no file\nSELECT $1", "-- The"} {
		if got := postgres.StatementFile(query); got != "" {
			t.Errorf("%q is named %q", query, got)
		}
	}
}

// splitComment is the text's leading comment lines and the rest.
func splitComment(text string) (comment, code string) {
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "--") {
			break
		}
		comment += line
	}
	return comment, text[len(comment):]
}

// TestSettlementMetricsTimeTheBatchCyclePhases: each batch observes its
// acquire, read, decide and write once, and redecide only when it decided
// again.
func TestSettlementMetricsTimeTheBatchCyclePhases(t *testing.T) {
	m := newMarket(t)
	settler, registry := meteredSettler(t, m)
	settle := func(order orders.Order) {
		t.Helper()
		if err := settlement.Settle(settler)(context.Background(), claimOf(t, order, 1)); err != nil {
			t.Fatal(err)
		}
	}
	settle(newOrder(m.alice, "BTC-USD", orders.Sell, "0.01000", "50000.00"))
	settle(newOrder(m.bob, "BTC-USD", orders.Buy, "0.01000", "50000.00"))
	if got, want := phaseCounts(t, registry), map[string]uint64{"acquire": 2, "read": 2, "decide": 2, "write": 2, "redecide": 0}; !maps.Equal(got, want) {
		t.Errorf("phases observed %v, want %v", got, want)
	}

	// A deposit between the decision and the locks pays for a refused
	// order: the batch decides again.
	buyer := m.newCustomerWith(t, map[string]string{"USD": "1000", "BTC": "1"})
	var once sync.Once
	postgres.SetAfterFirstDecision(t, func() {
		once.Do(func() {
			if err := postgres.NewLedger(m.db).Deposit(context.Background(), buyer, "USD", "60000"); err != nil {
				t.Errorf("deposit meanwhile: %v", err)
			}
		})
	})
	settle(newOrder(buyer, "BTC-USD", orders.Buy, "1", "50000"))
	if got, want := phaseCounts(t, registry), map[string]uint64{"acquire": 3, "read": 3, "decide": 3, "write": 3, "redecide": 1}; !maps.Equal(got, want) {
		t.Errorf("phases observed %v, want %v", got, want)
	}
}

// phaseCounts is orders_settlement_phase_seconds' observations by phase.
func phaseCounts(t *testing.T, registry *prometheus.Registry) map[string]uint64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, family := range families {
		if family.GetName() != "orders_settlement_phase_seconds" {
			continue
		}
		for _, metric := range family.GetMetric() {
			h := metric.GetHistogram()
			counts[metric.GetLabel()[0].GetValue()] = h.GetSampleCount()
			if h.GetSampleCount() > 0 && h.GetSampleSum() <= 0 {
				t.Errorf("phase %s: %d observations summing to %v", metric.GetLabel()[0].GetValue(), h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	return counts
}
