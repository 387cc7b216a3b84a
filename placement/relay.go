package placement

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// KindBalanceCoherence is the job kind of a balance change on the balances
// coherence queues, CoherenceQueues(BalancesTable).
const KindBalanceCoherence = "coherence.balance"

// CoherenceShards is how many queues a job-mode table's changes are spread
// over, by a hash of each job's payload (CoherenceJobQueue): each is a
// Redis Cluster slot of its own, so one slot does not carry every balance
// change of every trade.
const CoherenceShards = 16

// CoherenceQueues are the names of a job-mode table's coherence queues:
// its shards, coherence.Queue(table) + ".<n>" in shard order, then its
// remote queue (CoherenceRemoteQueue).
func CoherenceQueues(table string) []string {
	names := make([]string, CoherenceShards, CoherenceShards+1)
	for i := range names {
		names[i] = coherence.Queue(table) + "." + strconv.Itoa(i)
	}
	return append(names, CoherenceRemoteQueue(table))
}

// CoherenceRemoteQueue is the coherence queue of table that the relays of
// processes working no coherence queue (the gateways, relaying cancels)
// admit onto (WithRemoteCoherence). A worker's own relay admits onto the
// shards, and its claim loops hear of that admission at once (emq's local
// wake), so they poll the shards seldom; a job admitted by another process
// would wait for such a poll, so those go here, where the workers wait on
// the queue's wake token (emq.WorkerOptions.WakeOnAdmission) and claim it
// at once. One queue: it carries the gateways' few jobs, not every change.
func CoherenceRemoteQueue(table string) string { return coherence.Queue(table) + ".remote" }

// CoherenceJobQueue is the name of the coherence queue of table that
// carries a job of payload (CoherenceJobs): the shard is a hash of the
// payload, so the same entries carried again go to the same queue and hit
// its dedup, and jobs spread over the shards even when one account (a
// market maker) is in every write.
func CoherenceJobQueue(table, payload string) string {
	return coherence.Queue(table) + "." + strconv.Itoa(coherenceShard(payload))
}

// coherenceShard is the shard of a coherence job's payload.
func coherenceShard(payload string) int { return shardOf(payload, CoherenceShards) }

const (
	// DefaultSweepAge is how old an unrelayed outbox row must be before the
	// sweep takes it: younger ones are most likely on their way through
	// Relay right after their commit, and relaying them twice is harmless
	// but wasted.
	DefaultSweepAge = 5 * time.Second
	// sweepBatch bounds the rows one sweep transaction locks and relays.
	sweepBatch = 500
	// relayTimeout bounds one relay: a hung Redis must not hold a settling
	// worker, and what is left unrelayed the sweep takes.
	relayTimeout = 5 * time.Second
	// coherenceTimeout bounds one batch of coherence jobs for the same
	// reason: their contexts end only when their leases are lost.
	coherenceTimeout = 10 * time.Second
	// mostUnmarked bounds the carried rows waiting to be marked (PostgreSQL
	// down, say); past it rows are not kept, and the sweep carries them
	// again: harmless, the fill being conditional on the version, and a
	// dedup hit for a row the relay carried alone (the sweep makes a job a
	// row).
	mostUnmarked = 50_000
)

// CoherenceDedupRetention is the dedup retention of every job-mode coherence
// queue: how long a job's key, its sorted name@version entries, refuses a
// second job carrying the same entries (10 to 16 minutes in Redis; see
// emq.WithDedupRetention).
//
// The key only has to outlive the second carry of a row carried once. A
// settlement relays its rows right after its commit, once (a redelivered,
// settled order relays nothing); what carries a row again is the sweep,
// taking rows carried but not marked relayed once they are older than
// DefaultSweepAge. Marking rides the next sweep's transaction, every
// second (settlement's sweepInterval), and a marking that fails (its sweep
// failed) gives up after at most relayTimeout, so the sweep carries such a
// row again within 5 + 1 + 5 = 11 s of the first; 5 + 1 + 15 = 21 s when
// the marks rode a sweep that stopped and was ended at postgres.SweepHold.
// While PostgreSQL is down nothing is marked and nothing swept, and the
// sweep carries the rows marking lost when it is back: as late as the
// outage is long. Orders outlive an outage of up to 8.9 minutes
// (settlement.DefaultConfig: 60 attempts backing off 100 ms to 10 s, the
// whole backoffs), so ten minutes covers the ordinary case fifty times over
// and an outage as long as settlement's retries survive. Past it a second
// carry admits a second job, which changes nothing: the consumer acts only
// on a version newer than the one cached.
//
// Under the default of a day, every balance change's key stayed a day or
// more: after make run's 150,000 orders, 42 MB, more than twice the orders'
// own dedup.
const CoherenceDedupRetention = 10 * time.Minute

