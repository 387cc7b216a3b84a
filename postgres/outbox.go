package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/outbox_sweep.sql
	outboxSweepSQL string
	//go:embed sql/outbox_sweep_hold.sql
	outboxSweepHoldSQL string
	//go:embed sql/outbox_mark_relayed.sql
	outboxMarkRelayedSQL string
	//go:embed sql/outbox_prune.sql
	outboxPruneSQL string
)

// EventRowsWindow is how long after its relay an events row may still be
// read back, to fill a gap a relay meets (EventRows,
// outbox_event_rows.sql): the shortest time Prune may keep a relayed row.
const EventRowsWindow = time.Minute

// Outbox is the outbox settlement writes beside the balances it changes:
// one row per write listing them (orders.BalancesWriteName; a deposit's
// rows are one per balance), marked once the relay has carried it.
type Outbox struct {
	db *pgxpool.Pool
	// sweepHold is the longest a sweep's transaction may sit idle while
	// its carry runs (outbox_sweep_hold.sql).
	sweepHold time.Duration
	// carryWait is how long a sweep waits for its carry to return.
	carryWait time.Duration
}

// SweepHold is how long a sweep's transaction may wait on its carry
// without a statement before PostgreSQL ends it and lets its rows go. The
// carry itself is given two thirds of it (sweepCarryShare); one that
// overruns that deadline (a Redis call in flight heeds the client's
// timeouts, not the context's) is waited for until five sixths
// (sweepWaitShare), and the sweep then commits without its marks. So the
// hold ends only a sweeper that stopped, whose timers cannot fire,
// whatever the Redis client's timeouts.
const SweepHold = 15 * time.Second

// sweepCarryShare is the share of the hold a sweep's carry may take, and
// sweepWaitShare the share after which the sweep stops waiting for it.
const (
	sweepCarryShare = 2.0 / 3
	sweepWaitShare  = 5.0 / 6
)

// sweepShutdownGrace bounds what a sweep still does once its context is
// cancelled (a worker shutting down): wait for its carry, then mark what
// the carry sent and commit, so those marks are kept.
const sweepShutdownGrace = 2 * time.Second

// NewOutbox uses db.
func NewOutbox(db *pgxpool.Pool) *Outbox {
	return &Outbox{db: db, sweepHold: SweepHold, carryWait: share(SweepHold, sweepWaitShare)}
}

func share(d time.Duration, part float64) time.Duration { return time.Duration(float64(d) * part) }

// MarkRelayed marks the rows of entries relayed.
func (j *Outbox) MarkRelayed(ctx context.Context, entries []orders.OutboxEntry) error {
	return markRelayed(ctx, j.db, entries)
}

// SweepBatch marks relayed the rows of marks (rows a relay carried since
// the last sweep), then takes up to limit unrelayed rows older than age,
// oldest first, hands them to carry and marks relayed the ones carry
// returns, in one transaction whose rows are locked with SKIP LOCKED, so
// sweepers in several workers share the backlog instead of relaying it
// twice. It returns how many rows it took and how many of those it marked.
//
// The relay's marks ride the sweep's transaction, which runs every second
// anyway, rather than a transaction of their own; marked first, they are
// not the sweep's to take. carry's context ends within two thirds of
// SweepHold, and a carry that overran its wait is left to return alone:
// the sweep commits the relay's marks and none of its own, and the rows
// it took are carried again (a dedup hit for what went). A transaction
// idle past SweepHold all the same (its process stopped) is ended by
// PostgreSQL, so a stopped sweeper cannot hold its rows for good. Once ctx
// is cancelled, the sweep waits for its carry and then marks and commits
// within sweepShutdownGrace each.
func (j *Outbox) SweepBatch(ctx context.Context, age time.Duration, limit int, marks []orders.OutboxEntry,
	carry func(context.Context, []orders.OutboxEntry) []orders.OutboxEntry) (taken, marked int, err error) {
	taken, marked, err = j.sweepBatch(ctx, age, limit, marks, carry)
	if err != nil {
		return 0, 0, fmt.Errorf("postgres: sweep outbox: %w", err)
	}
	return taken, marked, nil
}

