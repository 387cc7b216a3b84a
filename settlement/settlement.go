// Package settlement is what one settlement worker process runs: the
// order settler on its queue and, beside it, the outbox relay's sweep, the
// balance coherence consumer and the accounts' events' archiver, with the
// settings a worker deployed without
// flags runs with. cmd/worker runs one as a process; cmd/bench runs several
// in-process, so that what the bench measures is what the binary runs.
package settlement

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/collectors"
	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

// Config is how a worker works the instruments' order queues.
type Config struct {
	// QueuePrefix names the instruments' queues, <QueuePrefix><SYMBOL>:
	// orders.QueuePrefix, or one of the bench's own so that its backlog
	// does not mix with what the gateway admitted.
	QueuePrefix string
	// Symbols are the instruments whose queues the workers own; empty for
	// every instrument PostgreSQL lists when the worker starts.
	Symbols []string
	// OwnLease is the lease of an instrument's ownership, and of an event
	// shard's: a dead owner's instruments and shards are owned again
	// within about OwnLease + 250 ms (the roster's poll), and their
	// claimed orders run again once their own Lease ran out.
	OwnLease time.Duration
	// Concurrency is how many orders are handled at once.
	Concurrency int
	// Batch is the most orders one claim takes; 0 means the concurrency.
	Batch int
	// Lease is how long a claim holds an order; a dead worker's orders run
	// again after about this long.
	Lease time.Duration
	// Retry is when failed orders run again. The coherence consumer retries at
	// the same backoff but never runs out of attempts.
	Retry emq.RetryPolicy
	// DrainTimeout is how long in-flight orders may take once the context
	// ends before they are released to other workers.
	DrainTimeout time.Duration
	// WaitReplicas, when above zero, is how many Redis replicas must hold
	// what the worker writes for clients (accounts' events, coherence jobs)
	// before the outbox rows are marked relayed, waiting at most
	// WaitTimeout (emq.WithAdmitReplicas); rows not held in time are
	// relayed again by the sweep.
	WaitReplicas int
	WaitTimeout  time.Duration
	// EventsHotTail is what the accounts' logs in Redis keep of the events
	// archived to PostgreSQL: its newest minutes (EVENTS_HOT_RETENTION) and
	// count (EVENTS_HOT_COUNT). EventsRetention is how long the history in
	// PostgreSQL keeps them (EVENTS_RETENTION). The workers' archivers keep
	// both; the gateways read whatever is kept.
	EventsHotTail   emq.LogHotTail
	EventsRetention time.Duration
	// EventsArchiveDelay, above zero, is how long an account's new events
	// wait before they are archived, unless they are a chunk's worth
	// (placement.DefaultEventArchiveDelay otherwise).
	EventsArchiveDelay time.Duration
	// CoherenceJobSize is the most balance changes one coherence job
	// lists (placement.WithCoherenceJobSize; 0 is
	// placement.CoherenceBatch); 1 while workers of a release that reads
	// one change a job still run (COHERENCE_JOB_SIZE), which also has
	// settlement write an outbox row per balance, as those releases did.
	CoherenceJobSize int
	// CoherenceWithoutAmounts has settlement list its writes' balances as
	// "<name>@<version>" alone, which the coherence consumer reads back
	// from PostgreSQL: while workers of a release whose consumer refuses
	// a line with amounts still run (COHERENCE_BALANCE_AMOUNTS=false;
	// postgres.Settler.WithoutBalanceValues).
	CoherenceWithoutAmounts bool
	// OutboxRetention is how long the outbox keeps a row once relayed
	// (OUTBOX_RETENTION): at least postgres.EventRowsWindow, which a relay
	// reads events rows back for; the workers delete what is older.
	OutboxRetention time.Duration
	// OutboxPruneInterval, above zero, is how often a worker prunes the
	// outbox (outboxPruneInterval otherwise).
	OutboxPruneInterval time.Duration
}

