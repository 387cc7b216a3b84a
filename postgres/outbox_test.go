package postgres_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// insertOutboxRow writes an outbox row named name at version, created age
// ago and relayed relayedAgo ago (never when negative), and returns it.
func insertOutboxRow(t testing.TB, db *pgxpool.Pool, name string, version int64, age, relayedAgo time.Duration) orders.OutboxEntry {
	t.Helper()
	entry := orders.OutboxEntry{Name: name, Version: version, Payload: fmt.Sprintf("%s@%d", name, version)}
	var relayedAt *time.Time
	if relayedAgo >= 0 {
		at := time.Now().Add(-relayedAgo)
		relayedAt = &at
	}
	if err := db.QueryRow(context.Background(),
		`INSERT INTO outbox (name, version, payload, created_at, relayed_at) VALUES ($1, $2, $3, now() - $4::interval, $5) RETURNING id`,
		entry.Name, entry.Version, entry.Payload, age, relayedAt).Scan(&entry.ID); err != nil {
		t.Fatalf("insert outbox row %s: %v", entry.Payload, err)
	}
	return entry
}

// outboxRow is what MarkRelayed left of a row: whether it is still there,
// and when it was stamped relayed (zero: never).
func outboxRow(t testing.TB, db *pgxpool.Pool, entry orders.OutboxEntry) (exists bool, relayedAt time.Time) {
	t.Helper()
	var stamped *time.Time
	err := db.QueryRow(context.Background(), `SELECT relayed_at FROM outbox WHERE name = $1 AND version = $2`,
		entry.Name, entry.Version).Scan(&stamped)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, time.Time{}
	case err != nil:
		t.Fatalf("read outbox row %s: %v", entry.Payload, err)
	case stamped != nil:
		return true, *stamped
	}
	return true, time.Time{}
}

func TestMarkRelayedSettlesEachRowByItsFamily(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	outbox := postgres.NewOutbox(db)
	hourAgo := time.Now().Add(-time.Hour)
	tests := []struct {
		name       string
		row        string
		relayedAgo time.Duration // negative: unrelayed
		marked     bool
		wantGone   bool
		wantFresh  bool // stamped by this mark, not before
	}{
		{"a balance's row is deleted", orders.BalanceName("ACC_A", "USD"), -1, true, true, false},
		{"an events row is stamped and kept", orders.EventsTable + ":ACC_A:BTC-USD", -1, true, false, true},
		{"a row of another family is stamped, never deleted", "trades:ACC_A", -1, true, false, true},
		{"an events row stamped before keeps its stamp", orders.EventsTable + ":ACC_B:BTC-USD", time.Hour, true, false, false},
		{"a balance's row not named stays unrelayed", orders.BalanceName("ACC_B", "USD"), -1, false, false, false},
		{"an events row not named stays unrelayed", orders.EventsTable + ":ACC_C:BTC-USD", -1, false, false, false},
	}
	var entries []orders.OutboxEntry
	rows := make([]orders.OutboxEntry, len(tests))
	for i, tt := range tests {
		rows[i] = insertOutboxRow(t, db, tt.row, 3, time.Minute, tt.relayedAgo)
		if tt.marked {
			entry := rows[i]
			entry.ID = 0 // marked by name and version, not id
			entries = append(entries, entry)
		}
	}
	// A name at a version that has no row settles nothing.
	entries = append(entries, orders.OutboxEntry{Name: orders.BalanceName("ACC_B", "USD"), Version: 4})
	if err := outbox.MarkRelayed(ctx, entries); err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exists, relayedAt := outboxRow(t, db, rows[i])
			switch {
			case tt.wantGone:
				if exists {
					t.Errorf("%s is still there", tt.row)
				}
			case !exists:
				t.Errorf("%s is gone", tt.row)
			case tt.wantFresh && !relayedAt.After(hourAgo.Add(time.Minute)):
				t.Errorf("%s relayed at %v; want now", tt.row, relayedAt)
			case !tt.wantFresh && tt.relayedAgo < 0 && !relayedAt.IsZero():
				t.Errorf("%s relayed at %v; want unrelayed", tt.row, relayedAt)
			case !tt.wantFresh && tt.relayedAgo >= 0 && relayedAt.After(hourAgo.Add(time.Minute)):
				t.Errorf("%s stamped again at %v", tt.row, relayedAt)
			}
		})
	}
	// Only balances, only others, none: each pair may be empty.
	for _, only := range [][]orders.OutboxEntry{rows[4:5], rows[5:6], nil} {
		if err := outbox.MarkRelayed(ctx, only); err != nil {
			t.Errorf("MarkRelayed(%v): %v", payloadsOf(only), err)
		}
	}
	if exists, _ := outboxRow(t, db, rows[4]); exists {
		t.Errorf("%s is still there after its own mark", rows[4].Payload)
	}
	if _, relayedAt := outboxRow(t, db, rows[5]); relayedAt.IsZero() {
		t.Errorf("%s unstamped after its own mark", rows[5].Payload)
	}
}

