package emq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/lua"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func take(t *testing.T, queue *emq.Queue, bucket string, limit emq.Rate) emq.Take {
	t.Helper()
	got, err := queue.TakePermit(context.Background(), bucket, limit)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestTakeTokenAllowsTheBurstThenRefuses(t *testing.T) {
	queue, rdb := newQueue(t)
	limit := emq.Rate{Capacity: 3, PerSecond: 1}
	for i, wantRemaining := range []int{2, 1, 0} {
		got := take(t, queue, "burst", limit)
		if !got.Allowed || got.Remaining != wantRemaining {
			t.Fatalf("take %d: %+v, want allowed with %d remaining", i, got, wantRemaining)
		}
		if wantRemaining > 0 && got.RetryAfter != 0 {
			t.Errorf("take %d: retry after %v with permits left", i, got.RetryAfter)
		}
	}
	got := take(t, queue, "burst", limit)
	if got.Allowed || got.Remaining != 0 {
		t.Fatalf("take past the burst: %+v, want refused", got)
	}
	if got.RetryAfter <= 0 || got.RetryAfter > time.Second {
		t.Errorf("retry after %v, want (0, 1s] at 1 permit/s", got.RetryAfter)
	}
	if got.ResetAfter <= 2*time.Second || got.ResetAfter > 3*time.Second {
		t.Errorf("reset after %v, want (2s, 3s] for 3 permits at 1/s", got.ResetAfter)
	}
	// The bucket lives under the queue's hash tag and expires once full again.
	key := queue.BucketKey("burst")
	if !strings.HasPrefix(key, "emq:{"+queue.Name()+"}:") {
		t.Errorf("bucket key %q is not under the queue's hash tag", key)
	}
	ttl, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil || ttl <= 0 || ttl > 4*time.Second {
		t.Errorf("bucket TTL %v, %v; want at most the time to fill plus 1s", ttl, err)
	}
}

func TestTakeTokenRefillsOverTime(t *testing.T) {
	queue, _ := newQueue(t)
	limit := emq.Rate{Capacity: 2, PerSecond: 20} // a permit every 50 ms
	take(t, queue, "refill", limit)
	take(t, queue, "refill", limit)
	refused := take(t, queue, "refill", limit)
	if refused.Allowed {
		t.Fatalf("third take: %+v, want refused", refused)
	}
	if refused.RetryAfter <= 0 || refused.RetryAfter > 50*time.Millisecond {
		t.Fatalf("retry after %v, want (0, 50ms]", refused.RetryAfter)
	}
	time.Sleep(refused.RetryAfter + 10*time.Millisecond)
	if got := take(t, queue, "refill", limit); !got.Allowed {
		t.Errorf("after waiting Retry-After: %+v, want allowed", got)
	}
	time.Sleep(150 * time.Millisecond) // more than enough to fill: never past capacity
	for i, want := range []int{1, 0} {
		if got := take(t, queue, "refill", limit); !got.Allowed || got.Remaining != want {
			t.Errorf("take %d after the bucket filled: %+v, want allowed with %d left", i, got, want)
		}
	}
	if got := take(t, queue, "refill", limit); got.Allowed {
		t.Errorf("refill went past capacity: %+v", got)
	}
}

func TestTakeTokenBucketsAreIndependent(t *testing.T) {
	queue, _ := newQueue(t)
	limit := emq.Rate{Capacity: 1, PerSecond: 1}
	if got := take(t, queue, "a", limit); !got.Allowed {
		t.Fatalf("a: %+v", got)
	}
	if got := take(t, queue, "a", limit); got.Allowed {
		t.Fatalf("a again: %+v, want refused", got)
	}
	if got := take(t, queue, "b", limit); !got.Allowed {
		t.Errorf("b after a was emptied: %+v, want allowed", got)
	}
}

func TestTakeTokenRefusesBadArguments(t *testing.T) {
	testserver.Parallel(t)
	queue, rdb := newQueue(t)
	ctx := context.Background()
	for _, c := range []struct {
		bucket string
		limit  emq.Rate
	}{
		{"", emq.Rate{Capacity: 1, PerSecond: 1}},
		{"a}b", emq.Rate{Capacity: 1, PerSecond: 1}},
		{"a b", emq.Rate{Capacity: 1, PerSecond: 1}},
		{"a", emq.Rate{Capacity: 0, PerSecond: 1}},
		{"a", emq.Rate{Capacity: 1, PerSecond: 0}},
		{"a", emq.Rate{Capacity: 1_000_001, PerSecond: 1}},
	} {
		if _, err := queue.TakePermit(ctx, c.bucket, c.limit); err == nil {
			t.Errorf("TakePermit(%q, %+v) succeeded, want refused", c.bucket, c.limit)
		}
	}
	// The script checks its arguments too, for callers that skip the client.
	for _, args := range [][]any{{"0", "1"}, {"1", "1.5"}, {"1", "-1"}, {"1", "1000001"}, {"1", ""}} {
		err := rdb.Eval(ctx, lua.RateLimit, []string{queue.BucketKey("args")}, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERLARG") {
			t.Errorf("script with ARGV %q: %v, want ERLARG", args, err)
		}
	}
}

