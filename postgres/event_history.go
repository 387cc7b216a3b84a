package postgres

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/account_events_lock.sql
	accountEventsLockSQL string
	//go:embed sql/account_events_archive.sql
	accountEventsArchiveSQL string
	//go:embed sql/account_events_read.sql
	accountEventsReadSQL string
	//go:embed sql/account_events_first.sql
	accountEventsFirstSQL string
	//go:embed sql/account_events_prune.sql
	accountEventsPruneSQL string
	//go:embed sql/account_events_size.sql
	accountEventsSizeSQL string
)

// MaxChunkEvents is the most events one chunk of the history holds (the
// table's check, migrations/0013): a reader looks this far back for the
// chunk that holds an event.
const MaxChunkEvents = 1023

// EventHistory is accounts' events once they leave Redis
// (account_event_chunks): the workers' archiver writes them in chunks of
// consecutive events, a stream that resumes further back than Redis holds
// reads them, and a pruner deletes what is older than the retention.
type EventHistory struct {
	db *pgxpool.Pool
	// writers bounds the ArchiveEvents calls at work at once.
	writers chan struct{}
}

// archiveWriters is how many ArchiveEvents calls of one EventHistory write
// at once; the others wait their turn. A worker's archivers, one per shard
// of the logs, share its history and its pool with settlement: all sixteen
// writing at once held most of the pool's connections, each paying its own
// first plans and caches (≈ 17 µs of PostgreSQL's CPU an order in a
// 10,000-order bench run; docs/performance.md), for writes nobody waits on.
const archiveWriters = 2

// NewEventHistory uses db.
func NewEventHistory(db *pgxpool.Pool) *EventHistory {
	return &EventHistory{db: db, writers: make(chan struct{}, archiveWriters)}
}

// ArchiveEvents writes each account's events (consecutive sequences,
// oldest first, at most MaxChunkEvents) as one chunk, all in one
// transaction, and returns by account the last sequence the history holds
// for it after the write. A chunk that starts at or below what the history
// held is not written: those events are there already (another archiver
// wrote them, or this one did before a crash kept it from marking them
// archived), and the answer says how far the history goes instead. Two
// archivers writing one account go one after the other, under an advisory
// lock per account, so no event is ever written twice.
func (h *EventHistory) ArchiveEvents(ctx context.Context, runs map[string][]orders.Event) (map[string]int64, error) {
	accounts := make([]string, 0, len(runs))
	for account, events := range runs {
		if len(events) == 0 {
			continue
		}
		if len(events) > MaxChunkEvents {
			return nil, fmt.Errorf("postgres: archive %d events of %s: a chunk holds at most %d", len(events), account, MaxChunkEvents)
		}
		for i := 1; i < len(events); i++ {
			if events[i].Sequence != events[i-1].Sequence+1 {
				return nil, fmt.Errorf("postgres: archive events of %s: %d follows %d", account, events[i].Sequence, events[i-1].Sequence)
			}
		}
		accounts = append(accounts, account)
	}
	held := make(map[string]int64, len(accounts))
	if len(accounts) == 0 {
		return held, nil
	}
	slices.Sort(accounts)
	firsts, lasts, chunks := make([]int64, len(accounts)), make([]int64, len(accounts)), make([]string, len(accounts))
	for i, account := range accounts {
		events := runs[account]
		firsts[i], lasts[i] = events[0].Sequence, events[len(events)-1].Sequence
		chunks[i] = string(encodeChunk(events))
	}
	select {
	case h.writers <- struct{}{}:
		defer func() { <-h.writers }()
	case <-ctx.Done():
		return nil, fmt.Errorf("postgres: archive events of %d accounts: %w", len(accounts), context.Cause(ctx))
	}
	// One batch is one implicit transaction: the locks are held until the
	// archive statement, which reads under a snapshot taken after them, is
	// done.
	batch := &pgx.Batch{}
	batch.Queue(accountEventsLockSQL, accounts)
	batch.Queue(accountEventsArchiveSQL, accounts, firsts, lasts, chunks)
	results := h.db.SendBatch(ctx, batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return nil, fmt.Errorf("postgres: lock the history of %d accounts: %w", len(accounts), err)
	}
	rows, err := results.Query()
	if err != nil {
		return nil, fmt.Errorf("postgres: archive events of %d accounts: %w", len(accounts), err)
	}
	for rows.Next() {
		var account string
		var last int64
		if err := rows.Scan(&account, &last); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: archive events of %d accounts: %w", len(accounts), err)
		}
		held[account] = last
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: archive events of %d accounts: %w", len(accounts), err)
	}
	if err := results.Close(); err != nil {
		return nil, fmt.Errorf("postgres: archive events of %d accounts: %w", len(accounts), err)
	}
	return held, nil
}

