package postgres

import (
	"embed"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SettlementMetrics counts what settlement decided and how long it took.
type SettlementMetrics struct {
	outcomes *prometheus.CounterVec
	duration prometheus.Histogram
	batch    prometheus.Histogram
	decided  prometheus.Counter
	// phases are orders_settlement_phase_seconds' series, by settlePhase.
	phases [phaseCount]prometheus.Observer
	// stages are orders_settlement_owned_stage_seconds' series, by
	// ownedStage.
	stages [stageCount]prometheus.Observer
}

// ownedStage is a part of an order's way through its owner's pipeline
// (settle_owned_pipeline.go), from its admission to its answer: each
// order's, observed when its batch is answered.
type ownedStage int

const (
	// stageAdmitted runs from the order's creation at the gateway (its
	// clock) to its joining the owner's queue: the admission, the wait on
	// the instrument's queue in Redis, the claim.
	stageAdmitted ownedStage = iota
	// stageQueued runs until the driver takes it into a batch.
	stageQueued
	// stageDecided runs until its batch is decided (read and decided; a
	// write landed first when the batch had to wait for it).
	stageDecided
	// stageHeld runs until its batch's write starts: the write before it
	// in flight.
	stageHeld
	// stageWritten runs until its batch committed (a connection, the one
	// round trip, the commit).
	stageWritten
	// stageAnswered runs until the driver answers it.
	stageAnswered
	stageCount
)

var ownedStageNames = [stageCount]string{"admitted", "queued", "decided", "held", "written", "answered"}

// settlePhase is a part of a batch's cycle (settleTogether), as
// orders_settlement_phase_seconds names it.
type settlePhase int

const (
	// phaseAcquire waits for one of the settler's connections and takes it
	// from the pool.
	phaseAcquire settlePhase = iota
	// phaseRead is the first round trip (begin, the instruments' locks, the
	// rows that exist, the books, the takers' balances), and the one that
	// opens a new account's balance rows.
	phaseRead
	// phaseDecide decides the batch in memory, with whatever more of a book
	// it reads on the way.
	phaseDecide
	// phaseWrite is the last round trip: the balance locks, the guard, the
	// writes and the commit (or the commit alone when nothing is written).
	phaseWrite
	// phaseRedecide is, after the guard found a balance moved, the rollback
	// to the savepoint, the locks, the second decision, and its writes and
	// commit.
	phaseRedecide
	phaseCount
)

var settlePhaseNames = [phaseCount]string{"acquire", "read", "decide", "write", "redecide"}

// NewSettlementMetrics registers settlement's series: orders_settlement_total
// by outcome (the status the order took: open, partially_filled, filled,
// canceled with its cancel reason, rejected with its reject reason; or
// duplicate) and
// orders_settlement_seconds for an order's settlement, and
// orders_settlement_batch_orders for the orders one transaction took, and
// orders_settlement_redecided_total for the batches decided again because a
// balance moved between their read and their lock, and
// orders_settlement_phase_seconds for the parts of a batch's cycle (phase
// acquire, read, decide, write, redecide; see settleTogether).
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
	phases := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "orders_settlement_phase_seconds",
		Help: "Time of each part of a settlement batch's cycle: acquire (a connection), read (the first round trip: instrument locks, existing rows, books, balances), decide (in memory, with any further book read), write (the balance locks, guard, writes and commit), redecide (after the guard found a balance moved).",
		// 20 µs to 10 s (a batch's timeout, settleTimeout), 38 buckets:
		// each about √2 wider than the one before.
		Buckets: prometheus.ExponentialBucketsRange(0.00002, settleTimeout.Seconds(), 38),
	}, []string{"phase"})
	for phase, name := range settlePhaseNames {
		m.phases[phase] = phases.WithLabelValues(name)
	}
	stages := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "orders_settlement_owned_stage_seconds",
		Help:    "Time of each stage of an order settled by its instrument's owner: admitted (from its creation at the gateway, by the gateway's clock, to joining the owner's queue: the queue in Redis and the claim), queued (until a batch took it), decided (until the batch was decided), held (until its write started, after the write before it), written (until it committed), answered (until the order had its outcome).",
		Buckets: prometheus.ExponentialBucketsRange(0.00002, settleTimeout.Seconds(), 38),
	}, []string{"stage"})
	for stage, name := range ownedStageNames {
		m.stages[stage] = stages.WithLabelValues(name)
	}
	registerer.MustRegister(m.outcomes, m.duration, m.batch, m.decided, phases, stages)
	return m
}

