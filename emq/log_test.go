package emq_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
	testserver.Parallel(t)
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
	testserver.Parallel(t)
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
	// The test waits for the blocked wait, also when it fails midway: it
	// reads from the client, which closes at cleanup, and fails t.
	done, waited := make(chan []emq.LogChange, 1), make(chan struct{})
	go func() {
		defer close(waited)
		changes, _, err := queue.WaitLogChanges(ctx, position, 5*time.Second, 10)
		if err != nil {
			t.Error(err)
		}
		done <- changes
	}()
	defer func() { <-waited }()
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
	testserver.Parallel(t)
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
	testserver.Parallel(t)
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
	testserver.Parallel(t)
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

// AppendLogs sends many appends in one script call, each answered on its
// own: an append past a gap is refused alone, a duplicate appends nothing,
// a source's next versions in the same call follow each other, and every
// group changed is announced once, with its last sequence.
func TestAppendLogsAnswersEachAppendOfACall(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	entries := func(ids ...string) []emq.LogEntry {
		out := make([]emq.LogEntry, len(ids))
		for i, id := range ids {
			out[i] = emq.LogEntry{ID: id, Type: "t", Data: []byte(id)}
		}
		return out
	}
	type want struct {
		first   int64
		count   int
		gapHeld int64 // > 0: want a *LogGapError with this Held
		bad     bool  // want an error that is no gap
	}
	tests := []struct {
		name    string
		before  []emq.LogAppend // appended first, one call
		appends []emq.LogAppend
		want    []want
		logs    map[string][]string
		changes []emq.LogChange
	}{
		{
			name:   "one past a gap, the others appended",
			before: []emq.LogAppend{{Group: "b", Source: emq.LogSource{Name: "sb", Version: 1}, Entries: entries("b1")}},
			appends: []emq.LogAppend{
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 1}, Entries: entries("a1", "a2")},
				{Group: "b", Source: emq.LogSource{Name: "sb", Version: 3}, Entries: entries("b3")},
				{Group: "c", Entries: entries("c1")},
			},
			want:    []want{{first: 1, count: 2}, {gapHeld: 1}, {first: 1, count: 1}},
			logs:    map[string][]string{"a": {"1 a1", "2 a2"}, "b": {"1 b1"}, "c": {"1 c1"}},
			changes: []emq.LogChange{{Group: "a", Sequence: 2}, {Group: "c", Sequence: 1}},
		},
		{
			name:   "duplicates append nothing",
			before: []emq.LogAppend{{Group: "a", Source: emq.LogSource{Name: "sa", Version: 1}, Entries: entries("a1")}},
			appends: []emq.LogAppend{
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 1}, Entries: entries("a1")},
				{Group: "b", Source: emq.LogSource{Name: "sb", Version: 1}, Entries: entries("b1")},
				{Group: "b", Source: emq.LogSource{Name: "sb", Version: 1}, Entries: entries("b1")},
			},
			want:    []want{{}, {first: 1, count: 1}, {}},
			logs:    map[string][]string{"a": {"1 a1"}, "b": {"1 b1"}},
			changes: []emq.LogChange{{Group: "b", Sequence: 1}},
		},
		{
			name: "a source's versions in order in one call, one group announced once",
			appends: []emq.LogAppend{
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 1}, Entries: entries("a1")},
				{Group: "b", Entries: entries("b1")},
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 2}, Entries: entries("a2", "a3")},
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 4}, Entries: entries("a4")},
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 6, Force: true}, Entries: entries("a6")},
			},
			want:    []want{{first: 1, count: 1}, {first: 1, count: 1}, {first: 2, count: 2}, {gapHeld: 2}, {first: 4, count: 1}},
			logs:    map[string][]string{"a": {"1 a1", "2 a2", "3 a3", "4 a6"}, "b": {"1 b1"}},
			changes: []emq.LogChange{{Group: "a", Sequence: 4}, {Group: "b", Sequence: 1}},
		},
		{
			name: "a bad version refused alone",
			appends: []emq.LogAppend{
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 0}, Entries: entries("a0")},
				{Group: "b", Source: emq.LogSource{Name: "sb", Version: 1}, Entries: entries("b1")},
			},
			want:    []want{{bad: true}, {first: 1, count: 1}},
			logs:    map[string][]string{"a": {}, "b": {"1 b1"}},
			changes: []emq.LogChange{{Group: "b", Sequence: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, _ := newQueue(t)
			if tt.before != nil {
				if _, err := queue.AppendLogs(ctx, tt.before); err != nil {
					t.Fatal(err)
				}
			}
			start, err := queue.LogChangesPosition(ctx)
			if err != nil {
				t.Fatal(err)
			}
			appended, err := queue.AppendLogs(ctx, tt.appends)
			if len(appended) != len(tt.want) {
				t.Fatalf("%d answers (%v), want %d", len(appended), err, len(tt.want))
			}
			var failed bool
			for i, w := range tt.want {
				got := appended[i]
				var gap *emq.LogGapError
				switch {
				case w.gapHeld > 0:
					if !errors.As(got.Err, &gap) || gap.Held != w.gapHeld || gap.Source != tt.appends[i].Source.Name {
						t.Errorf("append %d: %+v; want a gap after %d", i, got, w.gapHeld)
					}
				case w.bad:
					if got.Err == nil || errors.As(got.Err, &gap) {
						t.Errorf("append %d: %+v; want refused, no gap", i, got)
					}
				case got.Err != nil || got.First != w.first || got.Count != w.count:
					t.Errorf("append %d: %+v; want first %d, count %d", i, got, w.first, w.count)
				}
				failed = failed || got.Err != nil
			}
			if failed != (err != nil) {
				t.Errorf("error %v; want one exactly when an append failed", err)
			}
			for group, want := range tt.logs {
				if got := readAll(t, queue, group); !slices.Equal(got, want) {
					t.Errorf("log %s holds %v, want %v", group, got, want)
				}
			}
			changes, _, err := queue.WaitLogChanges(ctx, start, 10*time.Millisecond, 100)
			if err != nil || !slices.Equal(changes, tt.changes) {
				t.Errorf("changes = %v, %v; want %v", changes, err, tt.changes)
			}
		})
	}
}

