package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

const kind = "order.place"

// fixture is a Redis with an "orders" queue and an empty "mail" queue.
type fixture struct {
	redisURL string
	orders   *emq.Queue
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	ctx := context.Background()
	server := testserver.QueueRedisServer(t)
	client, err := emq.Connect(ctx, server.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{redisURL: server.URL(), orders: client.Queue("orders")}
	if err := f.orders.Declare(ctx, kind); err != nil {
		t.Fatal(err)
	}
	if err := client.Queue("mail").Declare(ctx, "mail.send"); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) admit(t testing.TB, id, group string, payload []byte) {
	t.Helper()
	if _, err := f.orders.Admit(context.Background(), emq.Job{ID: id, Kind: kind, Group: group, Payload: payload}); err != nil {
		t.Fatal(err)
	}
}

// claim leases the next job and returns it.
func (f *fixture) claim(t testing.TB) emq.Claim {
	t.Helper()
	claims, err := f.orders.Claim(context.Background(), 1, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %+v, %v", claims, err)
	}
	return claims[0]
}

// bury claims the next job and kills it with cause; it returns the job's id.
func (f *fixture) bury(t testing.TB, cause string) string {
	t.Helper()
	c := f.claim(t)
	if err := f.orders.Bury(context.Background(), c.ID, c.Token, errors.New(cause)); err != nil {
		t.Fatal(err)
	}
	return c.ID
}

// inspect runs the command and returns what it printed.
func (f *fixture) inspect(t testing.TB, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"inspect"}, args...), func(name string) string {
		if name == "REDIS_URL" {
			return f.redisURL
		}
		return ""
	}, &out)
	return out.String(), err
}

