package placement

import (
	"context"
	"errors"
	"time"

	"github.com/ordergate/ordergate/emq"
)

// The rate-limit buckets live with the orders queue, so that a placement
// takes its permit in the admission's own script run (WithRateLimit) and a
// request that places nothing takes one from the same bucket
// (Placer.TakePermit). These are the buckets as placement's callers see
// them: the gateway reaches the queue only through placement, so emq's
// own types (emq.Rate, emq.Take, emq.RateLimitedError) stay behind it.

// Rate is a rate limit: up to Capacity requests at once (the burst),
// refilled at PerSecond permits a second. Both are whole numbers from 1 to
// MaxBucketSize.
type Rate struct {
	Capacity  int
	PerSecond int
}

// MaxBucketSize is the largest capacity and per-second rate of a Rate.
const MaxBucketSize = emq.MaxBucketSize

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

// RateLimitedError refuses a placement whose bucket was empty: nothing was
// admitted. Take says when to retry. It wraps the queue's refusal.
type RateLimitedError struct {
	Bucket string
	Take   Take
	queue  *emq.RateLimitedError
}

func (e *RateLimitedError) Error() string { return e.queue.Error() }

func (e *RateLimitedError) Unwrap() error { return e.queue }

// rateLimited is err as a *RateLimitedError when the queue refused the
// admission for want of a permit, and nil otherwise.
func rateLimited(err error) *RateLimitedError {
	// errors.AsType, not errors.As: the latter's target is on the heap,
	// every placement.
	limited, ok := errors.AsType[*emq.RateLimitedError](err)
	if !ok {
		return nil
	}
	return &RateLimitedError{Bucket: limited.Bucket, Take: Take(limited.Take), queue: limited}
}

// takeOf is the queue's take as placement's, nil for none.
func takeOf(take *emq.Take) *Take {
	if take == nil {
		return nil
	}
	t := Take(*take)
	return &t
}

// WithRateLimit makes the placement take a permit from the named bucket on
// its instrument's queue first, in the same script run as the admission:
// an empty bucket refuses the order with a *RateLimitedError and admits
// nothing. A replay spends its permit too. The bucket is the account's on
// that instrument: each instrument's queue is on a slot of its own.
func WithRateLimit(bucket string, limit Rate) PlaceOption {
	return func(job *emq.Job) { job.RateLimit = &emq.RateLimit{Bucket: bucket, Limit: emq.Rate(limit)} }
}

// TakePermit takes a permit from the named bucket on its shard of the
// limits queues (PermitShards, by a hash of the name): requests that place
// nothing draw on it, placements on their instrument's bucket of the same
// name (WithRateLimit).
func (p *Placer) TakePermit(ctx context.Context, bucket string, limit Rate) (Take, error) {
	take, err := p.queues.permitsFor(bucket).TakePermit(ctx, bucket, emq.Rate(limit))
	return Take(take), err
}