// DefaultConfig is what a worker deployed without flags runs with.
//
// The concurrency is what settlement batches can gather: a worker runs one
// settlement transaction at a time per instrument, and the orders of that
// instrument its handlers hold meanwhile settle together in the next, under
// one lock of the instrument. A transaction costs PostgreSQL about the same
// whether it takes a few orders or a hundred, so under a backlog the
// handlers are what throughput is made of; a lone order still goes at once.
// In the bench's matching phase (4 workers, 10,000 orders, the same run's
// pgbench as the yardstick) 32 handlers settled 30 % (one hot instrument)
// and 27 % (three), 128 handlers 36 % and 42 %, and 512 handlers 57 % and
// 62 %. A waiting handler holds no connection.
//
// An instrument's ownership lease is emq's default, 5 s: a dead owner's
// instruments are settled again within about 5.25 s, while an owner loses
// an instrument only after 5 s without an extension it sends every 1.7 s
// (a Redis failover or a pause shorter than that keeps it).
//
// The retry defaults are sized for a PostgreSQL outage, the failure
// settlement meets most: 60 attempts from 100ms doubling to 10s keep an order
// alive through at least 4.4 minutes of outage (6.6 on average, see
// OutageOutlasted) before it is dead, and an order waits at most 10s once the
// database is back.
func DefaultConfig() Config {
	return Config{
		QueuePrefix:  orders.QueuePrefix,
		OwnLease:     emq.DefaultOwnershipLease,
		Concurrency:  512,
		Lease:        30 * time.Second,
		Retry:        emq.RetryPolicy{MaxAttempts: 60, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second},
		DrainTimeout: 10 * time.Second,
		WaitTimeout:  500 * time.Millisecond,
		// Redis holds minutes of each account's events, PostgreSQL a week.
		EventsHotTail:    emq.DefaultLogHotTail,
		EventsRetention:  placement.DefaultEventsRetention,
		CoherenceJobSize: placement.CoherenceBatch,
		OutboxRetention:  DefaultOutboxRetention,
	}
}

// DefaultOutboxRetention is how long the outbox keeps a relayed row by
// default: past the minute a relay may read an events row back, with room
// to look at what went out lately; the accounts' events themselves are in
// their history.
const DefaultOutboxRetention = 5 * time.Minute

// OutageOutlasted is how long an order whose every attempt fails at once
// stays alive before it is dead: the queue's equal jitter waits at least
// half of each backoff, so this is the sum of those halves.
func (c Config) OutageOutlasted() time.Duration {
	var outlasted time.Duration
	backoff := c.Retry.BaseDelay
	for range c.Retry.MaxAttempts - 1 {
		backoff = min(backoff, c.Retry.MaxDelay)
		outlasted += backoff / 2
		backoff *= 2
	}
	return outlasted
}

// ConnectionsBesideSettlement is how many connections a worker's pool holds
// beyond settlement's (postgres.SettlerConnections, which the settler never
// exceeds, whatever the concurrency): what runs beside it (the coherence
// consumer, the outbox sweep and pruner, the balance cache's healer, the
// event archivers and the history's pruner), each holding one for a moment
// now and then: more of them than connections, so one may wait a moment
// for another's.
const ConnectionsBesideSettlement = 4

// poolConnections is the pool size of a worker at c.
func (c Config) poolConnections() int32 {
	return int32(min(c.Concurrency, postgres.SettlerConnections) + ConnectionsBesideSettlement)
}