// A call's appends are bounded (a script blocks Redis while it runs), so
// many appends go in several calls, still in order.
func TestAppendLogsSpreadsManyAppendsOverCallsInOrder(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, _ := newQueue(t)
	var appends []emq.LogAppend
	var want []string
	sequence := 0
	for version := 1; version <= 150; version++ {
		entries := make([]emq.LogEntry, version%7+1) // 600 entries in all
		for i := range entries {
			id := strconv.Itoa(version) + "." + strconv.Itoa(i)
			entries[i] = emq.LogEntry{ID: id, Type: "t"}
			sequence++
			want = append(want, strconv.Itoa(sequence)+" "+id)
		}
		appends = append(appends, emq.LogAppend{Group: "a", Source: emq.LogSource{Name: "s", Version: int64(version)}, Entries: entries})
	}
	appended, err := queue.AppendLogs(ctx, appends)
	if err != nil || len(appended) != len(appends) {
		t.Fatalf("%d answers, %v; want %d", len(appended), err, len(appends))
	}
	if got := readAll(t, queue, "a"); !slices.Equal(got, want) {
		t.Errorf("log holds %d entries, want %d in order", len(got), len(want))
	}
	again, err := queue.AppendLogs(ctx, appends)
	for i, answer := range again {
		if err != nil || answer.Count != 0 {
			t.Fatalf("again, append %d: %+v, %v; want a duplicate", i, answer, err)
		}
	}
}

// An append failing midway through a call (here a log key damaged to hold
// a string) leaves the appends made before it made: Redis keeps a script's
// writes up to its error, so they must be answered as made and announced,
// or a retry finds their sources' versions held and nobody ever learns of
// their entries (and an append without a source would be made twice). The
// failing append is refused alone, as it was in a call of its own; one
// failing before any was made fails the call, which made nothing.
func TestAppendLogsKeepsTheAppendsMadeBeforeAFailure(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	one := func(id string) []emq.LogEntry { return []emq.LogEntry{{ID: id, Type: "t"}} }
	damaged := emq.LogAppend{Group: "b", Source: emq.LogSource{Name: "sb", Version: 1}, Entries: one("b1")}
	tests := []struct {
		name    string
		appends []emq.LogAppend
		made    []int64 // per append: its first sequence, 0 for refused
		logA    []string
		changes []emq.LogChange
	}{
		{
			name: "failing midway",
			appends: []emq.LogAppend{
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 1}, Entries: one("a1")},
				{Group: "n", Entries: one("n1")},
				damaged,
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 2}, Entries: one("a2")},
				{Group: "b", Source: emq.LogSource{Name: "sb", Version: 2}, Entries: one("b2")}, // past the gap
			},
			made:    []int64{1, 1, 0, 2, 0},
			logA:    []string{"1 a1", "2 a2"},
			changes: []emq.LogChange{{Group: "a", Sequence: 2}, {Group: "n", Sequence: 1}},
		},
		{
			name: "failing first",
			appends: []emq.LogAppend{
				damaged,
				{Group: "a", Source: emq.LogSource{Name: "sa", Version: 1}, Entries: one("a1")},
			},
			made: []int64{0, 0},
			logA: []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queue, rdb := newQueue(t)
			if err := rdb.Set(ctx, "emq:{work}:log:b", "damaged", 0).Err(); err != nil {
				t.Fatal(err)
			}
			start, err := queue.LogChangesPosition(ctx)
			if err != nil {
				t.Fatal(err)
			}
			appended, err := queue.AppendLogs(ctx, tt.appends)
			if err == nil || len(appended) != len(tt.appends) {
				t.Fatalf("%v, %v; want an answer per append and an error", appended, err)
			}
			for i, first := range tt.made {
				got := appended[i]
				var gap *emq.LogGapError
				switch {
				case first == 0 && (got.Err == nil || !strings.Contains(got.Err.Error(), "WRONGTYPE")) && !errors.As(got.Err, &gap):
					t.Errorf("append %d: %+v; want it refused", i, got)
				case first > 0 && (got.Err != nil || got.First != first || got.Count != 1):
					t.Errorf("append %d: %+v; want made at %d", i, got, first)
				}
			}
			if got := readAll(t, queue, "a"); !slices.Equal(got, tt.logA) {
				t.Errorf("log a holds %v, want %v", got, tt.logA)
			}
			changes, _, err := queue.WaitLogChanges(ctx, start, 10*time.Millisecond, 100)
			if err != nil || !slices.Equal(changes, tt.changes) {
				t.Errorf("changes = %v, %v; want %v", changes, err, tt.changes)
			}
		})
	}
}