// ErrOutboxPayload: a coherence message is not "<name>@<version>" of a
// known table. The job mode skips such an entry of a job and applies the
// rest; it buries a job with no entry it can read: no retry can fix it.
var ErrOutboxPayload = errors.New("orders: malformed coherence payload")

// errCarryOverran is a sweep's carry that had not returned when the sweep
// stopped waiting for it (five sixths of postgres.SweepHold, or 2 s after
// a shutdown began if that is sooner).
var errCarryOverran = errors.New("placement: the sweep's carry overran its wait; its rows are carried again")

// OutboxRelay carries outbox rows by the coherence mode their table
// declares, and marks them relayed. It is the Relayer settlement hands its
// committed entries to, and its sweep relays what a crash left behind.
type OutboxRelay struct {
	db       Outbox
	client   *emq.Client
	caches   *coherence.Client
	modes    coherence.Modes
	logger   *slog.Logger
	sweepAge time.Duration
	// eventsLogs are the queues whose logs take accounts' events.
	eventsLogs *EventLogs
	// coherenceJobSize is the most balance changes one coherence job lists.
	coherenceJobSize int
	// remote puts every coherence job on the table's remote queue
	// (WithRemoteCoherence).
	remote bool

	mu sync.Mutex
	// markers counts the KeepSweeping loops running; while there is one,
	// Relay leaves marking to it.
	markers int
	// unmarked are rows carried and not yet marked relayed.
	unmarked []orders.OutboxEntry
	// dropped counts rows refused marking since the last warning.
	dropped int
	// lines send RelayInTurn's appends in turn, one per instrument
	// (relay_line.go).
	lines map[string]*appendLine
}

// Outbox is the outbox the relay carries rows of (postgres.Outbox).
type Outbox interface {
	// MarkRelayed marks the rows of entries relayed.
	MarkRelayed(ctx context.Context, entries []orders.OutboxEntry) error
	// SweepBatch marks the rows of marks relayed, then takes up to limit
	// unrelayed rows older than age, hands them to carry and marks the
	// ones it returns, in one transaction; it returns how many it took and
	// how many of those it marked. A carry that overran the sweep's wait
	// for it (five sixths of postgres.SweepHold) may return after
	// SweepBatch did, and none of its rows is marked.
	SweepBatch(ctx context.Context, age time.Duration, limit int, marks []orders.OutboxEntry,
		carry func(context.Context, []orders.OutboxEntry) []orders.OutboxEntry) (taken, marked int, err error)
	// EventRows returns the events rows of the source name with versions
	// between after and before (both excluded), oldest first.
	EventRows(ctx context.Context, name string, after, before int64) ([]orders.OutboxEntry, error)
	// RenderEvents turns an events row into its account's events.
	RenderEvents(entry orders.OutboxEntry) ([]orders.EventDraft, error)
}

// RelayOption configures a OutboxRelay.
type RelayOption func(*OutboxRelay)

// WithEventsLogs are the queues whose logs take the accounts' events
// (NewEventLogs of the relay's client otherwise): the ones the gateways'
// event streams read.
func WithEventsLogs(logs *EventLogs) RelayOption {
	return func(r *OutboxRelay) { r.eventsLogs = logs }
}

// WithCoherenceJobSize sets the most balance changes one coherence job
// lists, 1 to CoherenceBatch (CoherenceBatch otherwise). 1 writes the form
// of one change a job that workers of releases before lists read: set it
// while such workers still run (COHERENCE_JOB_SIZE=1), since they would
// bury a list as one malformed name.
func WithCoherenceJobSize(size int) RelayOption {
	return func(r *OutboxRelay) { r.coherenceJobSize = min(max(size, 1), CoherenceBatch) }
}