// EventsAfter returns the account's events after sequence after, oldest
// first: those of the chunks holding after+1 to after+count, so at least
// count when the history holds them, and a chunk's worth more at most.
// None when the history holds nothing there; the first is past after+1
// when the history lacks after+1 (it was pruned, or never archived).
func (h *EventHistory) EventsAfter(ctx context.Context, account string, after int64, count int) ([]orders.Event, error) {
	rows, err := h.db.Query(ctx, accountEventsReadSQL, account, after, count, MaxChunkEvents+1)
	if err != nil {
		return nil, fmt.Errorf("postgres: events of %s after %d: %w", account, after, err)
	}
	defer rows.Close()
	var events []orders.Event
	for rows.Next() {
		var chunk []byte
		if err := rows.Scan(&chunk); err != nil {
			return nil, fmt.Errorf("postgres: events of %s after %d: %w", account, after, err)
		}
		var decoded []orders.Event
		if err := json.Unmarshal(chunk, &decoded); err != nil {
			return nil, fmt.Errorf("postgres: events of %s after %d: a chunk: %w", account, after, err)
		}
		for _, event := range decoded {
			if event.Sequence > after {
				events = append(events, event)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: events of %s after %d: %w", account, after, err)
	}
	return events, nil
}

// FirstEventSequence returns the first sequence the account's history
// holds, 0 when it holds none.
func (h *EventHistory) FirstEventSequence(ctx context.Context, account string) (int64, error) {
	var first int64
	err := h.db.QueryRow(ctx, accountEventsFirstSQL, account).Scan(&first)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: first event of %s: %w", account, err)
	}
	return first, nil
}

// PruneEvents deletes up to batch chunks archived before before, oldest
// first, in one statement, and returns how many it deleted: a pruner calls
// it again until it deletes fewer than batch. Pruners in several workers
// take different chunks (SKIP LOCKED).
func (h *EventHistory) PruneEvents(ctx context.Context, before time.Time, batch int) (int64, error) {
	tag, err := h.db.Exec(ctx, accountEventsPruneSQL, before, batch)
	if err != nil {
		return 0, fmt.Errorf("postgres: prune events archived before %s: %w", before.UTC().Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// Size is what the history takes on disk, its indexes and compressed
// values included, in bytes: for benchmarks.
func (h *EventHistory) Size(ctx context.Context) (int64, error) {
	var bytes int64
	if err := h.db.QueryRow(ctx, accountEventsSizeSQL).Scan(&bytes); err != nil {
		return 0, fmt.Errorf("postgres: size of the event history: %w", err)
	}
	return bytes, nil
}

// encodeChunk is a chunk's events as stored: a JSON array of each event as
// the stream sends it (orders.Event.AppendJSON), which json.Unmarshal
// reads back into the same events.
func encodeChunk(events []orders.Event) []byte {
	size := 2
	for _, event := range events {
		size += len(event.Data) + len(event.ID) + 96
	}
	chunk := append(make([]byte, 0, size), '[')
	for i, event := range events {
		if i > 0 {
			chunk = append(chunk, ',')
		}
		chunk = event.AppendJSON(chunk)
	}
	return append(chunk, ']')
}