// A row a sweep holds (locked while it carries it to Redis) is left to the
// sweep: marking does not wait for it.
func TestMarkRelayedSkipsRowsASweepHolds(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	outbox := postgres.NewOutbox(db)
	rows := []orders.OutboxEntry{
		insertOutboxRow(t, db, orders.BalanceName("ACC_A", "USD"), 1, time.Minute, -1),
		insertOutboxRow(t, db, orders.EventsTable+":ACC_A:BTC-USD", 1, time.Minute, -1),
	}
	free := insertOutboxRow(t, db, orders.BalanceName("ACC_B", "USD"), 1, time.Minute, -1)
	sweep, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sweep.Rollback(ctx)
	if _, err := sweep.Exec(ctx, `SELECT id FROM outbox WHERE id = ANY($1) FOR UPDATE`, []int64{rows[0].ID, rows[1].ID}); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := outbox.MarkRelayed(waitCtx, append(slices.Clone(rows), free)); err != nil {
		t.Fatalf("MarkRelayed while a sweep holds rows: %v", err)
	}
	for _, row := range rows {
		if exists, relayedAt := outboxRow(t, db, row); !exists || !relayedAt.IsZero() {
			t.Errorf("%s held by the sweep: exists %v, relayed at %v; want left to it", row.Payload, exists, relayedAt)
		}
	}
	if exists, _ := outboxRow(t, db, free); exists {
		t.Errorf("%s, held by nobody, is still there", free.Payload)
	}
	if err := sweep.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outbox.MarkRelayed(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if exists, _ := outboxRow(t, db, rows[0]); exists {
		t.Errorf("%s is still there once the sweep let it go", rows[0].Payload)
	}
	if _, relayedAt := outboxRow(t, db, rows[1]); relayedAt.IsZero() {
		t.Errorf("%s unstamped once the sweep let it go", rows[1].Payload)
	}
}

func TestSweepBatchTakesTheOldUnrelayedRowsOldestFirst(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	outbox := postgres.NewOutbox(db)
	oldest := insertOutboxRow(t, db, orders.BalanceName("ACC_A", "USD"), 1, time.Hour, -1)
	insertOutboxRow(t, db, orders.EventsTable+":ACC_A:BTC-USD", 1, 2*time.Hour, time.Hour) // relayed
	young := insertOutboxRow(t, db, orders.BalanceName("ACC_A", "BTC"), 1, time.Second, -1)
	older := insertOutboxRow(t, db, orders.EventsTable+":ACC_A:BTC-USD", 2, 90*time.Minute, -1)
	old := insertOutboxRow(t, db, orders.BalanceName("ACC_B", "USD"), 1, time.Minute, -1)

	tests := []struct {
		name      string
		limit     int
		carry     int // how many of the rows taken carry returns
		wantTaken []orders.OutboxEntry
	}{
		{"the oldest rows up to the limit, none carried", 2, 0, []orders.OutboxEntry{older, oldest}},
		{"every old row, the first carried", 10, 1, []orders.OutboxEntry{older, oldest, old}},
		{"what is left, carried", 10, 2, []orders.OutboxEntry{oldest, old}},
		{"nothing old left", 10, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []orders.OutboxEntry
			taken, marked, err := outbox.SweepBatch(ctx, 5*time.Second, tt.limit, nil,
				func(_ context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
					got = entries
					return entries[:tt.carry]
				})
			if err != nil {
				t.Fatal(err)
			}
			if taken != len(tt.wantTaken) || marked != tt.carry || !slices.Equal(got, tt.wantTaken) {
				t.Errorf("SweepBatch took %d %v, marked %d; want %v, %d", taken, payloadsOf(got), marked, payloadsOf(tt.wantTaken), tt.carry)
			}
		})
	}
	if exists, relayedAt := outboxRow(t, db, young); !exists || !relayedAt.IsZero() {
		t.Errorf("the young row: exists %v, relayed at %v; want left to the relay", exists, relayedAt)
	}
}

