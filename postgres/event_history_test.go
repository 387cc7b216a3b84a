package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// historyEvents are events from to to of an account, as the log gives them.
func historyEvents(account string, from, to int64) []orders.Event {
	events := make([]orders.Event, 0, to-from+1)
	for n := from; n <= to; n++ {
		events = append(events, orders.Event{
			Sequence: n, ID: fmt.Sprintf("%s.%d", account, n), Type: orders.EventBalance,
			Time: time.UnixMilli(1_700_000_000_000 + n).UTC(),
			Data: json.RawMessage(fmt.Sprintf(`{"asset":"USD","version":%d,"note":"a\nline \u00e9"}`, n)),
		})
	}
	return events
}

// sequences lists the events' sequences, and fails unless each follows the
// one before.
func sequences(t testing.TB, events []orders.Event) (first, last int64) {
	t.Helper()
	for i := 1; i < len(events); i++ {
		if events[i].Sequence != events[i-1].Sequence+1 {
			t.Fatalf("event %d follows %d", events[i].Sequence, events[i-1].Sequence)
		}
	}
	if len(events) == 0 {
		return 0, 0
	}
	return events[0].Sequence, events[len(events)-1].Sequence
}

// The history gives back each event as the stream sends it, from any
// position, in whole chunks that cover at least what was asked.
func TestEventHistoryReadsBackWhatItArchived(t *testing.T) {
	ctx := context.Background()
	history := postgres.NewEventHistory(migratedPool(t))
	for _, chunk := range [][2]int64{{1, 100}, {101, 101}, {102, 356}, {357, 400}} {
		held, err := history.ArchiveEvents(ctx, map[string][]orders.Event{
			"acct": historyEvents("acct", chunk[0], chunk[1]), "other": historyEvents("other", chunk[0], chunk[0]),
		})
		if err != nil || held["acct"] != chunk[1] || held["other"] != chunk[0] {
			t.Fatalf("archive %v: %v, %v", chunk, held, err)
		}
	}
	want := historyEvents("acct", 1, 400)
	for _, tt := range []struct {
		after       int64
		count       int
		first, last int64
	}{
		{after: 0, count: 50, first: 1, last: 100},
		{after: 0, count: 101, first: 1, last: 101},
		{after: 99, count: 2, first: 100, last: 101},
		{after: 100, count: 1, first: 101, last: 101},
		{after: 150, count: 1000, first: 151, last: 400},
		{after: 399, count: 10, first: 400, last: 400},
		{after: 400, count: 10},
	} {
		t.Run(fmt.Sprintf("after %d count %d", tt.after, tt.count), func(t *testing.T) {
			events, err := history.EventsAfter(ctx, "acct", tt.after, tt.count)
			if err != nil {
				t.Fatal(err)
			}
			if first, last := sequences(t, events); first != tt.first || last != tt.last {
				t.Fatalf("read %d to %d, want %d to %d", first, last, tt.first, tt.last)
			}
			for _, event := range events {
				original := want[event.Sequence-1]
				if got, sent := string(event.AppendJSON(nil)), string(original.AppendJSON(nil)); got != sent {
					t.Fatalf("event %d reads back as\n%s\nwant\n%s", event.Sequence, got, sent)
				}
			}
		})
	}
	if first, err := history.FirstEventSequence(ctx, "acct"); err != nil || first != 1 {
		t.Errorf("first %d, %v", first, err)
	}
	if first, err := history.FirstEventSequence(ctx, "nobody"); err != nil || first != 0 {
		t.Errorf("first of nobody's %d, %v", first, err)
	}
}

