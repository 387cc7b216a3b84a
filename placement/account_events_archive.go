package placement

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/collectors"
	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/orders"
)

// Redis holds only the hot tail of each account's events; their history is
// in PostgreSQL (docs/api.md, The event stream). Every worker runs an
// EventArchiver, and any number may run at once: it takes its share of the
// announcements of the orders queue's change stream (the share "archive":
// each append is announced to one archiver), waits until an account's new
// events are a chunk's worth or the account's share of ArchiveDelay old
// (half of it to all of it), reads them from the account's log past its
// archived position, writes them to the history as one chunk per account
// (EventArchive.ArchiveEvents, which writes no event twice and answers how
// far the history goes), and then marks the log
// archived that far, which trims it to its hot tail
// (emq.Queue.MarkLogsArchived). A crash between the write and the mark
// loses nothing: the next pass reads the same events, the history refuses
// them and answers its end, and the mark catches up. The log never drops
// an event the history does not hold, so a stream finds every event in one
// or the other (account_events_stream.go).
//
// An account's appends are announced to all of its shard's archivers in
// turn, so each finds it due at about the same moment; before reading an
// account's log an archiver claims it for a few seconds
// (emq.Queue.ClaimLogs, renewed as it archives the account again), and
// the others leave it to the holder. The claim only saves work: the
// history still refuses what it holds, so an expired claim costs a
// wasted offer, never a duplicate.
//
// Announcements are taken at most once, and the change stream keeps only
// its newest; so once a minute, and at start, the archiver compares every
// log's last sequence with its archived one (emq.Queue.ScanLogPositions),
// a page per pass. Logs that no longer grow are trimmed as their hot tail
// ages (emq.Queue.LogsDue). KeepPruning deletes the history older than its
// retention, in batches.

// The defaults of EventArchiver.
const (
	// DefaultEventsRetention is how long the history keeps events
	// (EVENTS_RETENTION).
	DefaultEventsRetention = 7 * 24 * time.Hour
	// DefaultEventArchiveDelay is the longest an account's new events wait
	// in Redis before they are archived, unless they are a chunk's worth:
	// the longer, the fewer and fuller the chunks, and the more Redis holds
	// beyond the hot tail (a delay's worth of events). Each account waits
	// between half of it and all of it (dueAfter).
	DefaultEventArchiveDelay = 30 * time.Second
	// eventChunk is the most events a chunk holds (the history's own limit,
	// postgres.MaxChunkEvents, is higher).
	eventChunk = 256
	// archivePassAccounts is the most accounts one round of a pass
	// archives: one read of their logs, one PostgreSQL transaction, one
	// round of marks. archiveRounds is the most rounds a pass makes, each
	// up to a chunk an account.
	archivePassAccounts = 256
	archiveRounds       = 16
	// archiveShare is the archivers' share of the change stream.
	archiveShare = "archive"
	// archiveWait is the longest an archiver waits for announcements
	// before it looks at what is due.
	archiveWait = time.Second
	// archivePace is the least time between the starts of two passes of
	// Run (ArchiveDelay when shorter): a pass that returns at the first
	// announcement costs a round of Redis reads for a few events, and
	// the shards' archivers in every worker run at once. Waiting gathers
	// the announcements into fewer, fuller passes; the events wait at
	// most this much longer in Redis.
	archivePace = time.Second
	// archiveClaim is how long an archiver's claim of an account lasts
	// unless it archives the account again (emq.Queue.ClaimLogs), and how
	// long another archiver refused the account waits before it tries
	// again: every archiver of a shard hears of a busy account's appends
	// and finds it due at about the same moment, and all but one would
	// read and offer the same events, to wait on the history's lock and
	// be refused.
	archiveClaim = 5 * time.Second
	// archiveTake is the most announcements a pass takes: a pass that
	// takes this many is behind, and the next starts at once.
	archiveTake = 4096
	// archiveReconcileInterval is how often an archiver compares every
	// log's positions; archiveScanPage how many logs it compares a pass.
	archiveReconcileInterval = time.Minute
	archiveScanPage          = 1000
	// trimPage is the most logs one pass trims for their age.
	trimPage = 1000
	// archiveReaderIdle is how long a reader of the share may take nothing
	// before another archiver removes it (its process is gone).
	archiveReaderIdle = time.Hour
	// pruneInterval is how often KeepPruning looks for history past its
	// retention, pruneBatch how many chunks one statement deletes.
	pruneInterval = time.Minute
	pruneBatch    = 1000
)