func (j *Outbox) sweepBatch(ctx context.Context, age time.Duration, limit int, marks []orders.OutboxEntry,
	carry func(context.Context, []orders.OutboxEntry) []orders.OutboxEntry) (taken, marked int, err error) {
	tx, err := j.db.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		// A no-op once committed; otherwise it runs even if ctx is done.
		rollback, cancel := context.WithTimeout(context.WithoutCancel(ctx), sweepShutdownGrace)
		defer cancel()
		_ = tx.Rollback(rollback)
	}()
	if err := markRelayed(ctx, tx, marks); err != nil {
		return 0, 0, err
	}
	if _, err := tx.Exec(ctx, outboxSweepHoldSQL, fmt.Sprint(j.sweepHold.Milliseconds())); err != nil {
		return 0, 0, err
	}
	rows, err := tx.Query(ctx, outboxSweepSQL, age, limit)
	if err != nil {
		return 0, 0, err
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
	if err != nil {
		return 0, 0, err
	}
	carried := j.carryWithin(ctx, entries, carry)
	finish, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(sweepShutdownGrace, cancel) })
	defer stop()
	if err := markRelayed(finish, tx, carried); err != nil {
		return 0, 0, err
	}
	if err := tx.Commit(finish); err != nil {
		return 0, 0, err
	}
	return len(entries), len(carried), nil
}

// carryWithin runs carry on entries with a deadline of two thirds of the
// hold and returns what it carried, or nothing once it has overrun
// carryWait (or sweepShutdownGrace after ctx is cancelled): it then
// returns alone and its answer is dropped.
func (j *Outbox) carryWithin(ctx context.Context, entries []orders.OutboxEntry,
	carry func(context.Context, []orders.OutboxEntry) []orders.OutboxEntry) []orders.OutboxEntry {
	carryCtx, cancel := context.WithTimeout(ctx, share(j.sweepHold, sweepCarryShare))
	done := make(chan []orders.OutboxEntry, 1)
	go func() {
		defer cancel()
		done <- carry(carryCtx, entries)
	}()
	waitUntil := time.Now().Add(j.carryWait)
	wait := time.NewTimer(j.carryWait)
	defer wait.Stop()
	shutdown := ctx.Done()
	for {
		select {
		case carried := <-done:
			return carried
		case <-wait.C:
			return nil
		case <-shutdown:
			shutdown = nil
			wait.Reset(min(time.Until(waitUntil), sweepShutdownGrace))
		}
	}
}

// Prune deletes up to batch outbox rows relayed longer than retention ago
// (by PostgreSQL's clock), oldest first, and returns how many: the events
// rows, which the relay stamps and keeps, would otherwise stay for good.
// Rows not relayed are never deleted. Pruners in several workers take
// different rows.
func (j *Outbox) Prune(ctx context.Context, retention time.Duration, batch int) (int64, error) {
	tag, err := j.db.Exec(ctx, outboxPruneSQL, retention, batch)
	if err != nil {
		return 0, fmt.Errorf("postgres: prune outbox: %w", err)
	}
	return tag.RowsAffected(), nil
}

// outboxExecer is a pool or a transaction.
type outboxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// balancesPrefix begins the outbox name of a balance (orders.BalanceName).
const balancesPrefix = orders.BalancesTable + ":"

// markRelayed marks the rows of entries, found by their unique name and
// version, so an entry handed over without its row id is marked too: a
// balance's row is deleted, any other stamped relayed_at; a row a sweep
// holds is left to it. The entries are sorted into the two here, not by
// their names' prefixes in the statement (outbox_mark_relayed.sql).
func markRelayed(ctx context.Context, db outboxExecer, entries []orders.OutboxEntry) error {
	if len(entries) == 0 {
		return nil
	}
	var deleted, stamped struct {
		names    []string
		versions []int64
	}
	for _, entry := range entries {
		rows := &stamped
		if strings.HasPrefix(entry.Name, balancesPrefix) {
			rows = &deleted
		}
		rows.names, rows.versions = append(rows.names, entry.Name), append(rows.versions, entry.Version)
	}
	if _, err := db.Exec(ctx, outboxMarkRelayedSQL, deleted.names, deleted.versions,
		stamped.names, stamped.versions); err != nil {
		return fmt.Errorf("postgres: mark outbox rows relayed: %w", err)
	}
	return nil
}

//go:embed sql/outbox_event_rows.sql
var outboxEventRowsSQL string

// EventRows returns the events rows of the source name with versions after
// after and before before, oldest first: the ones a relay must append
// before a later one.
func (j *Outbox) EventRows(ctx context.Context, name string, after, before int64) ([]orders.OutboxEntry, error) {
	rows, err := j.db.Query(ctx, outboxEventRowsSQL, name, after, before, EventRowsWindow)
	if err != nil {
		return nil, fmt.Errorf("postgres: read events rows of %s: %w", name, err)
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
	if err != nil {
		return nil, fmt.Errorf("postgres: read events rows of %s: %w", name, err)
	}
	return entries, nil
}

// RenderEvents turns an events row into the account's events (the
// function RenderEvents).
func (j *Outbox) RenderEvents(entry orders.OutboxEntry) ([]orders.EventDraft, error) {
	return RenderEvents(entry)
}
