package emq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a rate limit: up to Capacity requests at once (the burst),
// refilled at PerSecond permits a second. Both are whole numbers from 1 to
// 1,000,000.
type Rate struct {
	Capacity  int
	PerSecond int
}

// Take is the answer of a take from a rate-limit bucket.
type Take struct {
	// Allowed is true when a permit was taken.
	Allowed bool
	// Remaining is the whole permits left after this take.
	Remaining int
	// RetryAfter is how long until the next permit is available; 0 when one
	// is available now.
	RetryAfter time.Duration
	// ResetAfter is how long until the bucket is full again.
	ResetAfter time.Duration
}

// RateLimit names a rate-limit bucket of a queue and its size: the permit an
// admission takes first (Job.RateLimit), from the same bucket TakePermit
// takes from.
type RateLimit struct {
	Bucket string
	Limit  Rate
}

// ErrRateLimited matches every *RateLimitedError.
var ErrRateLimited = errors.New("emq: rate limited")

// RateLimitedError: the job's rate-limit bucket was empty, so it was not
// admitted and nothing was written. Take says when to retry.
type RateLimitedError struct {
	Bucket string
	Take   Take
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("emq: rate-limit bucket %s is empty; retry after %s", e.Bucket, e.Take.RetryAfter)
}

func (e *RateLimitedError) Unwrap() error { return ErrRateLimited }

// MaxBucketSize is the largest capacity and per-second rate of a Rate.
const MaxBucketSize = 1_000_000

// BucketKey is the Redis key of the queue's rate-limit bucket: a string under the
// queue's hash tag, so that an admission can take from it in the same
// script run.
func (q *Queue) BucketKey(bucket string) string { return q.namedKey("bucket:", bucket) }

// TakePermit takes one permit from the queue's named bucket, or refuses when it
// is empty, in one script (lua/ratelimit.lua) on the server's clock. It is
// the bucket an admission with Job.RateLimit takes from, so a caller can
// limit its requests that admit nothing (bad ones, reads) and those that do
// with one budget. A bucket nobody took from for as long as it takes to fill
// expires, so idle buckets cost no memory. The name is the caller's (an API
// key's id or hash, say); it must not contain braces or spaces, and should
// not contain secrets: it is part of a Redis key.
func (q *Queue) TakePermit(ctx context.Context, bucket string, limit Rate) (Take, error) {
	if err := validRateLimit(RateLimit{Bucket: bucket, Limit: limit}); err != nil {
		return Take{}, err
	}
	key := q.BucketKey(bucket)
	reply, err := q.client.permits.run(ctx, []string{key},
		strconv.Itoa(limit.Capacity), strconv.Itoa(limit.PerSecond)).Slice()
	if err != nil {
		return Take{}, fmt.Errorf("emq: take permit from %s: %w", key, err)
	}
	take, err := takeOf(reply)
	if err != nil {
		return Take{}, fmt.Errorf("emq: take permit from %s: %w", key, err)
	}
	return take, nil
}

func validRateLimit(r RateLimit) error {
	if r.Bucket == "" || strings.ContainsAny(r.Bucket, "{} ") {
		return fmt.Errorf("emq: rate limit bucket %q: want a non-empty name without braces or spaces", r.Bucket)
	}
	if l := r.Limit; l.Capacity < 1 || l.Capacity > MaxBucketSize || l.PerSecond < 1 || l.PerSecond > MaxBucketSize {
		return fmt.Errorf("emq: rate limit %+v: capacity and per-second rate must be from 1 to %d", l, MaxBucketSize)
	}
	return nil
}

// takeOf reads the four integers of a take (see token_bucket.lua).
func takeOf(reply []any) (Take, error) {
	if len(reply) != 4 {
		return Take{}, fmt.Errorf("unexpected permit take of %d values", len(reply))
	}
	var n [4]int64
	for i, value := range reply {
		integer, ok := value.(int64)
		if !ok {
			return Take{}, fmt.Errorf("unexpected permit take %v", reply)
		}
		n[i] = integer
	}
	return Take{
		Allowed:    n[0] == 1,
		Remaining:  int(n[1]),
		RetryAfter: time.Duration(n[2]) * time.Millisecond,
		ResetAfter: time.Duration(n[3]) * time.Millisecond,
	}, nil
}