// A chunk that starts at or below what the history holds is not written,
// whatever its end: the answer is how far the history goes, so an archiver
// that crashed after writing and before marking Redis, or a second one
// that read the same events, marks that and goes on after it. No event is
// written twice, also when archivers race.
func TestEventHistoryWritesEachEventOnce(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	history := postgres.NewEventHistory(db)
	archive := func(from, to int64) int64 {
		t.Helper()
		held, err := history.ArchiveEvents(ctx, map[string][]orders.Event{"acct": historyEvents("acct", from, to)})
		if err != nil {
			t.Fatal(err)
		}
		return held["acct"]
	}
	for _, step := range []struct {
		name     string
		from, to int64
		held     int64
	}{
		{name: "the first chunk", from: 1, to: 10, held: 10},
		{name: "the same again (a crash before the mark)", from: 1, to: 10, held: 10},
		{name: "the same start, further (the log grew since)", from: 1, to: 15, held: 10},
		{name: "overlapping its end", from: 8, to: 12, held: 10},
		{name: "the next", from: 11, to: 15, held: 15},
		{name: "past a hole (the log dropped events unarchived)", from: 20, to: 22, held: 22},
	} {
		if held := archive(step.from, step.to); held != step.held {
			t.Fatalf("%s: history held through %d, want %d", step.name, held, step.held)
		}
	}
	var chunks, events int64
	if err := db.QueryRow(ctx, `SELECT count(*), sum(last_sequence - first_sequence + 1) FROM account_event_chunks`).Scan(&chunks, &events); err != nil {
		t.Fatal(err)
	}
	if chunks != 3 || events != 18 {
		t.Fatalf("%d chunks of %d events, want 3 of 18", chunks, events)
	}

	// Archivers racing over one account's next events, each from where it
	// read the history to go, with chunks of its own length.
	var racers sync.WaitGroup
	for racer := range 8 {
		racers.Go(func() {
			for from := int64(23); from <= 200; {
				held, err := history.ArchiveEvents(ctx, map[string][]orders.Event{"acct": historyEvents("acct", from, from+int64(racer))})
				if err != nil {
					t.Error(err)
					return
				}
				from = held["acct"] + 1
			}
		})
	}
	racers.Wait()
	var overlaps int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM account_event_chunks a JOIN account_event_chunks b
		ON a.account_id = b.account_id AND a.last_sequence < b.last_sequence AND b.first_sequence <= a.last_sequence`).Scan(&overlaps); err != nil {
		t.Fatal(err)
	}
	if overlaps != 0 {
		t.Errorf("%d overlapping chunks", overlaps)
	}
	read, err := history.EventsAfter(ctx, "acct", 20, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if first, last := sequences(t, read); first != 21 || last < 200 {
		t.Errorf("the history holds %d to %d after the race, want 21 to 200 or more", first, last)
	}
}

// A chunk of more events than the table allows, or of events that do not
// follow one another, is refused before anything is written.
func TestEventHistoryRefusesMalformedChunks(t *testing.T) {
	ctx := context.Background()
	history := postgres.NewEventHistory(migratedPool(t))
	holey := append(historyEvents("acct", 1, 3), historyEvents("acct", 5, 5)...)
	for name, events := range map[string][]orders.Event{
		"too many": historyEvents("acct", 1, postgres.MaxChunkEvents+1),
		"a hole":   holey,
	} {
		if _, err := history.ArchiveEvents(ctx, map[string][]orders.Event{"acct": events}); err == nil || !strings.HasPrefix(err.Error(), "postgres: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if first, err := history.FirstEventSequence(ctx, "acct"); err != nil || first != 0 {
		t.Errorf("first %d, %v; want nothing written", first, err)
	}
}

// Pruning deletes the chunks archived before a time, oldest first, at most
// a batch per statement, and leaves the younger ones.
func TestEventHistoryPrunesInBatches(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	history := postgres.NewEventHistory(db)
	for n := int64(1); n <= 25; n++ {
		if _, err := history.ArchiveEvents(ctx, map[string][]orders.Event{"acct": historyEvents("acct", n, n)}); err != nil {
			t.Fatal(err)
		}
	}
	// Chunks 1..20 archived 8 days ago, a minute apart; 21..25 now.
	if _, err := db.Exec(ctx, `UPDATE account_event_chunks SET archived_at = now() - interval '8 days' + last_sequence * interval '1 minute'
		WHERE last_sequence <= 20`); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-7 * 24 * time.Hour)
	var batches []int64
	for {
		deleted, err := history.PruneEvents(ctx, before, 8)
		if err != nil {
			t.Fatal(err)
		}
		batches = append(batches, deleted)
		if deleted < 8 {
			break
		}
		// Oldest first: what is left starts after what went.
		if first, err := history.FirstEventSequence(ctx, "acct"); err != nil || first != 1+8*int64(len(batches)) {
			t.Fatalf("after %d batches the history starts at %d, %v", len(batches), first, err)
		}
	}
	if fmt.Sprint(batches) != "[8 8 4]" {
		t.Errorf("batches deleted %v, want [8 8 4]", batches)
	}
	events, err := history.EventsAfter(ctx, "acct", 20, 100)
	if err != nil {
		t.Fatal(err)
	}
	if first, last := sequences(t, events); first != 21 || last != 25 {
		t.Errorf("the history keeps %d to %d, want 21 to 25", first, last)
	}
	if size, err := history.Size(ctx); err != nil || size <= 0 {
		t.Errorf("size %d, %v", size, err)
	}
}
