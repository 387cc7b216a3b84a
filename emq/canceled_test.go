package emq_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestCanceledJobsAreKeptUntilConfirmed: a job canceled by id or with its
// group is listed as unconfirmed, with its payload, even once the retention
// trimmed its finished record, until its cancel is confirmed; a cancel
// younger than asked for is not listed yet.
func TestCanceledJobsAreKeptUntilConfirmed(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, rdb := queueOn(t, testserver.QueueRedis(t), emq.WithRetention(1))
	for _, j := range []emq.Job{job("a", "g", ""), job("b", "g", ""), job("c", "h", ""), job("d", "h", "")} {
		if _, err := queue.Admit(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := queue.Cancel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.CancelGroup(ctx, "g", nil); err != nil {
		t.Fatal(err)
	}
	if err := queue.Cancel(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if trimmed, err := rdb.HExists(ctx, emq.FinishedKey("work"), "a").Result(); err != nil || trimmed {
		t.Fatalf("a's finished record outlived a retention of 1 (%v); the test needs it trimmed", err)
	}
	// Read while unconfirmed, from the kept row.
	if a, err := queue.Job(ctx, "a"); err != nil || a.State != "canceled" {
		t.Fatalf("Job(a) once its record was trimmed = %+v, %v; want it canceled", a, err)
	}

	unconfirmed := func(olderThan time.Duration) []string {
		t.Helper()
		jobs, err := queue.Unconfirmed(ctx, olderThan, 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, j := range jobs {
			if j.State != "canceled" || string(j.Payload) != `{"n":"`+j.ID+`"}` {
				t.Errorf("unconfirmed %s: state %s, payload %s; want canceled with its payload", j.ID, j.State, j.Payload)
			}
			ids = append(ids, j.ID)
		}
		slices.Sort(ids)
		return ids
	}
	for _, tt := range []struct {
		name      string
		confirm   []string
		olderThan time.Duration
		want      []string
	}{
		{"every cancel, the trimmed one too", nil, 0, []string{"a", "b", "c"}},
		{"none canceled an hour ago", nil, time.Hour, nil},
		{"a confirmed", []string{"a"}, 0, []string{"b", "c"}},
		{"the rest confirmed, and an id never canceled", []string{"b", "c", "d"}, 0, nil},
	} {
		if err := queue.ConfirmCanceled(ctx, tt.confirm...); err != nil {
			t.Fatal(err)
		}
		if got := unconfirmed(tt.olderThan); !slices.Equal(got, tt.want) {
			t.Errorf("%s: unconfirmed %v; want %v", tt.name, got, tt.want)
		}
	}
	if _, err := queue.Job(ctx, "a"); !errors.Is(err, emq.ErrNotFound) {
		t.Errorf("Job(a) once confirmed and trimmed: %v; want ErrNotFound", err)
	}
}