// TestASweepStoppedInItsCarryLetsItsRowsGo: a sweeper stopped while it
// carries (its transaction open, its rows locked, its carry's deadline
// not heeded) keeps them from the other sweepers only until its
// transaction has sat idle for its hold; PostgreSQL then ends it and
// another sweeper carries and marks them.
func TestASweepStoppedInItsCarryLetsItsRowsGo(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	hold := 300 * time.Millisecond
	stopped, other := postgres.NewOutbox(db), postgres.NewOutbox(db)
	postgres.SetSweepHold(stopped, hold)
	postgres.SetCarryWait(stopped, time.Hour)
	row := insertOutboxRow(t, db, orders.BalanceName("ACC_A", "USD"), 1, time.Minute, -1)

	carrying, resume, done := make(chan time.Time), make(chan struct{}), make(chan error, 1)
	go func() {
		_, _, err := stopped.SweepBatch(ctx, 5*time.Second, 10, nil,
			func(ctx context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
				if deadline, ok := ctx.Deadline(); !ok || time.Until(deadline) >= hold {
					t.Errorf("the carry's deadline: %v (set %v); want one inside the hold of %v", time.Until(deadline), ok, hold)
				}
				carrying <- time.Now()
				<-resume
				return entries
			})
		done <- err
	}()
	since := <-carrying
	var got []orders.OutboxEntry
	var tries int
	for len(got) == 0 && time.Since(since) < 10*time.Second {
		tries++
		_, _, err := other.SweepBatch(ctx, 5*time.Second, 10, nil,
			func(_ context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
				got = entries
				return entries
			})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waited := time.Since(since)
	close(resume)
	if err := <-done; err == nil {
		t.Error("the stopped sweep committed; want its transaction ended")
	}
	if !slices.Equal(got, []orders.OutboxEntry{row}) || tries < 2 || waited < hold {
		t.Fatalf("another sweeper took %v after %d tries, %v; want %s only once the hold of %v passed",
			payloadsOf(got), tries, waited, row.Payload, hold)
	}
	if exists, _ := outboxRow(t, db, row); exists {
		t.Errorf("%s is still there once another sweeper carried it", row.Payload)
	}
}

// TestASlowCarryEndsInsideTheHold: a carry still running (a Redis
// failover) is told to stop before the hold ends its transaction; what it
// carried by then is marked with the relay's marks, not lost with the
// transaction, even when it returns a little after its deadline (a Redis
// call in flight heeds the client's timeouts, not the context) or after
// the sweep's context was cancelled (a worker shutting down). One that
// overruns the sweep's wait, or a shutdown's grace, is left: the relay's
// marks commit, and its rows are free for the next sweep.
func TestASlowCarryEndsInsideTheHold(t *testing.T) {
	hold := 1200 * time.Millisecond
	tests := []struct {
		name string
		// cancel cancels the sweep's context once the carry has begun.
		cancel bool
		// late is how long the carry runs on past its context's end;
		// stuck, that it returns only once the sweep did.
		late  time.Duration
		stuck bool
		// hold and carryWait replace the sweep's hold (1.2 s) and its
		// wait for its carry (5/6 of the hold) when set.
		hold, carryWait time.Duration
		// within is how soon the sweep must be done.
		within time.Duration
		// wantCarried is whether the carry's first row is marked.
		wantCarried bool
	}{
		{name: "returns at its deadline", within: hold, wantCarried: true},
		// Guards the wait against being cut to the carry's deadline.
		{name: "returns a read timeout after it", late: hold / 24, within: hold, wantCarried: true},
		{name: "returns once the sweep was cancelled", cancel: true, late: hold / 24, within: hold, wantCarried: true},
		{name: "returns after the wait", late: hold, within: hold},
		{name: "stuck through a shutdown", cancel: true, stuck: true, hold: 2 * postgres.SweepShutdownGrace, carryWait: time.Hour,
			within: postgres.SweepShutdownGrace + hold},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := migratedPool(t)
			outbox := postgres.NewOutbox(db)
			postgres.SetSweepHold(outbox, cmp.Or(tt.hold, hold))
			if tt.carryWait > 0 {
				postgres.SetCarryWait(outbox, tt.carryWait)
			}
			relays := insertOutboxRow(t, db, orders.BalanceName("ACC_R", "USD"), 1, time.Second, -1)
			first := insertOutboxRow(t, db, orders.BalanceName("ACC_A", "USD"), 1, 2*time.Minute, -1)
			second := insertOutboxRow(t, db, orders.BalanceName("ACC_B", "USD"), 1, time.Minute, -1)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			release, returned := make(chan struct{}), make(chan struct{})
			begun := time.Now()
			taken, marked, err := outbox.SweepBatch(ctx, 5*time.Second, 10, []orders.OutboxEntry{relays},
				func(carryCtx context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
					defer close(returned)
					if tt.cancel {
						cancel()
					}
					if tt.stuck {
						<-release
					}
					<-carryCtx.Done()
					time.Sleep(tt.late)
					return entries[:1] // the second did not go
				})
			took := time.Since(begun)
			close(release)
			<-returned
			wantMarked := 0
			if tt.wantCarried {
				wantMarked = 1
			}
			if err != nil || taken != 2 || marked != wantMarked {
				t.Fatalf("SweepBatch took %d, marked %d, %v; want 2 taken, %d marked", taken, marked, err, wantMarked)
			}
			if took >= tt.within {
				t.Errorf("SweepBatch took %v; want it done within %v", took, tt.within)
			}
			if exists, _ := outboxRow(t, db, relays); exists {
				t.Errorf("%s, the relay's, is still there once the sweep committed", relays.Payload)
			}
			if exists, _ := outboxRow(t, db, first); exists == tt.wantCarried {
				t.Errorf("%s: still there %v; want it marked %v", first.Payload, exists, tt.wantCarried)
			}
			if exists, _ := outboxRow(t, db, second); !exists {
				t.Errorf("%s, not carried, was marked", second.Payload)
			}
			var again []orders.OutboxEntry
			if _, _, err := outbox.SweepBatch(context.Background(), 5*time.Second, 10, nil,
				func(_ context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
					again = entries
					return nil
				}); err != nil {
				t.Fatal(err)
			}
			wantAgain := []orders.OutboxEntry{second}
			if !tt.wantCarried {
				wantAgain = []orders.OutboxEntry{first, second}
			}
			if !slices.Equal(again, wantAgain) {
				t.Errorf("the next sweep took %v; want %v, the rows not marked", payloadsOf(again), payloadsOf(wantAgain))
			}
		})
	}
}