// WithRemoteCoherence has the relay admit its coherence jobs onto the
// remote queue (CoherenceRemoteQueue) rather than the shards: for a process
// that works no coherence queue (a gateway), whose admissions no claim loop
// hears of. Workers that work the remote queue must run before such a
// relay does (an earlier release's workers do not work it).
func WithRemoteCoherence() RelayOption {
	return func(r *OutboxRelay) { r.remote = true }
}

// WithSweepAge sets how old an unrelayed row must be before Sweep takes it
// (DefaultSweepAge otherwise); zero takes every unrelayed row.
func WithSweepAge(age time.Duration) RelayOption {
	return func(r *OutboxRelay) { r.sweepAge = max(age, 0) }
}

// NewOutboxRelay relays rows of db onto client's Redis by modes
// (CoherenceModes in production). Invalid modes are a programming error and
// panic.
func NewOutboxRelay(db Outbox, client *emq.Client, modes coherence.Modes, logger *slog.Logger, opts ...RelayOption) *OutboxRelay {
	if err := modes.Validate(); err != nil {
		panic(err)
	}
	if logger == nil {
		logger = slog.Default()
	}
	r := &OutboxRelay{db: db, client: client, caches: coherence.New(client.Redis(), coherence.WithLogger(logger)),
		modes: modes, logger: logger, sweepAge: DefaultSweepAge, eventsLogs: NewEventLogs(client), coherenceJobSize: CoherenceBatch}
	for _, opt := range opts {
		opt(r)
	}
	return r
}

// coherenceKind is the job kind of a table's changes on its coherence queue.
func coherenceKind(table string) string {
	if table == BalancesTable {
		return KindBalanceCoherence
	}
	return "coherence." + table
}

// Declare registers the job kind of every job-mode table on its coherence
// queue, with the queue's dedup retention (CoherenceDedupRetention); call
// once at start, from every process that relays.
func (r *OutboxRelay) Declare(ctx context.Context) error {
	for table, mode := range r.modes {
		if mode != coherence.ModeJob {
			continue
		}
		for _, name := range CoherenceQueues(table) {
			queue := r.client.Queue(name, emq.WithDedupRetention(CoherenceDedupRetention))
			if err := queue.Declare(ctx, coherenceKind(table)); err != nil {
				return fmt.Errorf("%w: declare coherence queue of %s: %w", orders.ErrUnavailable, table, err)
			}
		}
	}
	return nil
}

// Relay carries entries by their modes and marks the carried ones relayed.
// Nothing is returned: the entries are committed already, so a failure only
// delays them until the sweep, and is logged.
//
// While KeepSweeping runs, the marking is left to it: its next sweep marks
// every row carried since the last in its own transaction, one statement,
// instead of a transaction per settlement. A row carried but not marked
// (the process died first) is carried again by the sweep, a job a row:
// the relay's job again, a dedup hit, when the relay carried that row
// alone (a settlement write's), and otherwise one more read and fill per
// name, which the conditional fill makes harmless. The deferral risks
// nothing but that.
func (r *OutboxRelay) Relay(ctx context.Context, entries []orders.OutboxEntry) {
	if len(entries) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayTimeout)
	defer cancel()
	carried, err := r.carry(ctx, entries, false)
	r.relayed(ctx, entries, carried, err)
}

// relayed marks the rows a relay of entries carried, or leaves them to the
// KeepSweeping loop, and logs its failure.
func (r *OutboxRelay) relayed(ctx context.Context, entries, carried []orders.OutboxEntry, err error) {
	if err != nil {
		r.logger.Warn("outbox relay failed; the sweep relays the rows left", "entries", len(entries), "carried", len(carried), "err", err)
	}
	if r.deferMarking(carried) {
		return
	}
	if err := r.db.MarkRelayed(ctx, carried); err != nil {
		// Carried but not marked: the sweep carries them again, a job
		// a row (a dedup hit for a row carried alone); harmless.
		r.logger.Warn("outbox rows carried but not marked relayed", "entries", len(carried), "err", err)
	}
}

// deferMarking hands carried rows to the running KeepSweeping loop, and
// reports false when none runs.
func (r *OutboxRelay) deferMarking(carried []orders.OutboxEntry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.markers == 0 {
		return false
	}
	if len(r.unmarked)+len(carried) > mostUnmarked {
		r.dropped += len(carried)
		return true
	}
	r.unmarked = append(r.unmarked, carried...)
	return true
}

