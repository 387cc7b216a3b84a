package emq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestDeadCount(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, _ := newQueue(t)
	ids := admitN(t, queue, "g", 3)
	claims, err := queue.Claim(ctx, len(ids), time.Minute)
	if err != nil || len(claims) != len(ids) {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	for _, claim := range claims[:2] {
		if err := queue.Bury(ctx, claim.ID, claim.Token, errors.New("refused")); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := queue.DeadCount(ctx); err != nil || n != 2 {
		t.Fatalf("DeadCount = %d, %v; want 2", n, err)
	}
}

// TestStateTime: each timed state answers with the time its move set, and a
// job that moved on is not found in the state it left.
func TestStateTime(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, _ := newQueue(t)
	ids := admitN(t, queue, "g", 2)
	claims, err := queue.Claim(ctx, len(ids), time.Minute)
	if err != nil || len(claims) != len(ids) {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	stateTime := func(id, state string) time.Time {
		t.Helper()
		at, err := queue.StateTime(ctx, id, state)
		if err != nil {
			t.Fatalf("StateTime(%s, %s): %v", id, state, err)
		}
		return at
	}
	if at := stateTime(claims[0].ID, emq.StateActive); !at.Equal(claims[0].Deadline) {
		t.Errorf("active time = %s, want the lease deadline %s", at, claims[0].Deadline)
	}

	policy := emq.RetryPolicy{MaxAttempts: 5, BaseDelay: time.Minute, MaxDelay: time.Hour}
	retried, err := queue.Retry(ctx, claims[0].ID, claims[0].Token, errors.New("busy"), policy)
	if err != nil || retried.Dead {
		t.Fatalf("retry: %+v, %v", retried, err)
	}
	if at := stateTime(claims[0].ID, emq.StateDelayed); !at.Equal(retried.At) {
		t.Errorf("delayed time = %s, want the retry's due time %s", at, retried.At)
	}
	if _, err := queue.StateTime(ctx, claims[0].ID, emq.StateActive); !errors.Is(err, emq.ErrNotFound) {
		t.Errorf("active time of a delayed job: %v, want ErrNotFound", err)
	}

	before := time.Now().Add(-time.Second)
	if err := queue.Bury(ctx, claims[1].ID, claims[1].Token, errors.New("refused")); err != nil {
		t.Fatal(err)
	}
	if at := stateTime(claims[1].ID, emq.StateDead); at.Before(before) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("dead time = %s, want about now", at)
	}
	if _, err := queue.StateTime(ctx, claims[1].ID, emq.StatePending); err == nil || errors.Is(err, emq.ErrNotFound) {
		t.Errorf("pending time: %v, want an error saying pending jobs keep no time", err)
	}
}

// TestLeases: every active job is listed once with its lease deadline, and a
// renewal shows.
func TestLeases(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, _ := newQueue(t)
	if leases, err := queue.Leases(ctx); err != nil || len(leases) != 0 {
		t.Fatalf("leases of an idle queue = %v, %v", leases, err)
	}
	ids := admitN(t, queue, "g", 4)
	claims, err := queue.Claim(ctx, 3, time.Minute)
	if err != nil || len(claims) != 3 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	renewed, err := queue.Extend(ctx, claims[0].ID, claims[0].Token, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{claims[0].ID: renewed, claims[1].ID: claims[1].Deadline, claims[2].ID: claims[2].Deadline}
	leases, err := queue.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != len(want) {
		t.Fatalf("leases = %v, want %d (of %d jobs, 3 claimed)", leases, len(want), len(ids))
	}
	for i, lease := range leases {
		if !lease.Deadline.Equal(want[lease.ID]) {
			t.Errorf("lease of %s ends %s, want %s", lease.ID, lease.Deadline, want[lease.ID])
		}
		if i > 0 && lease.Deadline.Before(leases[i-1].Deadline) {
			t.Errorf("leases not earliest first: %v", leases)
		}
	}
}