func payloadsOf(entries []orders.OutboxEntry) []string {
	payloads := make([]string, len(entries))
	for i, entry := range entries {
		payloads[i] = entry.Payload
	}
	return payloads
}

// TestSweepBatchMarksTheRelaysRowsFirst: the rows a relay carried and
// left to the sweep are marked in the sweep's transaction, a balance's
// deleted and an events row stamped, before it looks for rows left
// behind, so an old one of them is not taken again; with nothing to take,
// the marks are made all the same.
func TestSweepBatchMarksTheRelaysRowsFirst(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	outbox := postgres.NewOutbox(db)
	carriedOld := insertOutboxRow(t, db, orders.BalanceName("ACC_A", "USD"), 1, time.Hour, -1)
	carriedEvents := insertOutboxRow(t, db, orders.EventsTable+":ACC_A:BTC-USD", 1, time.Second, -1)
	leftBehind := insertOutboxRow(t, db, orders.BalanceName("ACC_B", "USD"), 1, time.Minute, -1)
	for _, tt := range []struct {
		name      string
		marks     []orders.OutboxEntry
		wantTaken []orders.OutboxEntry
	}{
		{"the relay's rows marked, the one left behind taken", []orders.OutboxEntry{carriedOld, carriedEvents}, []orders.OutboxEntry{leftBehind}},
		{"nothing to take, marked all the same", []orders.OutboxEntry{leftBehind}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []orders.OutboxEntry
			taken, _, err := outbox.SweepBatch(ctx, 5*time.Second, 10, tt.marks,
				func(_ context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
					got = entries
					return nil // left for the next case's marks
				})
			if err != nil {
				t.Fatal(err)
			}
			if taken != len(tt.wantTaken) || !slices.Equal(got, tt.wantTaken) {
				t.Errorf("SweepBatch took %d %v; want %v", taken, payloadsOf(got), payloadsOf(tt.wantTaken))
			}
			for _, mark := range tt.marks {
				exists, relayedAt := outboxRow(t, db, mark)
				if balance := mark.Name != carriedEvents.Name; balance && exists || !balance && relayedAt.IsZero() {
					t.Errorf("%s: exists %v, relayed at %v; want it marked", mark.Payload, exists, relayedAt)
				}
			}
		})
	}
}

