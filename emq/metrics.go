package emq

import (
	"github.com/ordergate/ordergate/internal/collectors"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus collectors of the worker runtime. Every series
// carries the queue's name as label "queue", so one Metrics serves workers of
// several queues in one process.
type Metrics struct {
	claimed         *prometheus.CounterVec
	completed       *prometheus.CounterVec
	retried         *prometheus.CounterVec
	dead            *prometheus.CounterVec
	reaped          *prometheus.CounterVec
	staleRefusals   *prometheus.CounterVec
	claimToComplete *prometheus.HistogramVec
	claimWait       *prometheus.HistogramVec

	pending      *prometheus.GaugeVec
	active       *prometheus.GaugeVec
	delayed      *prometheus.GaugeVec
	deadJobs     *prometheus.GaugeVec
	lanes        *prometheus.GaugeVec
	laneDepthMax *prometheus.GaugeVec
}

// claimToCompleteBuckets span a no-op job (about a millisecond) to a job that
// used most of a default 30 s lease.
var claimToCompleteBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
}

// NewMetrics creates the collectors and registers them with registerer; a nil
// registerer leaves them unregistered. Registering twice with the same
// registry returns collectors that share the first registration's series,
// so two workers in one process may each call NewMetrics. It panics, as
// prometheus.MustRegister does, when another collector already owns one of
// the names with a different shape: that is a programming error.
func NewMetrics(registerer prometheus.Registerer) *Metrics {
	queue := []string{"queue"}
	counter := func(name, help string) *prometheus.CounterVec {
		return collectors.Register(registerer, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, queue))
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return collectors.Register(registerer, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, queue))
	}
	return &Metrics{
		claimed:       counter("emq_jobs_claimed_total", "Jobs leased to this process's workers."),
		completed:     counter("emq_jobs_completed_total", "Jobs this process's workers completed."),
		retried:       counter("emq_jobs_retried_total", "Failed attempts sent back to wait for another attempt."),
		dead:          counter("emq_jobs_dead_total", "Jobs moved to dead: attempts spent, a permanent failure, or reaped on their last attempt."),
		reaped:        counter("emq_jobs_reaped_total", "Expired leases this process's reaper took back (requeued or dead)."),
		staleRefusals: counter("emq_stale_refusals_total", "Moves the queue refused because the lease had passed to another worker (EMQSTALE)."),
		claimToComplete: collectors.Register(registerer, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "emq_claim_to_complete_seconds",
			Help:    "Time from a job's claim to its confirmed completion.",
			Buckets: claimToCompleteBuckets,
		}, queue)),
		claimWait: collectors.Register(registerer, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "emq_claim_wait_seconds",
			Help: "Time a job waited pending before its first claim: from its admission to the claim script's run, both by the server's clock, in whole milliseconds.",
			// 1 ms (the clock's grain) to 2 min, each bucket about 1.4 times the one before.
			Buckets: prometheus.ExponentialBucketsRange(0.001, 120, 35),
		}, queue)),
		pending:      gauge("emq_pending_jobs", "Pending jobs of the queue, sampled."),
		active:       gauge("emq_active_jobs", "Leased jobs of the queue across all workers, sampled."),
		delayed:      gauge("emq_delayed_jobs", "Jobs waiting for a retry, sampled."),
		deadJobs:     gauge("emq_dead_jobs", "Dead jobs of the queue, sampled."),
		lanes:        gauge("emq_lanes", "Groups with pending jobs (nonempty fair lanes), sampled."),
		laneDepthMax: gauge("emq_lane_depth_max", "Pending jobs in the deepest lane, sampled."),
	}
}

// queueMetrics are the series of one queue, resolved once per worker so the
// hot path does no label lookups.
type queueMetrics struct {
	claimed, completed, retried, dead, reaped, staleRefusals prometheus.Counter
	claimToComplete, claimWait                               prometheus.Observer

	pending, active, delayed, deadJobs, lanes, laneDepthMax prometheus.Gauge
}

func (m *Metrics) forQueue(name string) queueMetrics {
	return queueMetrics{
		claimed:         m.claimed.WithLabelValues(name),
		completed:       m.completed.WithLabelValues(name),
		retried:         m.retried.WithLabelValues(name),
		dead:            m.dead.WithLabelValues(name),
		reaped:          m.reaped.WithLabelValues(name),
		staleRefusals:   m.staleRefusals.WithLabelValues(name),
		claimToComplete: m.claimToComplete.WithLabelValues(name),
		claimWait:       m.claimWait.WithLabelValues(name),
		pending:         m.pending.WithLabelValues(name),
		active:          m.active.WithLabelValues(name),
		delayed:         m.delayed.WithLabelValues(name),
		deadJobs:        m.deadJobs.WithLabelValues(name),
		lanes:           m.lanes.WithLabelValues(name),
		laneDepthMax:    m.laneDepthMax.WithLabelValues(name),
	}
}