const (
	// coherenceAttempts is, at a 10 s backoff cap, more than a week of
	// retries: a coherence job that died would leave its cached balance stale
	// until the next change (its outbox row is relayed already).
	coherenceAttempts = 100_000
	// sweepInterval is how often the relay looks for outbox rows a crash
	// (or an admin deposit) left behind.
	sweepInterval = time.Second
	// outboxPruneInterval is how often a worker deletes the outbox rows
	// relayed longer ago than the retention, outboxPruneBatch how many one
	// statement deletes and outboxPruneBatches how many statements a pass
	// makes at most: up to 10,000 rows a second a worker, several times
	// what settlement relays at its peak, while a backlog (the months of
	// rows releases before this one kept) goes at that pace per worker
	// rather than in one pass as long as it takes.
	outboxPruneInterval = 10 * time.Second
	outboxPruneBatch    = 5000
	outboxPruneBatches  = 20
	// outboxBacklogLogEvery is how often a worker says it left a backlog of
	// relayed rows for its next pass.
	outboxBacklogLogEvery = time.Minute
	// coherenceIdlePoll is the idle poll of the coherence shards' claim
	// loops. What this worker's relay and sweep admit onto them is claimed
	// at once (emq's local wake), and the gateways admit onto the remote
	// queue, whose loop waits on its wake token: the poll only finds jobs
	// another worker released, or that a relay of an earlier release
	// admitted. At emq's default (50 ms, doubling to 200 ms) the 16 shards'
	// loops of every worker claimed 3-4 times a job, nearly all empty.
	coherenceIdlePoll = time.Second
)

// Deps are what a worker settles with: a process's own connections, so that
// the bench's in-process workers hold what worker processes hold.
type Deps struct {
	DB     *pgxpool.Pool
	Queues *emq.Client
	Logger *slog.Logger
	// Metrics is where the worker registers its series; a private registry
	// when nil. One registry backs one Worker.
	Metrics prometheus.Registerer
	// Owner is told of the instruments the worker takes over and gives up;
	// nil for the settler's (PostgreSQL's fence).
	Owner InstrumentOwner
}

// Connect opens a worker process's connections: a PostgreSQL pool of
// min(c.Concurrency, postgres.SettlerConnections) + ConnectionsBesideSettlement,
// and a queue client, which
// refuses a server of another protocol version. Close them with Deps.Close.
func Connect(ctx context.Context, databaseURL, redisURL string, c Config, logger *slog.Logger) (Deps, error) {
	poolConfig, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return Deps{}, fmt.Errorf("postgres: %w", err)
	}
	poolConfig.MaxConns = c.poolConnections()
	postgres.ConfigurePool(poolConfig)
	db, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return Deps{}, fmt.Errorf("postgres: %w", err)
	}
	options := []emq.Option{emq.WithLogger(logger)}
	if c.WaitReplicas > 0 {
		options = append(options, emq.WithAdmitReplicas(c.WaitReplicas, c.WaitTimeout))
	}
	queues, err := emq.Dial(ctx, redisURL, options...)
	if err != nil {
		db.Close()
		return Deps{}, err
	}
	return Deps{DB: db, Queues: queues, Logger: logger}, nil
}

// Close closes the connections Connect opened.
func (d Deps) Close() {
	_ = d.Queues.Close()
	d.DB.Close()
}

// InstrumentOwner is told when the worker takes over and gives up an
// instrument (postgres.Settler, which fences the instrument's row with the
// epoch, so that a stale owner's batch is refused).
type InstrumentOwner interface {
	// TakeOver makes the worker the instrument's owner at epoch, the
	// ownership's fencing token. An error matching postgres.ErrFenced says
	// PostgreSQL holds an epoch at or above it (fencedEpoch reads it).
	TakeOver(ctx context.Context, symbol string, epoch int64) error
	// GiveUp ends the worker's ownership of the instrument.
	GiveUp(symbol string)
}

// Worker is one worker process's settlement and what runs beside it.
type Worker struct {
	config      Config
	logger      *slog.Logger
	metrics     *emq.Metrics
	queues      *emq.Client
	instruments []*emq.Queue
	owner       InstrumentOwner
	settler     *postgres.Settler
	relay       *placement.OutboxRelay
	outbox      *postgres.Outbox
	// prunedOutbox counts the outbox rows this process deleted.
	prunedOutbox prometheus.Counter
	coherence    *placement.BalanceCoherence
	// coherenceQueues are the balances' coherence queues, one per shard.
	coherenceQueues []*emq.Queue
	healer          *placement.BalanceCacheHealer
	// logShards are the shards of the accounts' logs, whose archivers
	// are spread over the workers as the instruments are; newArchiver
	// makes the archiver of one this worker owns; historyPruner prunes
	// the events' history (one, whatever the shards).
	logShards     []*emq.Queue
	newArchiver   func(shard *emq.Queue) *placement.EventArchiver
	historyPruner *placement.EventArchiver
}

