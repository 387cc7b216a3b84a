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

// TestMemoryUsage: each structure a pending or finished job takes room in is
// counted, and nothing is counted for one that holds no job.
func TestMemoryUsage(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	queue, _ := newQueue(t)
	admitN(t, queue, "g", 20)
	pending, err := queue.MemoryUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pending.JobRows <= 0 || pending.JobRowsEncoding == "" || pending.Dedup <= 0 || pending.LaneLists <= 0 || pending.LaneIndex <= 0 {
		t.Errorf("pending usage = %+v, want job rows, dedup, lane lists and lane index counted", pending)
	}
	if pending.Finished != 0 || pending.Done != 0 {
		t.Errorf("pending usage = %+v, want nothing finished", pending)
	}

	claims, err := queue.Claim(ctx, 20, time.Minute)
	if err != nil || len(claims) != 20 {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	completions := make([]emq.Completion, len(claims))
	for i, claim := range claims {
		completions[i] = emq.Completion{ID: claim.ID, Token: claim.Token}
	}
	if err := errors.Join(queue.CompleteMany(ctx, completions)...); err != nil {
		t.Fatal(err)
	}
	finished, err := queue.MemoryUsage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if finished.Finished <= 0 || finished.Done <= 0 || finished.LaneLists != 0 {
		t.Errorf("finished usage = %+v, want records and done index counted, no lane lists", finished)
	}
}

// TestPurge: every key of the queue goes, and no key of another queue, even
// one whose name the first's would match as a pattern.
func TestPurge(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	_, rdb := newQueue(t)
	client, err := emq.Connect(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	purged, kept := client.Queue("pu*"), client.Queue("purge")
	for _, queue := range []*emq.Queue{purged, kept} {
		if err := queue.Declare(ctx, "test.job"); err != nil {
			t.Fatal(err)
		}
		admitN(t, queue, "g", 3)
		if _, err := queue.Claim(ctx, 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	keptBefore := testserver.Keys(t, rdb, "emq:{purge}:*")
	if err := purged.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if left := testserver.Keys(t, rdb, `emq:{pu\*}:*`); len(left) != 0 {
		t.Errorf("keys left after the purge: %v", left)
	}
	if after := testserver.Keys(t, rdb, "emq:{purge}:*"); !slices.Equal(after, keptBefore) {
		t.Errorf("the other queue's keys went from %v to %v", keptBefore, after)
	}
	if _, err := purged.Admit(ctx, job("J1", "g", "")); !errors.Is(err, emq.ErrKind) {
		t.Errorf("admit after the purge: %v, want ErrKind (the declared kinds went too)", err)
	}
	names, err := client.Queues(ctx)
	if err != nil || !slices.Contains(names, "pu*") {
		t.Errorf("queues after the purge = %v, %v; want pu* still listed", names, err)
	}
}