// A server refusing writes (a master turned replica) fails a log_append
// call at its first write: the call must fail with the server's own
// READONLY, which tells a cluster client its map is stale, not answer
// it as an append's failure.
func TestAppendLogsOnAReplicaFailsWithTheServersError(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	master, replica := testserver.StartRedis(t), testserver.StartRedis(t)
	queue, rdb := queueOn(t, replica.Client(t))
	host, port, _ := strings.Cut(master.Addr, ":")
	if err := rdb.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}
	appended, err := queue.AppendLogs(ctx, []emq.LogAppend{
		{Group: "a", Entries: []emq.LogEntry{{ID: "a1"}}},
		{Group: "b", Source: emq.LogSource{Name: "sb", Version: 1}, Entries: []emq.LogEntry{{ID: "b1"}}},
	})
	if err == nil || len(appended) != 2 {
		t.Fatalf("%v, %v; want both refused", appended, err)
	}
	for i, answer := range appended {
		var server redis.Error
		if !errors.As(answer.Err, &server) || !strings.HasPrefix(server.Error(), "READONLY") {
			t.Errorf("append %d: %v; want the server's READONLY", i, answer.Err)
		}
	}
}

// TestAppendLogsAcrossQueuesInOneRoundTrip: the appends of several queues
// (the accounts' logs' shards) go in one round trip, each queue's in its
// own calls (one slot a call), and come back as they were laid out.
func TestAppendLogsAcrossQueuesInOneRoundTrip(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.QueueRedis(t)
	trips := &roundTrips{}
	rdb.AddHook(trips)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	queues := []*emq.Queue{client.Queue("logs.0"), client.Queue("logs.1"), client.Queue("logs.2")}
	entry := func(id string) []emq.LogEntry { return []emq.LogEntry{{ID: id, Type: "t", Data: []byte("{}")}} }
	// Load the script: a server without it answers NOSCRIPT, a second round.
	if _, err := queues[0].AppendLogs(ctx, []emq.LogAppend{{Group: "warm", Entries: entry("w")}}); err != nil {
		t.Fatal(err)
	}
	appends := [][]emq.LogAppend{
		{{Group: "a", Entries: entry("a1")}, {Group: "b", Entries: entry("b1")}},
		{{Group: "a", Entries: entry("a1")}},
		{{Group: "c", Source: emq.LogSource{Name: "s", Version: 2}, Entries: entry("c2")}},
	}
	before := trips.commands.Load() + trips.pipelines.Load()
	appended, err := emq.AppendLogsAcross(ctx, queues, appends)
	if trips := trips.commands.Load() + trips.pipelines.Load() - before; trips != 1 {
		t.Errorf("%d round trips, want 1", trips)
	}
	var gap *emq.LogGapError
	if !errors.As(err, &gap) {
		t.Errorf("error %v, want the gap of queue 2's append", err)
	}
	if len(appended) != 3 || len(appended[0]) != 2 || len(appended[1]) != 1 || len(appended[2]) != 1 {
		t.Fatalf("appended %+v, want 2, 1 and 1 answers", appended)
	}
	for i, want := range []emq.LogAppended{{First: 1, Count: 1}, {First: 1, Count: 1}} {
		if got := appended[0][i]; got.Err != nil || got.First != want.First || got.Count != want.Count {
			t.Errorf("queue 0, append %d: %+v, want %+v", i, got, want)
		}
	}
	if got := appended[1][0]; got.Err != nil || got.First != 1 {
		t.Errorf("queue 1: %+v, want first 1", got)
	}
	if !errors.As(appended[2][0].Err, &gap) {
		t.Errorf("queue 2: %+v, want a gap", appended[2][0])
	}
	for i, q := range queues[:2] {
		events, err := q.ReadLog(ctx, "a", 0, 10)
		if err != nil || len(events) != 1 || events[0].ID != "a1" {
			t.Errorf("queue %d, log a: %+v, %v", i, events, err)
		}
	}
	other, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := emq.AppendLogsAcross(ctx, []*emq.Queue{queues[0], other.Queue("logs.9")}, appends[:2]); err == nil {
		t.Error("appends across two clients' queues went; want refused")
	}
}