// takeUnmarked takes the rows carried and not yet marked, for a marking.
func (r *OutboxRelay) takeUnmarked() []orders.OutboxEntry {
	r.mu.Lock()
	carried, dropped := r.unmarked, r.dropped
	r.unmarked, r.dropped = nil, 0
	r.mu.Unlock()
	if dropped > 0 {
		r.logger.Warn("outbox rows carried while marking lagged are left to the sweep", "entries", dropped)
	}
	return carried
}

// markCarried marks the rows carried since the last marking, in one
// statement of its own: what a stopping KeepSweeping leaves.
func (r *OutboxRelay) markCarried(ctx context.Context) {
	carried := r.takeUnmarked()
	if len(carried) == 0 {
		return
	}
	// Rows taken are marked now or left to the sweep, so a loop told to
	// stop lets the statement finish.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), relayTimeout)
	defer cancel()
	if err := r.db.MarkRelayed(ctx, carried); err != nil {
		r.logger.Warn("outbox rows carried but not marked relayed; the sweep carries them again", "entries", len(carried), "err", err)
	}
}

// Sweep relays unrelayed rows older than the sweep age, oldest first, in
// batches, and returns how many it relayed. Each batch is one transaction
// whose rows are locked with SKIP LOCKED, so sweepers in several workers
// share the backlog instead of relaying it twice. The first also marks the
// rows Relay carried since the last sweep and left to it (KeepSweeping),
// before it looks for rows left behind, so it does not take those.
func (r *OutboxRelay) Sweep(ctx context.Context) (int, error) {
	total := 0
	marks := r.takeUnmarked()
	for {
		relayed, full, err := r.sweepBatch(ctx, marks)
		if err != nil && len(marks) > 0 {
			// Carried but not marked: the sweep carries them again once
			// they are old enough, a dedup hit for a row carried alone.
			r.logger.Warn("outbox rows carried but not marked relayed; the sweep carries them again", "entries", len(marks), "err", err)
		}
		marks = nil
		total += relayed
		if err != nil || !full {
			return total, err
		}
	}
}

func (r *OutboxRelay) sweepBatch(ctx context.Context, marks []orders.OutboxEntry) (relayed int, full bool, err error) {
	// The carry reports on a channel: one that overran the sweep's wait
	// may return after SweepBatch did, and what it carried was not marked.
	type report struct {
		carried int
		err     error
	}
	reports := make(chan report, 1)
	taken, relayed, err := r.db.SweepBatch(ctx, r.sweepAge, sweepBatch, marks,
		func(ctx context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
			// A job per row: a row the relay carried alone (a write's)
			// but did not mark makes the relay's job again, a dedup hit.
			carried, err := r.carry(ctx, entries, true)
			reports <- report{len(carried), err}
			return carried
		})
	if err != nil {
		return 0, false, err
	}
	full = taken == sweepBatch
	var carryErr error
	select {
	case got := <-reports:
		carryErr = got.err
		if got.carried != relayed || got.err == nil && relayed < taken {
			carryErr = errors.Join(errCarryOverran, carryErr)
		}
	default:
		if taken > 0 {
			carryErr = errCarryOverran
		}
	}
	if carryErr != nil {
		// Keep what was carried and marked; the rest waits for the next sweep.
		r.logger.Warn("outbox sweep could not relay every row", "rows", taken, "relayed", relayed, "err", carryErr)
		full = false
	}
	return relayed, full, nil
}

// KeepSweeping sweeps at once (a restarted worker relays what its previous
// life left) and then every interval until ctx is cancelled. Meanwhile it
// marks the rows Relay carried, in each sweep's transaction (Sweep), and
// once more on its way out: marking costs PostgreSQL no transaction of its
// own (docs/performance.md, "The queue's loops"). The interval must stay
// well under the sweep age, so the sweep does not take the rows carried
// since the last one for rows left behind (settlement's is 1 s, the age
// 5 s); a row it does take again is a dedup hit.
func (r *OutboxRelay) KeepSweeping(ctx context.Context, interval time.Duration) {
	r.mu.Lock()
	r.markers++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.markers--
		r.mu.Unlock()
		// Relay marks on its own from here; what it left is marked now.
		r.markCarried(ctx)
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		relayed, err := r.Sweep(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			r.logger.Warn("outbox sweep failed; trying again next interval", "err", err, "relayed", relayed)
		case relayed > 0:
			r.logger.Info("outbox sweep relayed rows left behind", "relayed", relayed)
		}
		timer.Reset(interval)
	}
}