// EventArchive is where accounts' events are kept once they leave Redis:
// PostgreSQL's history (postgres.EventHistory).
type EventArchive interface {
	// ArchiveEvents writes each account's events (consecutive, oldest
	// first) as one chunk, unless the history holds them already, and
	// returns by account the last sequence it holds after the write.
	ArchiveEvents(ctx context.Context, runs map[string][]orders.Event) (map[string]int64, error)
	// PruneEvents deletes up to batch chunks archived before before, and
	// returns how many.
	PruneEvents(ctx context.Context, before time.Time, batch int) (int64, error)
}

// EventArchiver copies accounts' events from their logs in Redis to the
// history in PostgreSQL and trims the logs to their hot tail.
type EventArchiver struct {
	queue     *emq.Queue
	archive   EventArchive
	logger    *slog.Logger
	hot       emq.LogHotTail
	retention time.Duration
	delay     time.Duration
	metrics   archiveMetrics
	// reader is this archiver's name in the share.
	reader string

	mu sync.Mutex
	// pending holds the accounts whose logs hold events this archiver was
	// told of and has not archived yet.
	pending map[string]*pendingLog
	// taken is how many announcements the last pass took; backlog whether
	// accounts were left due after its last round (archiveRounds).
	taken   int
	backlog bool
	// scan is where the reconcile's scan of the logs' positions is, and
	// scanning whether one is under way; reconciled is when the last began.
	scan       uint64
	scanning   bool
	reconciled time.Time
}

// pendingLog is an account's log as the archiver knows it.
type pendingLog struct {
	// since is when the archiver learned of its oldest event not archived.
	since time.Time
	// wait is how long after since its events are due (dueAfter).
	wait time.Duration
	// last is the last sequence announced; archived the log's archived
	// position as last read, -1 before the first read.
	last, archived int64
	// retry, when set, is when the account may be archived again: another
	// archiver claimed it.
	retry time.Time
}

// EventArchiverOption configures NewEventArchiver.
type EventArchiverOption func(*EventArchiver)

// WithHotTail sets what the logs keep of their archived events
// (emq.DefaultLogHotTail otherwise: EVENTS_HOT_RETENTION, EVENTS_HOT_COUNT).
func WithHotTail(hot emq.LogHotTail) EventArchiverOption {
	return func(a *EventArchiver) { a.hot = hot }
}

// WithEventsRetention sets how long the history keeps events
// (DefaultEventsRetention otherwise).
func WithEventsRetention(retention time.Duration) EventArchiverOption {
	return func(a *EventArchiver) {
		if retention > 0 {
			a.retention = retention
		}
	}
}

// WithArchiveDelay sets the longest new events wait before they are
// archived unless they are a chunk's worth (DefaultEventArchiveDelay
// otherwise); each account waits its own share of it (dueAfter).
func WithArchiveDelay(delay time.Duration) EventArchiverOption {
	return func(a *EventArchiver) {
		if delay >= 0 {
			a.delay = delay
		}
	}
}

// WithArchiveMetrics registers the archiver's series on registerer.
func WithArchiveMetrics(registerer prometheus.Registerer) EventArchiverOption {
	return func(a *EventArchiver) { a.metrics = newArchiveMetrics(registerer, a.queue.Name()) }
}