// New declares the order kind on the instruments' queues (c.Symbols, or
// every instrument PostgreSQL lists) and the coherence queues' kinds, and
// assembles the settler, which hands each commit's outbox entries to the
// relay.
func New(ctx context.Context, deps Deps, c Config) (*Worker, error) {
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = prometheus.NewRegistry()
	}
	c.QueuePrefix = cmp.Or(c.QueuePrefix, orders.QueuePrefix)
	c.OwnLease = cmp.Or(c.OwnLease, emq.DefaultOwnershipLease)
	symbols := c.Symbols
	if len(symbols) == 0 {
		listed, err := postgres.NewInstruments(deps.DB).ReadInstruments(ctx)
		if err != nil {
			return nil, err
		}
		for symbol := range listed {
			symbols = append(symbols, symbol)
		}
		slices.Sort(symbols)
	}
	if len(symbols) == 0 {
		return nil, errors.New("settlement: no instruments to settle: PostgreSQL lists none")
	}
	instruments := make([]*emq.Queue, len(symbols))
	for i, symbol := range symbols {
		instruments[i] = deps.Queues.Queue(c.QueuePrefix + symbol)
		if err := instruments[i].Declare(ctx, orders.KindPlace, orders.KindCommand); err != nil {
			return nil, err
		}
	}
	logs := placement.NewEventLogs(deps.Queues)
	outbox := postgres.NewOutbox(deps.DB)
	relay := placement.NewOutboxRelay(outbox, deps.Queues, placement.CoherenceModes, deps.Logger,
		placement.WithEventsLogs(logs), placement.WithCoherenceJobSize(cmp.Or(c.CoherenceJobSize, placement.CoherenceBatch)))
	if err := relay.Declare(ctx); err != nil {
		return nil, err
	}
	settler := postgres.NewSettler(deps.DB, relay, deps.Logger).
		WithMetrics(postgres.NewSettlementMetrics(deps.Metrics))
	if c.CoherenceJobSize == 1 {
		// The rollout form: workers of earlier releases may sweep the rows.
		settler.WithBalanceRowEach()
	}
	if c.CoherenceWithoutAmounts {
		settler.WithoutBalanceValues()
	}
	if err := settler.RegisterOwnerMetrics(deps.Metrics); err != nil {
		return nil, err
	}
	balances, caches := postgres.NewBalances(deps.DB), coherence.New(deps.Queues.Redis(), coherence.WithLogger(deps.Logger))
	owner := deps.Owner
	if owner == nil {
		owner = postgresOwner(settler)
	}
	history := postgres.NewEventHistory(deps.DB)
	newArchiver := func(shard *emq.Queue) *placement.EventArchiver {
		return placement.NewEventArchiver(shard, history, deps.Logger,
			placement.WithHotTail(c.EventsHotTail), placement.WithEventsRetention(c.EventsRetention),
			placement.WithArchiveDelay(cmp.Or(c.EventsArchiveDelay, placement.DefaultEventArchiveDelay)),
			placement.WithArchiveMetrics(deps.Metrics))
	}
	logShards := logs.Queues()
	prunedOutbox := collectors.Register(deps.Metrics, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_pruned_rows_total",
		Help: "Outbox rows this process deleted, relayed longer ago than OUTBOX_RETENTION.",
	}))
	return &Worker{
		config:          c,
		logger:          deps.Logger,
		metrics:         emq.NewMetrics(deps.Metrics),
		queues:          deps.Queues,
		instruments:     instruments,
		owner:           owner,
		settler:         settler,
		relay:           relay,
		outbox:          outbox,
		prunedOutbox:    prunedOutbox,
		coherence:       placement.NewBalanceCoherence(balances, caches, deps.Logger, placement.WithBalanceEvents(logs)),
		coherenceQueues: coherenceQueues(deps.Queues),
		healer:          placement.NewBalanceCacheHealer(balances, caches, deps.Logger, placement.WithHealMetrics(deps.Metrics)),
		logShards:       logShards,
		newArchiver:     newArchiver,
		historyPruner:   newArchiver(logShards[0]),
	}, nil
}

