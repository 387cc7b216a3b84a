package emq_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// logged is what a test compares of a log's entries: "<sequence> <id>".
func logged(events []emq.LogEvent) []string {
	out := make([]string, len(events))
	for i, event := range events {
		out[i] = strconv.FormatInt(event.Sequence, 10) + " " + event.ID
	}
	return out
}

func readAll(t testing.TB, queue *emq.Queue, group string) []string {
	t.Helper()
	events, err := queue.ReadLog(context.Background(), group, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return logged(events)
}

// An admission appends its log entry in the same step, with the group's
// next sequence; a duplicate or a rate-limited refusal appends nothing, and
// AppendLog's entries share the sequence.
func TestAdmissionsAndAppendsShareTheGroupsSequence(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	withLog := func(id, dedup string) emq.Job {
		j := job(id, "acct-a", dedup)
		j.Log = &emq.LogEntry{ID: id + ".accepted", Type: "accepted", Data: []byte(`{"id":"` + id + `"}`)}
		return j
	}
	limited := withLog("J3", "c3")
	limited.RateLimit = &emq.RateLimit{Bucket: "b", Limit: emq.Rate{Capacity: 1, PerSecond: 1}}
	steps := []struct {
		name     string
		admit    emq.Job
		append   []emq.LogEntry
		sequence int64
	}{
		{name: "admission", admit: withLog("J1", "c1"), sequence: 1},
		{name: "duplicate", admit: withLog("J1b", "c1"), sequence: 0},
		{name: "append", append: []emq.LogEntry{{ID: "x1", Type: "t"}, {ID: "x2", Type: "t"}}, sequence: 2},
		{name: "admission with a permit", admit: limited, sequence: 4},
	}
	for _, step := range steps {
		if step.append != nil {
			appended, err := queue.AppendLog(ctx, "acct-a", emq.LogSource{}, step.append)
			if err != nil || appended.First != step.sequence || appended.Count != len(step.append) {
				t.Fatalf("%s: %+v, %v; want from %d", step.name, appended, err, step.sequence)
			}
			continue
		}
		admission, err := queue.Admit(ctx, step.admit)
		if err != nil || admission.LogSequence != step.sequence {
			t.Fatalf("%s: %+v, %v; want log sequence %d", step.name, admission, err, step.sequence)
		}
	}
	limited.ID, limited.DedupKey, limited.Log.ID = "J4", "c4", "J4.accepted"
	if _, err := queue.Admit(ctx, limited); !errors.Is(err, emq.ErrRateLimited) {
		t.Fatalf("an admission past its bucket: %v, want rate limited", err)
	}
	want := []string{"1 J1.accepted", "2 x1", "3 x2", "4 J3.accepted"}
	if got := readAll(t, queue, "acct-a"); !slices.Equal(got, want) {
		t.Errorf("log holds %v, want %v", got, want)
	}
	if got := readAll(t, queue, "acct-b"); len(got) != 0 {
		t.Errorf("another group's log holds %v", got)
	}
}

// A source's versions are appended once each, in order: a redelivery
// appends nothing, a version past a gap is refused naming the last one
// appended, and Force appends past a gap the caller knows is for good.
func TestASourceIsAppendedOnceAndInOrder(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	entry := func(id string) []emq.LogEntry { return []emq.LogEntry{{ID: id, Type: "t", Data: []byte("d")}} }
	steps := []struct {
		name    string
		source  emq.LogSource
		id      string
		first   int64
		gapHeld int64 // > 0: want a *LogGapError with this Held
	}{
		{name: "version 1", source: emq.LogSource{Name: "s", Version: 1}, id: "s1", first: 1},
		{name: "version 1 again", source: emq.LogSource{Name: "s", Version: 1}, id: "s1", first: 0},
		{name: "version 3 before 2", source: emq.LogSource{Name: "s", Version: 3}, id: "s3", gapHeld: 1},
		{name: "another source's first", source: emq.LogSource{Name: "t", Version: 1}, id: "t1", first: 2},
		{name: "version 2", source: emq.LogSource{Name: "s", Version: 2}, id: "s2", first: 3},
		{name: "version 3", source: emq.LogSource{Name: "s", Version: 3}, id: "s3", first: 4},
		{name: "version 6 forced past a gap", source: emq.LogSource{Name: "s", Version: 6, Force: true}, id: "s6", first: 5},
		{name: "version 5 after 6", source: emq.LogSource{Name: "s", Version: 5}, id: "s5", first: 0},
	}
	for _, step := range steps {
		appended, err := queue.AppendLog(ctx, "acct", step.source, entry(step.id))
		if step.gapHeld > 0 {
			var gap *emq.LogGapError
			if !errors.As(err, &gap) || gap.Held != step.gapHeld {
				t.Fatalf("%s: %+v, %v; want a gap after %d", step.name, appended, err, step.gapHeld)
			}
			continue
		}
		if err != nil || appended.First != step.first {
			t.Fatalf("%s: %+v, %v; want first %d", step.name, appended, err, step.first)
		}
	}
	want := []string{"1 s1", "2 t1", "3 s2", "4 s3", "5 s6"}
	if got := readAll(t, queue, "acct"); !slices.Equal(got, want) {
		t.Errorf("log holds %v, want %v", got, want)
	}
}

// ReadLogs returns what several groups' logs hold after the sequences
// given, in one call; WaitLogChanges announces every append, the
// admission's too, after a position, and waits for one when there is none.
func TestLogChangesAnnounceAppendsAndReadLogsReadsThem(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	start, err := queue.LogChangesPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{"a", "b"} {
		if _, err := queue.AppendLog(ctx, group, emq.LogSource{}, []emq.LogEntry{{ID: group + "1", Type: "t"}}); err != nil {
			t.Fatal(err)
		}
	}
	admitted := job("j1", "a", "")
	admitted.Log = &emq.LogEntry{ID: "a2", Type: "t"}
	if _, err := queue.Admit(ctx, admitted); err != nil {
		t.Fatal(err)
	}
	changes, position, err := queue.WaitLogChanges(ctx, start, 100*time.Millisecond, 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []emq.LogChange{{Group: "a", Sequence: 1}, {Group: "b", Sequence: 1}, {Group: "a", Sequence: 2}}; !slices.Equal(changes, want) {
		t.Errorf("changes = %v, want %v", changes, want)
	}
	if end, err := queue.LogChangesPosition(ctx); err != nil || end != position {
		t.Errorf("the changes end at %q (%v), the wait answered position %q", end, err, position)
	}
	events, err := queue.ReadLogs(ctx, map[string]int64{"a": 0, "b": 1, "c": 0}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 1 || !slices.Equal(logged(events["a"]), []string{"1 a1", "2 a2"}) {
		t.Errorf("read = %v, want a's two entries alone", events)
	}
	done := make(chan []emq.LogChange, 1)
	go func() {
		changes, _, err := queue.WaitLogChanges(ctx, position, 5*time.Second, 10)
		if err != nil {
			t.Error(err)
		}
		done <- changes
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := queue.AppendLog(ctx, "b", emq.LogSource{}, []emq.LogEntry{{ID: "b2", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case changes := <-done:
		if want := []emq.LogChange{{Group: "b", Sequence: 2}}; !slices.Equal(changes, want) {
			t.Errorf("a blocked wait = %v, want %v", changes, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a blocked wait never returned")
	}
	if changes, _, err := queue.WaitLogChanges(ctx, "$", 50*time.Millisecond, 10); err != nil || len(changes) != 0 {
		t.Errorf("a wait with nothing new = %v, %v; want nothing", changes, err)
	}
}

// A client that waits for replicas waits for them on appends too: with none
// following, the append is made on the primary and answered not replicated,
// and its retry appends nothing twice and is answered the same.
func TestAppendsWaitForReplicas(t *testing.T) {
	ctx := context.Background()
	client, err := emq.Connect(ctx, testserver.StartRedis(t).Client(t), emq.WithAdmitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("work")
	for attempt := range 2 {
		_, err := queue.AppendLog(ctx, "g", emq.LogSource{Name: "s", Version: 1}, []emq.LogEntry{{ID: "e1", Type: "t"}})
		var notReplicated *emq.NotReplicatedError
		if !errors.As(err, &notReplicated) || notReplicated.Wanted != 1 || notReplicated.Acked != 0 {
			t.Fatalf("attempt %d: %v, want not replicated (0 of 1)", attempt+1, err)
		}
	}
	if got := readAll(t, queue, "g"); !slices.Equal(got, []string{"1 e1"}) {
		t.Errorf("log holds %v, want the one entry", got)
	}
}

// LastLogSequences reads the last sequence of many groups' logs at once,
// 0 for a log never written.
func TestLastLogSequencesReadsManyGroupsAtOnce(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	for group, count := range map[string]int{"a": 2, "b": 5} {
		for range count {
			if _, err := queue.AppendLog(ctx, group, emq.LogSource{}, []emq.LogEntry{{ID: group, Type: "t"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	lasts, err := queue.LastLogSequences(ctx, []string{"a", "b", "never"})
	if err != nil || len(lasts) != 3 || lasts["a"] != 2 || lasts["b"] != 5 || lasts["never"] != 0 {
		t.Errorf("last sequences %v, %v; want a 2, b 5, never 0", lasts, err)
	}
}

// An append of several entries announces its last sequence alone: the
// readers read the log after their position, and each announcement costs
// an XADD and a parse in every reader.
func TestLogAppendAnnouncesItsLastEntryOnce(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	start, err := queue.LogChangesPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		group   string
		entries int
		want    emq.LogChange
	}{
		{"a", 3, emq.LogChange{Group: "a", Sequence: 3}},
		{"b", 1, emq.LogChange{Group: "b", Sequence: 1}},
		{"a", 2, emq.LogChange{Group: "a", Sequence: 5}},
	}
	var want []emq.LogChange
	for _, tt := range tests {
		entries := make([]emq.LogEntry, tt.entries)
		for i := range entries {
			entries[i] = emq.LogEntry{ID: tt.group + strconv.Itoa(i), Type: "t"}
		}
		if _, err := queue.AppendLog(ctx, tt.group, emq.LogSource{}, entries); err != nil {
			t.Fatal(err)
		}
		want = append(want, tt.want)
	}
	changes, _, err := queue.WaitLogChanges(ctx, start, 100*time.Millisecond, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changes, want) {
		t.Errorf("changes = %v, want %v", changes, want)
	}
}

// ReadLogsAndChanges reads the logs and, in the same round trip, the
// changes announced after a position, without waiting for any.
func TestReadLogsAndChangesLooksAtTheNextChanges(t *testing.T) {
	ctx := context.Background()
	queue, _ := newQueue(t)
	start, err := queue.LogChangesPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, group := range []string{"a", "b"} {
		if _, err := queue.AppendLog(ctx, group, emq.LogSource{}, []emq.LogEntry{{ID: group + "1", Type: "t"}}); err != nil {
			t.Fatal(err)
		}
	}
	end, err := queue.LogChangesPosition(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		position string
		want     []emq.LogChange
		next     string
	}{
		{"changes after the position", start, []emq.LogChange{{Group: "a", Sequence: 1}, {Group: "b", Sequence: 1}}, end},
		{"none after the end", end, nil, end},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			read, changes, position, err := queue.ReadLogsAndChanges(ctx, map[string]int64{"a": 0, "c": 0}, 10, tt.position, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(read) != 1 || !slices.Equal(logged(read["a"]), []string{"1 a1"}) {
				t.Errorf("read = %v, want a's entry alone", read)
			}
			if !slices.Equal(changes, tt.want) || position != tt.next {
				t.Errorf("changes = %v at %q, want %v at %q", changes, position, tt.want, tt.next)
			}
		})
	}
}