// NewEventArchiver archives the account logs of the orders queue to
// archive.
func NewEventArchiver(queue *emq.Queue, archive EventArchive, logger *slog.Logger, opts ...EventArchiverOption) *EventArchiver {
	if logger == nil {
		logger = slog.Default()
	}
	a := &EventArchiver{
		queue: queue, archive: archive, logger: logger, hot: emq.DefaultLogHotTail, retention: DefaultEventsRetention,
		delay: DefaultEventArchiveDelay, reader: "archiver-" + ulid.Make().String(), pending: map[string]*pendingLog{},
		scanning: true, reconciled: time.Now(),
	}
	for _, opt := range opts {
		opt(a)
	}
	if a.metrics.events == nil {
		a.metrics = newArchiveMetrics(nil, a.queue.Name())
	}
	return a
}

// Run archives until ctx ends. A failure (Redis or PostgreSQL down) is
// logged now and then and tried again after a pause; what was pending
// stays pending.
func (a *EventArchiver) Run(ctx context.Context) {
	defer a.metrics.forget()
	defer func() {
		// A reader that leaves takes no announcements with it (none are
		// pending); gone, it no longer takes a share of them.
		leave, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = a.queue.LeaveLogChanges(leave, archiveShare, a.reader, archiveReaderIdle)
	}()
	failures := outage.Tracker{Loop: "event archiver"}
	pace := min(archivePace, a.delay)
	wait := archiveWait
	for ctx.Err() == nil {
		start := time.Now()
		if err := a.Pass(ctx, wait); err != nil {
			if ctx.Err() != nil {
				return
			}
			failures.Fail(a.logger, err)
			outage.Sleep(ctx, failures.Backoff(archiveWait))
			continue
		}
		failures.Recover(a.logger)
		a.mu.Lock()
		behind, backlog := a.taken >= archiveTake, a.backlog
		a.mu.Unlock()
		// Accounts left due (a busy account's log outgrowing a pass's
		// rounds) are archived again at once, without waiting for
		// announcements: paced, one account could be archived at most
		// archiveRounds × eventChunk events a pace, and its log, never
		// trimmed past what is archived, would grow in Redis beyond.
		wait = archiveWait
		if backlog {
			wait = -1
		}
		if !behind && !backlog {
			outage.Sleep(ctx, pace-time.Since(start))
		}
	}
}