// Run settles orders until ctx ends, then drains. Beside settlement it
// sweeps the outbox and prunes its relayed rows, works the balances'
// coherence queue, heals the balance cache after Redis loses writes,
// archives the accounts' events to PostgreSQL (trimming Redis to their hot
// tail) and prunes their history; if the coherence queue's worker fails,
// settlement stops too, so the process exits instead of settling with
// cached balances that no longer catch up.
func (w *Worker) Run(ctx context.Context) error {
	return workBeside(ctx, []func(context.Context) error{w.sweep, w.pruneOutbox, w.applyCoherence, w.heal, w.archive, w.pruneHistory}, w.settle)
}

// archive runs the event archivers of the shards of the accounts' logs
// this worker owns: the shards are spread over the workers running, as the
// instruments are, so a worker added takes its share of the archiving
// rather than a whole set of archivers (docs/protocol.md, spreading
// ownership). A dead worker's shards are archived again within the
// ownership's lease and a poll; a shard's new archiver starts with a
// reconcile of its logs, so it finds what the last one left.
func (w *Worker) archive(ctx context.Context) error {
	return w.queues.Own(ctx, w.logShards, func(ctx context.Context, owned emq.Owned) error {
		w.newArchiver(owned.Queue).Run(ctx)
		return nil
	}, emq.OwnOptions{
		Worker: workerName(),
		// The shards are every prefix's: one roster whatever the workers settle.
		Roster: "archivers",
		Lease:  w.config.OwnLease,
		Logger: w.logger,
	})
}

// pruneHistory deletes the event history past its retention: one history
// in PostgreSQL, so one pruner.
func (w *Worker) pruneHistory(ctx context.Context) error {
	w.historyPruner.KeepPruning(ctx)
	return nil
}

func (w *Worker) heal(ctx context.Context) error {
	w.healer.Run(ctx)
	return nil
}

// settle owns instruments' queues, spread over the workers running (one
// owner per instrument at a time), and settles the orders of each it owns.
func (w *Worker) settle(ctx context.Context) error {
	return w.queues.Own(ctx, w.instruments, w.own, emq.OwnOptions{
		Worker: workerName(),
		// Workers settling other queues (the bench's) spread theirs apart.
		Roster: w.config.QueuePrefix + "owners",
		Lease:  w.config.OwnLease,
		Logger: w.logger,
	})
}

// workerName names this process in the rosters: its host and process id.
func workerName() string {
	hostname, _ := os.Hostname()
	return cmp.Or(hostname, "worker") + "/" + strconv.Itoa(os.Getpid())
}