// carry sends each entry by its table's mode and returns the entries that
// went: job-mode entries admitted (or refused as duplicates, which means an
// earlier relay admitted them), broadcast entries published, and entries of a
// table of mode none, which have nowhere to go. byRow makes the coherence
// jobs of each entry apart (carryCoherence).
func (r *OutboxRelay) carry(ctx context.Context, entries []orders.OutboxEntry, byRow bool) ([]orders.OutboxEntry, error) {
	events, others := splitEvents(entries)
	// The accounts' events go beside the coherence jobs, not after them:
	// a trader's order events need not wait for the balance cache's
	// round trips, which the consumer applies later anyway.
	var appended []orders.OutboxEntry
	var appendErr error
	var appending sync.WaitGroup
	if len(events) > 0 {
		appending.Go(func() { appended, appendErr = r.appendEvents(ctx, events) })
	}
	carried, err := r.carryCoherence(ctx, others, byRow)
	appending.Wait()
	return append(carried, appended...), errors.Join(err, appendErr)
}

// splitEvents sorts entries into the accounts' events rows and the rest.
func splitEvents(entries []orders.OutboxEntry) (events, others []orders.OutboxEntry) {
	for _, entry := range entries {
		if table, _ := outboxTableAndGroup(entry.Name); table == orders.EventsTable {
			events = append(events, entry)
		} else {
			others = append(others, entry)
		}
	}
	return events, others
}

// carryCoherence is carry of entries that are no events rows. A
// settlement write's row, which lists the balances it moved, goes as one
// entry per balance (orders.BalanceEntries), each as its own row would,
// and is carried only once every one of them went: a row partly carried
// stays unrelayed, and the sweep carries it whole again (the lines that
// went are then dedup hits, or a fill that changes nothing).
//
// A table's entries make one job (per CoherenceBatch names), or, byRow,
// one per entry (row) they come from: the sweep's form, which takes rows
// by age, so that a row a relay carried alone (a settlement write's) makes
// the same job again.
func (r *OutboxRelay) carryCoherence(ctx context.Context, entries []orders.OutboxEntry, byRow bool) ([]orders.OutboxEntry, error) {
	var (
		flat []orders.OutboxEntry
		// of is the entry each of flat comes from; left counts, per
		// entry, its flat entries not carried yet.
		of   = make([]int, 0, len(entries))
		left = make([]int, len(entries))
	)
	for i, entry := range entries {
		balances := orders.BalanceEntries(entry)
		flat = append(flat, balances...)
		for range balances {
			of = append(of, i)
		}
		left[i] = len(balances)
	}
	rows := of
	if !byRow {
		rows = make([]int, len(flat))
	}
	went, err := r.carryEach(ctx, flat, rows)
	for _, k := range went {
		left[of[k]]--
	}
	carried := make([]orders.OutboxEntry, 0, len(entries))
	for i, entry := range entries {
		if left[i] == 0 {
			carried = append(carried, entry)
		}
	}
	return carried, err
}