// Pass is one turn of Run: it takes the announcements that came within
// wait (those already there when wait is negative; a wait under a
// millisecond waits until one comes), compares a page of the logs'
// positions when a reconcile is under way, archives the accounts that
// are due, in up to archiveRounds rounds, and trims the logs whose hot
// tail aged. It notes whether accounts were still due after the last
// round (Run then starts the next pass at once).
func (a *EventArchiver) Pass(ctx context.Context, wait time.Duration) error {
	changes, err := a.queue.TakeLogChanges(ctx, archiveShare, a.reader, wait, archiveTake)
	if err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	a.taken = len(changes)
	for _, change := range changes {
		a.note(change.Group, change.Sequence, -1, now)
	}
	if !a.scanning && now.Sub(a.reconciled) >= archiveReconcileInterval {
		a.scanning, a.reconciled = true, now
	}
	scanning := a.scanning
	a.mu.Unlock()
	if scanning {
		if err := a.reconcile(ctx); err != nil {
			return err
		}
	}
	if err := a.learnPositions(ctx); err != nil {
		return err
	}
	backlog := false
	for round := range archiveRounds + 1 {
		due := a.due(time.Now())
		if len(due) == 0 {
			break
		}
		if round == archiveRounds {
			backlog = true
			break
		}
		if err := a.archiveAccounts(ctx, due); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.backlog = backlog
	a.mu.Unlock()
	if err := a.trimAged(ctx); err != nil {
		return err
	}
	a.report(time.Now())
	return nil
}

// note records that account's log holds events through last, archived
// through archived (-1: unknown), as learned at now; a.mu is held.
func (a *EventArchiver) note(account string, last, archived int64, now time.Time) {
	p := a.pending[account]
	if p == nil {
		p = &pendingLog{since: now, wait: dueAfter(account, a.delay), last: last, archived: archived}
		a.pending[account] = p
		return
	}
	p.last = max(p.last, last)
	p.archived = max(p.archived, archived)
}

// reconcile compares a page of the logs' positions, and notes the logs
// that hold events not archived.
func (a *EventArchiver) reconcile(ctx context.Context) error {
	a.mu.Lock()
	cursor := a.scan
	a.mu.Unlock()
	positions, next, err := a.queue.ScanLogPositions(ctx, cursor, archiveScanPage)
	if err != nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	for _, position := range positions {
		if position.Last > position.Archived {
			a.note(position.Group, position.Last, position.Archived, now)
		}
	}
	a.scan = next
	a.scanning = next != 0
	a.mu.Unlock()
	if next == 0 {
		// Readers whose processes are gone are removed now and then.
		if err := a.queue.LeaveLogChanges(ctx, archiveShare, "", archiveReaderIdle); err != nil {
			a.logger.Warn("event archiver: removing idle readers of the change stream failed", "err", err)
		}
	}
	return nil
}

// learnPositions reads the archived positions of the pending logs not read
// yet, so their backlog is known before they are due.
func (a *EventArchiver) learnPositions(ctx context.Context) error {
	a.mu.Lock()
	var unknown []string
	for account, p := range a.pending {
		if p.archived < 0 {
			unknown = append(unknown, account)
		}
	}
	a.mu.Unlock()
	for start := 0; start < len(unknown); start += archiveScanPage {
		accounts := unknown[start:min(start+archiveScanPage, len(unknown))]
		archived, err := a.queue.LogsArchived(ctx, accounts)
		if err != nil {
			return err
		}
		a.mu.Lock()
		for _, account := range accounts {
			a.learnArchived(account, archived[account])
		}
		a.mu.Unlock()
	}
	return nil
}

// due returns up to archivePassAccounts accounts whose events are due
// archiving at now: a chunk's worth, or waiting the account's share of
// ArchiveDelay; the oldest first.
func (a *EventArchiver) due(now time.Time) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	type candidate struct {
		account string
		since   time.Time
	}
	var due []candidate
	for account, p := range a.pending {
		if p.archived >= 0 && !now.Before(p.retry) && (p.last-p.archived >= eventChunk || now.Sub(p.since) >= p.wait) {
			due = append(due, candidate{account, p.since})
		}
	}
	slices.SortFunc(due, func(x, y candidate) int { return x.since.Compare(y.since) })
	accounts := make([]string, 0, min(len(due), archivePassAccounts))
	for _, c := range due[:min(len(due), archivePassAccounts)] {
		accounts = append(accounts, c.account)
	}
	return accounts
}

// dueAfter is how long account's new events wait before they are due:
// between half of delay and delay, by a hash of the account. Accounts whose
// events began together (a load's start, the workers' start, a market's
// open) would otherwise fall due in the same pass, and every pass after
// (an account archived is due again a delay after its next event): one
// burst a delay of hundreds of chunks, whose writes and WAL held up the
// owners' commits beside them (docs/performance.md, "The account
// events"). Each account's own wait spreads them over half the delay, and
// their differing periods keep them apart.
func dueAfter(account string, delay time.Duration) time.Duration {
	h := fnv.New32a()
	_, _ = h.Write([]byte(account))
	return delay - time.Duration(float64(delay/2)*float64(h.Sum32())/(1<<32))
}

