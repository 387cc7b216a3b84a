package emq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TokenBucket is a rate limit: up to Capacity requests at once (the burst),
// refilled at PerSecond tokens a second. Both are whole numbers from 1 to
// 1,000,000.
type TokenBucket struct {
	Capacity  int
	PerSecond int
}

// TokenTake is the answer of TakeToken.
type TokenTake struct {
	// Allowed is true when a token was taken.
	Allowed bool
	// Remaining is the whole tokens left after this take.
	Remaining int
	// RetryAfter is how long until the next token is available; 0 when one
	// is available now.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
}

const maxBucketSize = 1_000_000

// RateLimitKey is the Redis key of bucket: one hash per bucket, under its own
// hash tag, so buckets spread over a cluster's slots.
func RateLimitKey(bucket string) string { return "ratelimit:{" + bucket + "}" }

// TakeToken takes one token from the named bucket, or refuses when it is
// empty, in one script (lua/ratelimit.lua) on the server's clock. A bucket
// nobody took from for as long as it takes to fill expires, so idle buckets
// cost no memory. The name is the caller's (an API key's id or hash, say);
// it must not contain braces, and should not contain secrets: it is part of
// a Redis key.
func (c *Client) TakeToken(ctx context.Context, bucket string, limit TokenBucket) (TokenTake, error) {
	if bucket == "" || strings.ContainsAny(bucket, "{}") {
		return TokenTake{}, fmt.Errorf("emq: rate limit bucket %q: want a non-empty name without braces", bucket)
	}
	if limit.Capacity < 1 || limit.Capacity > maxBucketSize || limit.PerSecond < 1 || limit.PerSecond > maxBucketSize {
		return TokenTake{}, fmt.Errorf("emq: rate limit %+v: capacity and per-second rate must be from 1 to %d", limit, maxBucketSize)
	}
	key := RateLimitKey(bucket)
	reply, err := c.tokens.run(ctx, []string{key},
		strconv.Itoa(limit.Capacity), strconv.Itoa(limit.PerSecond)).Int64Slice()
	if err != nil {
		return TokenTake{}, fmt.Errorf("emq: take token from %s: %w", key, err)
	}
	if len(reply) != 4 {
		return TokenTake{}, fmt.Errorf("emq: take token from %s: unexpected reply of %d values", key, len(reply))
	}
	return TokenTake{
		Allowed:    reply[0] == 1,
		Remaining:  int(reply[1]),
		RetryAfter: time.Duration(reply[2]) * time.Millisecond,
		ResetAfter: time.Duration(reply[3]) * time.Millisecond,
	}, nil
}