// limitedJob is a job that takes a permit from bucket first.
func limitedJob(id, dedup, bucket string, limit emq.Rate) emq.Job {
	return emq.Job{ID: id, Kind: "test.job", Group: "g", DedupKey: dedup, Fingerprint: "fp-" + dedup,
		RateLimit: &emq.RateLimit{Bucket: bucket, Limit: limit}}
}

// An admission with a rate limit takes its permit in the same script run: the
// burst is admitted, the next job is refused with a *RateLimitedError and
// nothing written, and after Retry-After it is admitted.
func TestAdmitTakesItsTokenFirst(t *testing.T) {
	queue, _ := newQueue(t)
	ctx := context.Background()
	// A token a quarter second: the three admits below must fall within
	// one refill, which -race on a loaded box can stretch past 50 ms.
	limit := emq.Rate{Capacity: 2, PerSecond: 4}
	refill := time.Second / time.Duration(limit.PerSecond)
	for i, wantRemaining := range []int{1, 0} {
		id := fmt.Sprintf("J%d", i)
		admission, err := queue.Admit(ctx, limitedJob(id, id, "k", limit))
		if err != nil {
			t.Fatalf("admit %s: %v", id, err)
		}
		if admission.Duplicate || admission.ID != id || admission.Take == nil || !admission.Take.Allowed || admission.Take.Remaining != wantRemaining {
			t.Fatalf("admit %s: %+v (permit %+v), want admitted with %d permits left", id, admission, admission.Take, wantRemaining)
		}
	}
	_, err := queue.Admit(ctx, limitedJob("J2", "J2", "k", limit))
	var limited *emq.RateLimitedError
	if !errors.As(err, &limited) || !errors.Is(err, emq.ErrRateLimited) {
		t.Fatalf("admit past the burst: %v, want a *RateLimitedError", err)
	}
	if limited.Take.Allowed || limited.Take.RetryAfter <= 0 || limited.Take.RetryAfter > refill {
		t.Errorf("refusal %+v, want not allowed, retry within (0, %v]", limited.Take, refill)
	}
	if _, err := queue.Job(ctx, "J2"); !errors.Is(err, emq.ErrNotFound) {
		t.Errorf("refused job: %v, want no job written", err)
	}
	if pending, err := queue.Pending(ctx); err != nil || pending != 2 {
		t.Errorf("pending %d, %v; want the two admitted", pending, err)
	}
	time.Sleep(limited.Take.RetryAfter + 10*time.Millisecond)
	admission, err := queue.Admit(ctx, limitedJob("J2", "J2", "k", limit))
	if err != nil || admission.Duplicate {
		t.Errorf("the refused job after Retry-After: %+v, %v; want admitted, not a duplicate", admission, err)
	}
}

// Admission and TakePermit draw on one bucket, and a duplicate spends its
// permit like any other request.
func TestAdmitSharesTheBucketWithTakeToken(t *testing.T) {
	queue, _ := newQueue(t)
	ctx := context.Background()
	limit := emq.Rate{Capacity: 3, PerSecond: 1}
	if got := take(t, queue, "shared", limit); !got.Allowed || got.Remaining != 2 {
		t.Fatalf("take: %+v", got)
	}
	if _, err := queue.Admit(ctx, limitedJob("A1", "same", "shared", limit)); err != nil {
		t.Fatal(err)
	}
	replay, err := queue.Admit(ctx, limitedJob("A2", "same", "shared", limit))
	if err != nil || !replay.Duplicate || replay.ID != "A1" || replay.Take == nil || replay.Take.Remaining != 0 {
		t.Fatalf("duplicate: %+v (permit %+v), %v; want A1 with the last permit spent", replay, replay.Take, err)
	}
	if got := take(t, queue, "shared", limit); got.Allowed {
		t.Errorf("take after the admissions emptied the bucket: %+v, want refused", got)
	}
	if _, err := queue.Admit(ctx, limitedJob("A3", "other", "other-bucket", limit)); err != nil {
		t.Errorf("another bucket: %v", err)
	}
	// Without a rate limit an admission takes no permit and reports none.
	plain, err := queue.Admit(ctx, emq.Job{ID: "A4", Kind: "test.job", Group: "g"})
	if err != nil || plain.Take != nil {
		t.Errorf("admission without a rate limit: %+v, %v; want admitted with no permit", plain, err)
	}
}

func TestAdmitRefusesABadRateLimit(t *testing.T) {
	testserver.Parallel(t)
	queue, _ := newQueue(t)
	for _, limit := range []emq.RateLimit{
		{Bucket: "", Limit: emq.Rate{Capacity: 1, PerSecond: 1}},
		{Bucket: "a{b", Limit: emq.Rate{Capacity: 1, PerSecond: 1}},
		{Bucket: "a", Limit: emq.Rate{Capacity: 0, PerSecond: 1}},
	} {
		job := emq.Job{ID: "B1", Kind: "test.job", Group: "g", RateLimit: &limit}
		if _, err := queue.Admit(context.Background(), job); err == nil || errors.Is(err, emq.ErrRateLimited) {
			t.Errorf("rate limit %+v: %v, want refused as invalid", limit, err)
		}
	}
	if pending, err := queue.Pending(context.Background()); err != nil || pending != 0 {
		t.Errorf("pending %d, %v; want nothing admitted", pending, err)
	}
}