// archiveAccounts archives the accounts' events past their archived
// positions, up to a chunk each: read from their logs, written to the
// history, then marked archived as far as the history goes. It archives
// only the accounts it claims; those another archiver claimed wait
// archiveClaim, and leave its pending once their archived positions show
// their events archived. A failure releases its claims.
func (a *EventArchiver) archiveAccounts(ctx context.Context, accounts []string) (err error) {
	claimed, err := a.queue.ClaimLogs(ctx, accounts, a.reader, archiveClaim)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// Another archiver (whose PostgreSQL may answer) need not
			// wait for the claims to expire.
			release, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			_ = a.queue.ReleaseLogs(release, claimed, a.reader)
		}
	}()
	archived, err := a.queue.LogsArchived(ctx, accounts)
	if err != nil {
		return err
	}
	if len(claimed) < len(accounts) {
		archived = a.refused(claimed, archived)
		accounts = claimed
	}
	if len(accounts) == 0 {
		return nil
	}
	// What a failover would lose must not be kept: its sequences would be
	// given again, to other events, which the history would then refuse.
	// The read and the replicas' answer come from one server
	// (ReadLogsReplicated): apart, a failover between them had a promoted
	// server's replicas vouch for what the old primary alone held.
	read, err := a.queue.ReadLogsReplicated(ctx, archived, eventChunk)
	if err != nil {
		return err
	}
	runs := make(map[string][]orders.Event, len(read))
	for account, entries := range read {
		run := make([]orders.Event, 0, len(entries))
		for _, entry := range entries {
			// A hole (only a write Redis lost leaves one) ends the chunk:
			// the next starts past it.
			if len(run) > 0 && entry.Sequence != run[len(run)-1].Sequence+1 {
				break
			}
			run = append(run, eventOf(entry))
		}
		runs[account] = run
	}
	held, err := a.archive.ArchiveEvents(ctx, runs)
	if err != nil {
		return err
	}
	marks := make([]emq.LogMark, 0, len(held))
	var events int64
	for account, last := range held {
		marks = append(marks, emq.LogMark{Group: account, Archived: last})
		if run := runs[account]; len(run) > 0 && last == run[len(run)-1].Sequence {
			events += int64(len(run))
		}
	}
	marked, err := a.queue.MarkLogsArchived(ctx, marks, a.hot)
	if marked == nil {
		return err
	}
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, mark := range marks {
		if marked[i].Err != nil {
			continue
		}
		a.metrics.dropped.Add(float64(marked[i].Dropped))
		if p := a.pending[mark.Group]; p != nil {
			p.archived = max(p.archived, marked[i].Archived)
			// More than a chunk, or announced since: due again, the
			// first at once.
			if len(runs[mark.Group]) == eventChunk {
				p.since = now.Add(-a.delay)
			} else if p.last > p.archived {
				p.since = now
			}
		}
	}
	for _, account := range accounts {
		p := a.pending[account]
		if p == nil {
			continue
		}
		// Nothing past the archived position: archived by another (or
		// announced and lost with Redis); a later append is announced.
		if read[account] == nil || p.last <= p.archived {
			delete(a.pending, account)
		}
	}
	a.metrics.events.Add(float64(events))
	a.metrics.chunks.Add(float64(len(runs)))
	return err
}

// refused notes that the accounts of archived (their archived positions)
// not in claimed are another archiver's for now: they wait archiveClaim,
// and those whose positions show their events archived leave pending. It
// returns the positions of the claimed accounts.
func (a *EventArchiver) refused(claimed []string, archived map[string]int64) map[string]int64 {
	mine := make(map[string]int64, len(claimed))
	for _, account := range claimed {
		mine[account] = archived[account]
	}
	retry := time.Now().Add(archiveClaim)
	a.mu.Lock()
	defer a.mu.Unlock()
	for account, position := range archived {
		if _, ok := mine[account]; ok {
			continue
		}
		if p := a.learnArchived(account, position); p != nil {
			p.retry = retry
		}
	}
	return mine
}

// learnArchived raises the account's archived position to what its log
// says and forgets the account once all its events are archived; it
// returns the account's pending entry while some are not (nil otherwise).
// a.mu is held.
func (a *EventArchiver) learnArchived(account string, position int64) *pendingLog {
	p := a.pending[account]
	if p == nil {
		return nil
	}
	p.archived = max(p.archived, position)
	if p.last <= p.archived {
		delete(a.pending, account)
		return nil
	}
	return p
}

// trimAged trims the logs whose archived events left their hot tail
// (LogsDue): the logs that are still appended to are trimmed by their
// archiving's marks.
func (a *EventArchiver) trimAged(ctx context.Context) error {
	due, err := a.queue.LogsDue(ctx, trimPage)
	if err != nil || len(due) == 0 {
		return err
	}
	marks := make([]emq.LogMark, len(due))
	for i, account := range due {
		marks[i] = emq.LogMark{Group: account}
	}
	marked, err := a.queue.MarkLogsArchived(ctx, marks, a.hot)
	for _, m := range marked {
		a.metrics.dropped.Add(float64(m.Dropped))
	}
	return err
}