func (f *fixture) mustInspect(t testing.TB, args ...string) string {
	t.Helper()
	out, err := f.inspect(t, args...)
	if err != nil {
		t.Fatalf("inspect %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// fill leaves the orders queue with one job in each state: a canceled one
// (finished), an active one, a dead one, a delayed one and a pending one.
func fill(t testing.TB, f *fixture) (deadID string) {
	t.Helper()
	ctx := context.Background()
	for _, job := range []struct{ id, group string }{
		{"job-a1", "alice"}, {"job-a2", "alice"}, {"job-a3", "alice"}, {"job-b1", "bob"}, {"job-c1", "carol"},
	} {
		f.admit(t, job.id, job.group, []byte(`{"n":1}`))
	}
	if err := f.orders.Cancel(ctx, "job-c1"); err != nil {
		t.Fatal(err)
	}
	f.claim(t)
	deadID = f.bury(t, "settlement refused:\n\tunknown instrument")
	retried := f.claim(t)
	if _, err := f.orders.Retry(ctx, retried.ID, retried.Token, errors.New("try later"), emq.DefaultRetryPolicy); err != nil {
		t.Fatal(err)
	}
	return deadID
}

func TestStatsCountsJobsPerState(t *testing.T) {
	f := newFixture(t)
	fill(t, f)

	var stats []queueStats
	out := f.mustInspect(t, "stats", "-json")
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("stats -json printed %q: %v", out, err)
	}
	if len(stats) != 2 || stats[0].Queue != "mail" || stats[1].Queue != "orders" {
		t.Fatalf("stats of %+v, want mail and orders, every declared queue", stats)
	}
	orders := stats[1]
	if oldest := orders.OldestPendingSeconds; oldest <= 0 || oldest > 60 {
		t.Errorf("oldest pending %v s, want the pending job's age", oldest)
	}
	orders.OldestPendingSeconds = 0
	want := queueStats{Queue: "orders", Pending: 1, Active: 1, Delayed: 1, Dead: 1, Finished: 1, Lanes: 1}
	if orders != want {
		t.Errorf("orders stats = %+v, want %+v", orders, want)
	}
	if stats[0] != (queueStats{Queue: "mail"}) {
		t.Errorf("mail stats = %+v, want all zero", stats[0])
	}

	table := strings.Split(strings.TrimSpace(f.mustInspect(t, "stats", "orders")), "\n")
	if len(table) != 2 {
		t.Fatalf("stats orders printed %q, want a header and one row", table)
	}
	if header := strings.Join(strings.Fields(table[0]), " "); header != "QUEUE PENDING ACTIVE DELAYED DEAD FINISHED LANES OLDEST PENDING" {
		t.Errorf("header = %q", header)
	}
	if row := strings.Fields(table[1]); len(row) != 8 || strings.Join(row[:7], " ") != "orders 1 1 1 1 1 1" {
		t.Errorf("row = %q, want orders and six ones, then the age", table[1])
	}
	// Columns line up: every value starts where its header does.
	if header, row := fieldStarts(table[0])[:8], fieldStarts(table[1]); !slices.Equal(header, row) {
		t.Errorf("columns start at %v in the header and %v in the row:\n%s", header, row, strings.Join(table, "\n"))
	}
}

// fieldStarts returns where each space-separated field of line starts.
func fieldStarts(line string) []int {
	var starts []int
	for i := range len(line) {
		if line[i] != ' ' && (i == 0 || line[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	return starts
}

func TestStatsRefusesAnUndeclaredQueue(t *testing.T) {
	f := newFixture(t)
	_, err := f.inspect(t, "stats", "ordres")
	if err == nil || !strings.Contains(err.Error(), `"ordres"`) || !strings.Contains(err.Error(), "mail, orders") {
		t.Errorf("stats of a misspelt queue: %v, want a refusal naming the declared queues", err)
	}
}

func TestDeadListsJobsWithTheirLastError(t *testing.T) {
	f := newFixture(t)
	deadID := fill(t, f)
	out := f.mustInspect(t, "dead", "orders")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("dead printed %q, want a header and one job", out)
	}
	row := strings.Fields(lines[1])
	if row[0] != deadID || row[1] != "bob" || row[2] != "1" {
		t.Errorf("dead row = %q, want %s of bob after 1 attempt", lines[1], deadID)
	}
	if died, err := time.Parse(timeLayout, row[3]); err != nil || time.Since(died) > time.Minute {
		t.Errorf("died = %q (%v), want the time of death", row[3], err)
	}
	if !strings.HasSuffix(lines[1], "settlement refused: unknown instrument") {
		t.Errorf("dead row = %q, want the last error on one line", lines[1])
	}

	// Flags may follow the queue; a limit under the count says there are more.
	f.bury(t, "second death")
	limited := f.mustInspect(t, "dead", "orders", "-limit", "1")
	if !strings.Contains(limited, "second death") || strings.Contains(limited, deadID) || !strings.Contains(limited, "1 of 2 dead jobs") {
		t.Errorf("dead -limit 1 printed:\n%s\nwant only the most recent death and a note that there are 2", limited)
	}
}

func TestLanesListsTheDeepestFirst(t *testing.T) {
	f := newFixture(t)
	for i, group := range []string{"alice", "bob", "bob", "bob", "carol", "carol"} {
		f.admit(t, "job-"+string(rune('a'+i)), group, nil)
	}
	out := f.mustInspect(t, "lanes", "orders")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		got = append(got, strings.Join(strings.Fields(line), " "))
	}
	if want := []string{"GROUP PENDING", "bob 3", "carol 2", "alice 1"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("lanes = %q, want %q", got, want)
	}
	if empty := f.mustInspect(t, "lanes", "mail"); !strings.Contains(empty, "no pending jobs") {
		t.Errorf("lanes of an empty queue = %q", empty)
	}
}

func TestRequeueMovesOnlyDeadJobsBackToPending(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	deadID := fill(t, f)

	tests := []struct {
		name, id string
		// refusal is part of the error; "" means the requeue succeeds.
		refusal string
	}{
		{"dead job", deadID, ""},
		{"the same job again, now pending", deadID, "is pending, not dead"},
		{"an active job", "job-a1", "is active, not dead"},
		{"a canceled job", "job-c1", "is canceled, not dead"},
		{"an unknown job", "job-zz", "no job job-zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, err := f.orders.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.inspect(t, "requeue", "orders", tt.id)
			after, _ := f.orders.Stats(ctx)
			if tt.refusal != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refusal) {
					t.Fatalf("requeue %s: %v, want a refusal saying %q", tt.id, err, tt.refusal)
				}
				before.OldestPending, after.OldestPending = 0, 0
				if before != after {
					t.Errorf("a refused requeue changed the queue: %+v -> %+v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("requeue: %v\n%s", err, out)
			}
			job, err := f.orders.Job(ctx, tt.id)
			if err != nil || job.State != emq.StatePending {
				t.Errorf("after requeue the job is %+v, %v; want pending", job, err)
			}
			if after.Dead != before.Dead-1 || after.Pending != before.Pending+1 {
				t.Errorf("stats %+v -> %+v, want one job moved from dead to pending", before, after)
			}
		})
	}
}

func TestJobShowsItsFieldsAndATruncatedPayload(t *testing.T) {
	f := newFixture(t)
	payload := `{"note":"` + strings.Repeat("é", 600) + `"}`
	f.admit(t, "job-big", "alice", []byte(payload))
	f.admit(t, "job-binary", "alice", []byte{0xff, 0x00, 'x'})
	claimed := f.claim(t)

	out := f.mustInspect(t, "job", "orders", claimed.ID)
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, value, _ := strings.Cut(line, "  ")
		fields[strings.TrimSpace(name)] = strings.TrimSpace(value)
	}
	for name, want := range map[string]string{"id": "job-big", "state": "active", "group": "alice", "attempts": "1", "kind": kind} {
		if fields[name] != want {
			t.Errorf("%s = %q, want %q", name, fields[name], want)
		}
	}
	if _, err := time.Parse(timeLayout, fields["lease ends"]); err != nil {
		t.Errorf("lease ends = %q: %v", fields["lease ends"], err)
	}
	shown, note, found := strings.Cut(fields["payload"], " … ")
	if !found || !strings.HasPrefix(shown, `{"note":"éé`) || len(shown) > payloadShown || note != "(truncated; 1211 bytes in all)" {
		t.Errorf("payload = %q, want the first %d bytes as text and the full length", fields["payload"], payloadShown)
	}

	binary := f.mustInspect(t, "job", "orders", "job-binary")
	if !strings.Contains(binary, `"\xff\x00x"`) {
		t.Errorf("a binary payload is not quoted:\n%s", binary)
	}
	if _, err := f.inspect(t, "job", "orders", "job-none"); err == nil || !strings.Contains(err.Error(), "no job job-none") {
		t.Errorf("job of an unknown id: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"purge"}, `unknown command "purge"`},
		{[]string{"dead"}, "wrong number of arguments"},
		{[]string{"job", "orders"}, "wrong number of arguments"},
		{[]string{"requeue", "orders", "a", "b"}, "wrong number of arguments"},
		{[]string{"dead", "orders", "-limit", "-1"}, "must not be negative"},
		{[]string{"stats", "-bogus"}, "flag provided but not defined"},
		{[]string{"job", "orders", "{other}x"}, "not a job id"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if _, err := f.inspect(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("inspect %q: %v, want an error saying %q", tt.args, err, tt.want)
			}
		})
	}
	if out, err := f.inspect(t, "help"); err != nil || !strings.Contains(out, "requeue QUEUE ID") {
		t.Errorf("help: %v\n%s", err, out)
	}
}