// TestPruneDeletesTheRowsRelayedPastTheRetention: a relayed row goes once
// its relay is older than the retention, whatever its family; a younger
// one stays, and a row not relayed stays however old, the sweep's to carry.
func TestPruneDeletesTheRowsRelayedPastTheRetention(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	outbox := postgres.NewOutbox(db)
	const retention = 5 * time.Minute
	tests := []struct {
		name       string
		row        string
		age        time.Duration
		relayedAgo time.Duration // negative: unrelayed
		wantGone   bool
	}{
		{"an events row relayed an hour ago", orders.EventsTable + ":ACC_A:BTC-USD", 2 * time.Hour, time.Hour, true},
		{"an events row relayed just past the retention", orders.EventsTable + ":ACC_B:BTC-USD", 7 * time.Minute, 6 * time.Minute, true},
		{"a row of another family relayed past it", "trades:ACC_A", time.Hour, 10 * time.Minute, true},
		{"an events row relayed inside the retention", orders.EventsTable + ":ACC_C:BTC-USD", 5 * time.Minute, 4 * time.Minute, false},
		{"an events row relayed inside a relay's window", orders.EventsTable + ":ACC_D:BTC-USD", time.Minute, 30 * time.Second, false},
		{"an events row never relayed", orders.EventsTable + ":ACC_E:BTC-USD", time.Hour, -1, false},
		{"a balance's row never relayed", orders.BalanceName("ACC_A", "USD"), time.Hour, -1, false},
	}
	rows := make([]orders.OutboxEntry, len(tests))
	wantPruned := int64(0)
	for i, tt := range tests {
		rows[i] = insertOutboxRow(t, db, tt.row, 1, tt.age, tt.relayedAgo)
		if tt.wantGone {
			wantPruned++
		}
	}
	pruned, err := outbox.Prune(ctx, retention, 100)
	if err != nil {
		t.Fatal(err)
	}
	if pruned != wantPruned {
		t.Errorf("Prune = %d rows, want %d", pruned, wantPruned)
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if exists, _ := outboxRow(t, db, rows[i]); exists == tt.wantGone {
				t.Errorf("%s still there: %v, want %v", tt.row, exists, !tt.wantGone)
			}
		})
	}
	if again, err := outbox.Prune(ctx, retention, 100); err != nil || again != 0 {
		t.Errorf("a second Prune = %d, %v; want 0, nothing left past the retention", again, err)
	}
}

// TestPruneTakesABatchOldestFirst: one call deletes at most its batch, the
// rows relayed longest ago first, and skips a row another pruner holds
// rather than wait for it.
func TestPruneTakesABatchOldestFirst(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	outbox := postgres.NewOutbox(db)
	ages := []time.Duration{40, 30, 20, 10}
	rows := make([]orders.OutboxEntry, len(ages)) // relayed 40, 30, 20 and 10 minutes ago
	// Inserted out of their age's order, so the table's own order (a scan
	// that forgot ORDER BY) would take the wrong two.
	for _, i := range []int{3, 1, 0, 2} {
		rows[i] = insertOutboxRow(t, db, fmt.Sprintf("%s:ACC_%d:BTC-USD", orders.EventsTable, i), 1,
			time.Hour, ages[i]*time.Minute)
	}
	pruned, err := outbox.Prune(ctx, time.Minute, 2)
	if err != nil || pruned != 2 {
		t.Fatalf("Prune(batch 2) = %d, %v; want 2", pruned, err)
	}
	for i, row := range rows {
		if exists, _ := outboxRow(t, db, row); exists != (i >= 2) {
			t.Errorf("%s still there: %v after a batch of two; want the two relayed longest ago gone", row.Payload, exists)
		}
	}

	other, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `SELECT 1 FROM outbox WHERE name = $1 FOR UPDATE`, rows[2].Name); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if pruned, err := outbox.Prune(waitCtx, time.Minute, 2); err != nil || pruned != 1 {
		t.Fatalf("Prune while another holds a row = %d, %v; want 1, the row nobody holds", pruned, err)
	}
	if exists, _ := outboxRow(t, db, rows[2]); !exists {
		t.Errorf("%s, held by another, is gone", rows[2].Payload)
	}
	if exists, _ := outboxRow(t, db, rows[3]); exists {
		t.Errorf("%s, held by nobody, is still there", rows[3].Payload)
	}
}