// report sets the lag gauges: how long the oldest event this archiver
// knows is not archived has waited, and how many it knows of.
func (a *EventArchiver) report(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var oldest time.Time
	var behind int64
	for _, p := range a.pending {
		if oldest.IsZero() || p.since.Before(oldest) {
			oldest = p.since
		}
		if p.archived >= 0 {
			behind += p.last - p.archived
		}
	}
	lag := 0.0
	if !oldest.IsZero() {
		lag = now.Sub(oldest).Seconds()
	}
	a.metrics.report(lag, float64(behind))
}

// KeepPruning deletes the history older than its retention every
// pruneInterval, a batch per statement until a batch comes back short,
// until ctx ends.
func (a *EventArchiver) KeepPruning(ctx context.Context) {
	var warnings outage.Sparse
	for {
		if _, err := a.Prune(ctx, time.Now()); err != nil && ctx.Err() == nil && warnings.Allow() {
			a.logger.Warn("event history prune failed; trying again", "err", err)
		}
		if !outage.Sleep(ctx, outage.Jittered(pruneInterval)) {
			return
		}
	}
}

// Prune deletes the chunks of the history archived longer than the
// retention before now, a batch per statement, and returns how many.
func (a *EventArchiver) Prune(ctx context.Context, now time.Time) (int64, error) {
	before := now.Add(-a.retention)
	var pruned int64
	for ctx.Err() == nil {
		deleted, err := a.archive.PruneEvents(ctx, before, pruneBatch)
		pruned += deleted
		a.metrics.pruned.Add(float64(deleted))
		if err != nil {
			return pruned, fmt.Errorf("prune the event history: %w", err)
		}
		if deleted < pruneBatch {
			return pruned, nil
		}
	}
	return pruned, ctx.Err()
}

// archiveMetrics are the archiver's series. The counters add up over the
// process's archivers; the gauges are each archiver's own, one series per
// shard (events.<n>), or the shards' archivers would overwrite each other's.
// A shard's series exist while this process archives it: set by each pass,
// deleted when its archiver stops (the shard went to another worker, whose
// series take over).
type archiveMetrics struct {
	events, chunks, dropped, pruned prometheus.Counter
	lag, behind                     *prometheus.GaugeVec
	shard                           string
}

// report sets the shard's gauges.
func (m archiveMetrics) report(lag, behind float64) {
	m.lag.WithLabelValues(m.shard).Set(lag)
	m.behind.WithLabelValues(m.shard).Set(behind)
}

// forget deletes the shard's gauges.
func (m archiveMetrics) forget() {
	m.lag.DeleteLabelValues(m.shard)
	m.behind.DeleteLabelValues(m.shard)
}

func newArchiveMetrics(registerer prometheus.Registerer, shard string) archiveMetrics {
	return archiveMetrics{
		events: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_archived_total",
			Help: "Accounts' events this process wrote to the history in PostgreSQL.",
		})),
		chunks: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_archive_chunks_total",
			Help: "Chunks of events this process offered the history (one per account per pass), those the history held already included.",
		})),
		dropped: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_trimmed_total",
			Help: "Archived events this process's marks dropped from the accounts' logs in Redis (past the hot tail).",
		})),
		pruned: collectors.Register(registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_history_pruned_chunks_total",
			Help: "Chunks of the event history this process deleted past EVENTS_RETENTION.",
		})),
		lag: collectors.Register(registerer, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "events_archive_lag_seconds",
			Help: "How long the oldest event this process's archiver of the shard knows of has waited in Redis unarchived (at most ArchiveDelay at rest): Redis holds this much beyond the hot tail.",
		}, []string{"shard"})),
		behind: collectors.Register(registerer, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "events_archive_behind",
			Help: "Events this process's archiver of the shard knows are in Redis and not yet archived.",
		}, []string{"shard"})),
		shard: shard,
	}
}