// own settles the orders of an instrument while the worker owns its queue:
// it takes the instrument over in PostgreSQL under the ownership's token,
// then claims, settles and completes the queue's orders until the
// ownership ends. Lost (ErrLeaseLost), the orders in flight are cut short
// at once, another owner may be settling; handed over (ErrHandOver), they
// finish, within the drain timeout. Either way the instrument is given up.
func (w *Worker) own(ctx context.Context, owned emq.Owned) error {
	symbol, _ := orders.QueueSymbol(w.config.QueuePrefix, owned.Queue.Name())
	logger := w.logger.With("symbol", symbol, "token", owned.Token)
	if err := takeOver(ctx, w.owner, symbol, owned.Token, logger); err != nil {
		if epoch, fenced := fencedEpoch(err); fenced {
			return &emq.FencedError{Floor: epoch, Err: err}
		}
		return err
	}
	defer w.owner.GiveUp(symbol)
	logger.Info("settling an instrument")
	settle := Settle(w.settler)
	// A batch refused by PostgreSQL's fence means another worker owns the
	// instrument now: stop acting as its owner at once.
	working, fence := context.WithCancelCause(ctx)
	defer fence(nil)
	handler := func(jobCtx context.Context, claim emq.Claim) error {
		jobCtx, cancel := context.WithCancelCause(jobCtx)
		defer cancel(nil)
		stop := context.AfterFunc(ctx, func() {
			if cause := context.Cause(ctx); errors.Is(cause, emq.ErrLeaseLost) {
				cancel(cause)
			}
		})
		defer stop()
		err := settle(jobCtx, claim)
		if errors.Is(err, postgres.ErrFenced) {
			fence(err)
		}
		return err
	}
	// An order admitted to an idle instrument is claimed at once; the
	// coherence shards, sixteen queues of the same client, poll.
	err := owned.Queue.Work(working, handler, emq.WorkerOptions{
		Concurrency:     w.config.Concurrency,
		Batch:           w.config.Batch,
		Lease:           w.config.Lease,
		Retry:           w.config.Retry,
		DrainTimeout:    w.config.DrainTimeout,
		WakeOnAdmission: true,
		Logger:          logger,
		Metrics:         w.metrics,
	})
	if cause := context.Cause(working); errors.Is(cause, postgres.ErrFenced) {
		logger.Warn("PostgreSQL's fence refused a batch: another worker owns the instrument", "err", cause)
		if epoch, fenced := fencedEpoch(cause); fenced {
			return &emq.FencedError{Floor: epoch, Err: cause}
		}
		return cause
	}
	logger.Info("stopped settling an instrument", "cause", context.Cause(ctx))
	return err
}

func (w *Worker) sweep(ctx context.Context) error {
	w.relay.KeepSweeping(ctx, sweepInterval)
	return nil
}

// pruneOutbox deletes, about every outboxPruneInterval, the outbox rows
// relayed longer ago than the retention, a batch at a time until none is
// left or the pass made outboxPruneBatches: the relay keeps the events
// rows it stamps, which nothing reads past postgres.EventRowsWindow. Every
// worker prunes; each takes rows the others do not hold. A failed pass is
// tried again at the next interval. A pass that stops at its limit (a
// backlog: the rows releases before this one kept) says so, once a minute
// at most; outbox_pruned_rows_total counts what went.
func (w *Worker) pruneOutbox(ctx context.Context) error {
	// A retention under the window would delete rows a relay may still
	// read back: the flag refuses it, a Config built in code is raised.
	retention := max(cmp.Or(w.config.OutboxRetention, DefaultOutboxRetention), postgres.EventRowsWindow)
	interval := cmp.Or(w.config.OutboxPruneInterval, outboxPruneInterval)
	var failures outage.Sparse
	var backlogLogged time.Time
	for {
		if !outage.Sleep(ctx, outage.Jittered(interval)) {
			return nil
		}
		var pruned int64
		full := true
		for i := 0; i < outboxPruneBatches && full; i++ {
			n, err := w.outbox.Prune(ctx, retention, outboxPruneBatch)
			pruned += n
			w.prunedOutbox.Add(float64(n))
			if err != nil {
				if ctx.Err() == nil && failures.Allow() {
					w.logger.Warn("outbox pruning failed; trying again next interval", "err", err, "pruned", pruned)
				}
				full = false
				break
			}
			full = n == outboxPruneBatch
		}
		// A backlog lasts hours: a line a minute, not one a pass.
		if full && time.Since(backlogLogged) >= outboxBacklogLogEvery {
			backlogLogged = time.Now()
			w.logger.Info("outbox rows relayed past their retention left for the next pass", "pruned", pruned,
				"retention", retention)
		}
	}
}

