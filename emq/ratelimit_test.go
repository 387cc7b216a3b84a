package emq_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/lua"
)

func rateLimitClient(t *testing.T) *emq.Client {
	t.Helper()
	client, err := emq.Connect(context.Background(), testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func take(t *testing.T, client *emq.Client, bucket string, limit emq.TokenBucket) emq.TokenTake {
	t.Helper()
	got, err := client.TakeToken(context.Background(), bucket, limit)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestTakeTokenAllowsTheBurstThenRefuses(t *testing.T) {
	client := rateLimitClient(t)
	limit := emq.TokenBucket{Capacity: 3, PerSecond: 1}
	for i, wantRemaining := range []int{2, 1, 0} {
		got := take(t, client, "burst", limit)
		if !got.Allowed || got.Remaining != wantRemaining {
			t.Fatalf("take %d: %+v, want allowed with %d remaining", i, got, wantRemaining)
		}
		if wantRemaining > 0 && got.RetryAfter != 0 {
			t.Errorf("take %d: retry after %v with tokens left", i, got.RetryAfter)
		}
	}
	got := take(t, client, "burst", limit)
	if got.Allowed || got.Remaining != 0 {
		t.Fatalf("take past the burst: %+v, want refused", got)
	}
	if got.RetryAfter <= 0 || got.RetryAfter > time.Second {
		t.Errorf("retry after %v, want (0, 1s] at 1 token/s", got.RetryAfter)
	}
	if got.ResetAfter <= 2*time.Second || got.ResetAfter > 3*time.Second {
		t.Errorf("reset after %v, want (2s, 3s] for 3 tokens at 1/s", got.ResetAfter)
	}
	// The bucket lives under its own hash tag and expires once full again.
	ttl, err := client.Redis().PTTL(context.Background(), emq.RateLimitKey("burst")).Result()
	if err != nil || ttl <= 0 || ttl > 4*time.Second {
		t.Errorf("bucket TTL %v, %v; want at most the time to fill plus 1s", ttl, err)
	}
}

func TestTakeTokenRefillsOverTime(t *testing.T) {
	client := rateLimitClient(t)
	limit := emq.TokenBucket{Capacity: 2, PerSecond: 20} // a token every 50 ms
	take(t, client, "refill", limit)
	take(t, client, "refill", limit)
	refused := take(t, client, "refill", limit)
	if refused.Allowed {
		t.Fatalf("third take: %+v, want refused", refused)
	}
	if refused.RetryAfter <= 0 || refused.RetryAfter > 50*time.Millisecond {
		t.Fatalf("retry after %v, want (0, 50ms]", refused.RetryAfter)
	}
	time.Sleep(refused.RetryAfter + 10*time.Millisecond)
	if got := take(t, client, "refill", limit); !got.Allowed {
		t.Errorf("after waiting Retry-After: %+v, want allowed", got)
	}
	time.Sleep(150 * time.Millisecond) // more than enough to fill: never past capacity
	for i, want := range []int{1, 0} {
		if got := take(t, client, "refill", limit); !got.Allowed || got.Remaining != want {
			t.Errorf("take %d after the bucket filled: %+v, want allowed with %d left", i, got, want)
		}
	}
	if got := take(t, client, "refill", limit); got.Allowed {
		t.Errorf("refill went past capacity: %+v", got)
	}
}

func TestTakeTokenBucketsAreIndependent(t *testing.T) {
	client := rateLimitClient(t)
	limit := emq.TokenBucket{Capacity: 1, PerSecond: 1}
	if got := take(t, client, "a", limit); !got.Allowed {
		t.Fatalf("a: %+v", got)
	}
	if got := take(t, client, "a", limit); got.Allowed {
		t.Fatalf("a again: %+v, want refused", got)
	}
	if got := take(t, client, "b", limit); !got.Allowed {
		t.Errorf("b after a was emptied: %+v, want allowed", got)
	}
}

func TestTakeTokenRefusesBadArguments(t *testing.T) {
	client := rateLimitClient(t)
	ctx := context.Background()
	for _, c := range []struct {
		bucket string
		limit  emq.TokenBucket
	}{
		{"", emq.TokenBucket{Capacity: 1, PerSecond: 1}},
		{"a}b", emq.TokenBucket{Capacity: 1, PerSecond: 1}},
		{"a", emq.TokenBucket{Capacity: 0, PerSecond: 1}},
		{"a", emq.TokenBucket{Capacity: 1, PerSecond: 0}},
		{"a", emq.TokenBucket{Capacity: 1_000_001, PerSecond: 1}},
	} {
		if _, err := client.TakeToken(ctx, c.bucket, c.limit); err == nil {
			t.Errorf("TakeToken(%q, %+v) succeeded, want refused", c.bucket, c.limit)
		}
	}
	// The script checks its arguments too, for callers that skip the client.
	for _, args := range [][]any{{"0", "1"}, {"1", "1.5"}, {"1", "-1"}, {"1", "1000001"}, {"1", ""}} {
		err := client.Redis().Eval(ctx, lua.RateLimit, []string{emq.RateLimitKey("args")}, args...).Err()
		if err == nil || !strings.HasPrefix(err.Error(), "ERLARG") {
			t.Errorf("script with ARGV %q: %v, want ERLARG", args, err)
		}
	}
}