// now is the start of a batch's cycle: the zero time when nothing is
// measured, which costs no clock read.
func (m *SettlementMetrics) now() time.Time {
	if m == nil {
		return time.Time{}
	}
	return time.Now()
}

// phaseDone observes the phase as having run from since until now, and
// returns now: the next phase's since.
func (m *SettlementMetrics) phaseDone(phase settlePhase, since time.Time) time.Time {
	if m == nil {
		return since
	}
	now := time.Now()
	m.phases[phase].Observe(now.Sub(since).Seconds())
	return now
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

// observeStages observes the stages of each order of a batch answered
// now: writing and committed are the batch's (zero: nothing was written).
func (m *SettlementMetrics) observeStages(batch []*settleRequest, writing, committed time.Time) {
	if m == nil {
		return
	}
	now := time.Now()
	for _, req := range batch {
		if req.joined.IsZero() {
			continue
		}
		decided, writing, committed := req.decided, writing, committed
		if writing.IsZero() {
			writing, committed = decided, decided
		}
		if !req.order.CreatedAt.IsZero() {
			m.stages[stageAdmitted].Observe(max(req.joined.Sub(req.order.CreatedAt), 0).Seconds())
		}
		m.stages[stageQueued].Observe(req.taken.Sub(req.joined).Seconds())
		m.stages[stageDecided].Observe(decided.Sub(req.taken).Seconds())
		m.stages[stageHeld].Observe(writing.Sub(decided).Seconds())
		m.stages[stageWritten].Observe(committed.Sub(writing).Seconds())
		m.stages[stageAnswered].Observe(now.Sub(committed).Seconds())
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

//go:embed sql/*.sql
var sqlFiles embed.FS

// statementKeys are, per file of sql/, the start of its text that
// pg_stat_statements keeps as it is: the leading comment (normalization
// replaces constants, never comments), or the first line of a file
// without one.
var statementKeys = sync.OnceValue(func() map[string]string {
	keys := make(map[string]string)
	entries, _ := fs.ReadDir(sqlFiles, "sql")
	for _, entry := range entries {
		text, err := fs.ReadFile(sqlFiles, path.Join("sql", entry.Name()))
		if err != nil {
			continue
		}
		if key := statementKey(string(text)); key != "" {
			keys[key] = strings.TrimSuffix(entry.Name(), ".sql")
		}
	}
	return keys
})

func statementKey(text string) string {
	text = strings.TrimSpace(text)
	// The line break ends a file that is all comment as its other lines.
	if comment, _ := leadingComment(text + "\n"); comment != "" {
		return strings.TrimSuffix(comment, "\n")
	}
	first, _, _ := strings.Cut(text, "\n")
	return first
}

// StatementFile names the file of postgres/sql (without .sql) that a
// statement's text came from, as pg_stat_statements shows it, or "" when
// it came from none: the bench's profile names statements by it. A text
// cut short inside the comment (pg_stat_activity keeps the first
// track_activity_query_size bytes) is named when at least
// truncatedStatement bytes are left and one file's comment starts so.
func StatementFile(query string) string {
	query = strings.TrimSpace(query)
	name, longest := "", 0
	var truncated []string
	for key, file := range statementKeys() {
		if len(key) > longest && strings.HasPrefix(query, key) {
			name, longest = file, len(key)
		}
		if len(query) >= truncatedStatement && strings.HasPrefix(key, query) {
			truncated = append(truncated, file)
		}
	}
	if name == "" && len(truncated) == 1 {
		return truncated[0]
	}
	return name
}

// truncatedStatement is the least of a statement's text cut short that
// StatementFile names.
const truncatedStatement = 256
