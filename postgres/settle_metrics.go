package postgres

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SettlementMetrics counts what settlement decided and how long it took.
type SettlementMetrics struct {
	outcomes *prometheus.CounterVec
	duration prometheus.Histogram
	batch    prometheus.Histogram
	decided  prometheus.Counter
}

// NewSettlementMetrics registers settlement's series: orders_settlement_total
// by outcome (the status the order took: open, partially_filled, filled,
// canceled with its cancel reason, rejected with its reject reason; or
// duplicate) and
// orders_settlement_seconds for an order's settlement, and
// orders_settlement_batch_orders for the orders one transaction took, and
// orders_settlement_redecided_total for the batches decided again because a
// balance moved between their read and their lock.
func NewSettlementMetrics(registerer prometheus.Registerer) *SettlementMetrics {
	m := &SettlementMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orders_settlement_total",
			Help: "Settlements by outcome: the status the order took (open, partially_filled, filled, canceled or rejected, with its reason), or duplicate (the order had its row already).",
		}, []string{"outcome", "reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orders_settlement_seconds",
			Help:    "Time of one order's settlement, from the handler's start to its transaction's commit, waiting for a batch included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "orders_settlement_batch_orders",
			Help:    "Orders one settlement transaction took: several when they waited while the previous one was in flight.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128},
		}),
		decided: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orders_settlement_redecided_total",
			Help: "Settlement batches decided a second time, on the locked balances, because a balance they ran a funds check on moved past what their first decision needed.",
		}),
	}
	registerer.MustRegister(m.outcomes, m.duration, m.batch, m.decided)
	return m
}

func (m *SettlementMetrics) observe(result settlement, took time.Duration) {
	if m == nil {
		return
	}
	m.duration.Observe(took.Seconds())
	switch {
	case result.duplicate:
		m.outcomes.WithLabelValues("duplicate", "").Inc()
	default:
		m.outcomes.WithLabelValues(string(result.status), result.reason).Inc()
	}
}

func (m *SettlementMetrics) observeBatch(orders int) {
	if m == nil {
		return
	}
	m.batch.Observe(float64(orders))
}

func (m *SettlementMetrics) observeRedecided() {
	if m == nil {
		return
	}
	m.decided.Inc()
}

// WithMetrics makes the settler count its outcomes.
func (s *Settler) WithMetrics(metrics *SettlementMetrics) *Settler {
	s.metrics = metrics
	return s
}