// applyCoherence keeps retrying a coherence job, at the capped backoff, for
// as long as it takes. The handlers wait for the consumer's shared batch and
// hold no connection of their own, so the consumer runs as many at once as a
// batch takes, not the settlement concurrency.
func (w *Worker) applyCoherence(ctx context.Context) error {
	retry := w.config.Retry
	retry.MaxAttempts = coherenceAttempts
	// A shard's worker that fails stops the others: the process exits
	// rather than settle with some balances' changes no longer applied.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(w.coherenceQueues))
	var working sync.WaitGroup
	remote := placement.CoherenceRemoteQueue(placement.BalancesTable)
	for i, queue := range w.coherenceQueues {
		options := emq.WorkerOptions{
			Concurrency:  placement.CoherenceBatch,
			Lease:        w.config.Lease,
			Retry:        retry,
			DrainTimeout: w.config.DrainTimeout,
			Logger:       w.logger,
			Metrics:      w.metrics,
			IdlePoll:     coherenceIdlePoll,
		}
		if queue.Name() == remote {
			// The gateways' jobs: claimed as they come. emq's default poll,
			// not the shards': a worker whose other queues' waits hold
			// their share of the pool sleeps the poll instead of waiting,
			// and a cancel's balance must not wait longer than before.
			options.IdlePoll, options.WakeOnAdmission = 0, true
		}
		working.Go(func() {
			defer stop()
			errs[i] = queue.Work(ctx, w.coherence.Handle, options)
		})
	}
	working.Wait()
	return errors.Join(errs...)
}

// coherenceQueues are the balances' coherence queues of client: the shards
// and the remote queue.
func coherenceQueues(client *emq.Client) []*emq.Queue {
	names := placement.CoherenceQueues(placement.BalancesTable)
	queues := make([]*emq.Queue, len(names))
	for i, name := range names {
		queues[i] = client.Queue(name)
	}
	return queues
}

// workBeside runs work and loops together until ctx ends. A loop that fails
// before then stops the rest, so the process exits instead of settling
// without its coherence consumer; work's drain is waited for either way.
func workBeside(ctx context.Context, loops []func(context.Context) error, work func(context.Context) error) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	errs := make([]error, len(loops))
	var running sync.WaitGroup
	for i, loop := range loops {
		running.Go(func() {
			if err := loop(ctx); err != nil && ctx.Err() == nil {
				errs[i] = err
				stop(err)
			}
		})
	}
	workErr := work(ctx)
	stop(nil)
	running.Wait()
	return errors.Join(append([]error{workErr}, errs...)...)
}

// Settle is the emq.Handler of the orders queue: it decodes the claimed
// order, settles it under the claim's fencing token, and buries (emq.Permanent)
// a job that no retry can settle — a payload that is no order, or an order
// postgres refuses as ErrUnsettleable. An instrument command
// (orders.KindCommand: a cancel of resting orders) is decided the same
// way, in sequence with the orders (postgres.Settler.Command).
func Settle(settler *postgres.Settler) emq.Handler {
	return func(ctx context.Context, claim emq.Claim) error {
		var err error
		switch claim.Kind {
		case orders.KindPlace:
			var order orders.Order
			if order, err = orders.DecodeOrder(claim.ID, claim.Payload); err != nil {
				return emq.Permanent(err)
			}
			err = settler.Settle(ctx, order, claim.Token)
		case orders.KindCommand:
			var cmd orders.Command
			if cmd, err = orders.DecodeCommand(claim.ID, claim.Payload); err != nil {
				return emq.Permanent(err)
			}
			_, err = settler.Command(ctx, claim.ID, cmd, claim.Token)
		default:
			return emq.Permanent(fmt.Errorf("%w: job %s is of kind %q, not %q or %q", orders.ErrMalformedOrder, claim.ID,
				claim.Kind, orders.KindPlace, orders.KindCommand))
		}
		if errors.Is(err, postgres.ErrUnsettleable) {
			return emq.Permanent(err)
		}
		return err
	}
}