// carryEach sends each entry by its table's mode and returns the positions
// of those that went (carry); the job-mode entries of one rows[k] share
// their jobs.
func (r *OutboxRelay) carryEach(ctx context.Context, entries []orders.OutboxEntry, rows []int) ([]int, error) {
	went := make([]int, 0, len(entries))
	jobs := map[string][]int{}
	var errs []error
	for i, entry := range entries {
		table, _ := outboxTableAndGroup(entry.Name)
		switch r.modes.Of(table) {
		case coherence.ModeJob:
			jobs[table] = append(jobs[table], i)
		case coherence.ModeBroadcast:
			if err := r.caches.Broadcast(ctx, table, entry.Payload); err != nil {
				errs = append(errs, err)
				continue
			}
			went = append(went, i)
		case coherence.ModeTracking:
			// The item's stamp: Redis invalidates every local copy of it.
			_, item := outboxTableAndGroup(entry.Name)
			if err := r.caches.Touch(ctx, table, item); err != nil {
				errs = append(errs, err)
				continue
			}
			went = append(went, i)
		default:
			if _, declared := r.modes[table]; !declared {
				r.logger.Warn("outbox entry of a table that declares no coherence mode; marked relayed", "name", entry.Name)
			}
			went = append(went, i)
		}
	}
	for table, positions := range jobs {
		admitted, err := r.admit(ctx, table, entries, positions, rows)
		went = append(went, admitted...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return went, errors.Join(errs...)
}

// admit puts the entries at positions, all of table, on the table's
// coherence queues: the entries of each rows[k] in one job (or one per
// CoherenceBatch names, CoherenceJobs), each job on the shard of its
// payload, a round trip per shard, the shards at once. It returns the
// positions of the entries of the jobs admitted or refused as duplicates.
// A job is one admission: its entries go, or stay for the sweep, together.
//
// A relayed settlement write is one job, one admission, on one shard,
// where a job per shard its accounts were on took a round trip each (2.75
// a write at 300 orders/s) and a claim and a completion each.
func (r *OutboxRelay) admit(ctx context.Context, table string, entries []orders.OutboxEntry, positions, rows []int) ([]int, error) {
	byRow := map[int][]int{}
	var order []int
	for _, k := range positions {
		if _, seen := byRow[rows[k]]; !seen {
			order = append(order, rows[k])
		}
		byRow[rows[k]] = append(byRow[rows[k]], k)
	}
	type queued struct {
		jobs    []emq.Job
		carries [][]int // positions in entries
	}
	byQueue := map[string]*queued{}
	for _, row := range order {
		group := byRow[row]
		carrying := make([]orders.OutboxEntry, len(group))
		for i, k := range group {
			carrying[i] = entries[k]
		}
		jobs, carries := coherenceJobs(carrying, r.coherenceJobSize)
		for i, job := range jobs {
			name := CoherenceJobQueue(table, string(job.Payload))
			if r.remote {
				name = CoherenceRemoteQueue(table)
			}
			q := byQueue[name]
			if q == nil {
				q = &queued{}
				byQueue[name] = q
			}
			positions := make([]int, len(carries[i]))
			for j, c := range carries[i] {
				positions[j] = group[c]
			}
			q.jobs = append(q.jobs, job)
			q.carries = append(q.carries, positions)
		}
	}
	var (
		mu       sync.Mutex
		admitted = make([]int, 0, len(positions))
		failed   []error
	)
	var admitting sync.WaitGroup
	for name, q := range byQueue {
		admitting.Go(func() {
			_, errs := r.client.Queue(name).AdmitMany(ctx, q.jobs)
			mu.Lock()
			defer mu.Unlock()
			for i, err := range errs {
				if err != nil {
					failed = append(failed, fmt.Errorf("relay %d entries on %s: %w", len(q.carries[i]), name, err))
					continue
				}
				admitted = append(admitted, q.carries[i]...)
			}
		})
	}
	admitting.Wait()
	return admitted, errors.Join(failed...)
}

// CoherenceJobs are the jobs that carry entries of one table onto its
// coherence queues: one job for all of them, or one per CoherenceBatch
// names when there are more, so a job fits one batch of the consumer and a
// retry redoes no more than that; each goes on the shard of its payload
// (CoherenceJobQueue). carries[i] are the entries jobs[i] carries.
//
// A job's payload lists its entries, "<name>@<version>" a line, sorted,
// each name once at its highest version: applying that one leaves the cache
// at or past the lower ones. One entry is the form every job had before
// (and the bench's CoherenceJob still admits); the consumer reads both. A
// worker of a release before the consumer read lists would bury a job of
// several entries as one malformed name, so while such workers run the
// relays write one entry a job (WithCoherenceJobSize(1)).
//
// Delivery stays at least once: the rows are marked relayed only once their
// job is admitted, and the job completes only once the consumer applied
// every entry. The dedup key is the payload, which emq keeps only as a
// digest (a SHA-256 prefix, whatever the payload's length): the same
// entries relayed again make the same payload, on the same shard (a hash of
// the payload), and are admitted once. The sweep makes a job a row, so a
// row a relay carried alone (a settlement write's) is a dedup hit; rows a
// relay carried together (deposits, say) go again as a job each, which
// costs one more read and fill, and changes nothing: the fill is
// conditional on the version, and the balance event goes once per version.
//
// Its lane is its shard, not an account: a job carries many accounts'
// changes, so no account lane is its own, and every job on a shard's queue
// is the same work (one read and one fill per name, bounded by
// CoherenceBatch), for balances no tenant can flood; first in, first out is
// as fair as rotation here, and one lane per shard keeps the queue from
// holding a lane per account.
func CoherenceJobs(entries []orders.OutboxEntry) (jobs []emq.Job, carries [][]orders.OutboxEntry) {
	jobs, positions := coherenceJobs(entries, CoherenceBatch)
	carries = make([][]orders.OutboxEntry, len(positions))
	for i, job := range positions {
		for _, k := range job {
			carries[i] = append(carries[i], entries[k])
		}
	}
	return jobs, carries
}

// coherenceJobs is CoherenceJobs with at most size names a job; carries[i]
// are the positions in entries of those jobs[i] carries.
func coherenceJobs(entries []orders.OutboxEntry, size int) (jobs []emq.Job, carries [][]int) {
	if len(entries) == 0 {
		return nil, nil
	}
	// Each payload's version is read once, not at every comparison.
	type versioned struct {
		position int
		version  int64
	}
	byName := make([]versioned, len(entries))
	for i, entry := range entries {
		byName[i] = versioned{i, payloadVersion(entry)}
	}
	slices.SortFunc(byName, func(a, b versioned) int {
		return cmp.Or(strings.Compare(entries[a.position].Name, entries[b.position].Name), cmp.Compare(a.version, b.version))
	})
	table, _ := outboxTableAndGroup(entries[byName[0].position].Name)
	var payload strings.Builder
	var carried []int
	names := 0
	flush := func() {
		jobs = append(jobs, emq.Job{
			ID:       "JOB_" + ulid.Make().String(),
			Kind:     coherenceKind(table),
			Group:    "shard." + strconv.Itoa(coherenceShard(payload.String())),
			Payload:  []byte(payload.String()),
			DedupKey: payload.String(),
		})
		carries = append(carries, carried)
		payload.Reset()
		carried, names = nil, 0
	}
	for i, v := range byName {
		entry := entries[v.position]
		carried = append(carried, v.position)
		// The highest version of a name is the last of its run.
		if i+1 < len(byName) && entries[byName[i+1].position].Name == entry.Name {
			continue
		}
		if names > 0 {
			payload.WriteByte('\n')
		}
		payload.WriteString(entry.Payload)
		if names++; names == size {
			flush()
		}
	}
	if names > 0 {
		flush()
	}
	return jobs, carries
}

// payloadVersion is the version an entry's payload announces (0 for a
// malformed one, which the consumer refuses anyway); it orders a name's
// entries even when Version was not read with them.
func payloadVersion(entry orders.OutboxEntry) int64 {
	balance, err := parseOutboxPayload(entry.Payload)
	if err != nil {
		return 0
	}
	return balance.Version
}

// CoherenceJob is the job that carries one entry onto its table's coherence
// queue (CoherenceJobQueue of its payload), under a new JOB id: exactly
// what the relay admits for one entry to carry, for callers that admit such
// jobs themselves (the bench). Its payload and dedup key are the entry's
// name@version.
func CoherenceJob(entry orders.OutboxEntry) emq.Job {
	jobs, _ := CoherenceJobs([]orders.OutboxEntry{entry})
	return jobs[0]
}

// outboxTableAndGroup splits an outbox name, "<table>:<id>[:...]", into its
// table and its id (for balances the account).
func outboxTableAndGroup(name string) (table, group string) {
	table, rest, found := strings.Cut(name, ":")
	if !found || rest == "" {
		return name, name
	}
	group, _, _ = strings.Cut(rest, ":")
	return table, group
}

// parseOutboxPayload reads "<name>@<version>", and a settlement write's
// balance line, which carries the balance's amounts after it, by its head
// (orders.ParseBalanceLine).
func parseOutboxPayload(payload string) (orders.BalanceLine, error) {
	balance, ok := orders.ParseBalanceLine(payload)
	if !ok {
		return orders.BalanceLine{}, fmt.Errorf("%w: %q has no name@version with a positive version", ErrOutboxPayload, payload)
	}
	return balance, nil
}

// parseBalanceName reads "balances:<account>:<asset>", BalanceName's form.
func parseBalanceName(name string) (account, asset string, ok bool) {
	rest, found := strings.CutPrefix(name, BalancesTable+":")
	if !found {
		return "", "", false
	}
	account, asset, found = strings.Cut(rest, ":")
	if !found || account == "" || asset == "" || strings.Contains(asset, ":") {
		return "", "", false
	}
	return account, asset, true
}
