package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

// The rate limit headers (draft-ietf-httpapi-ratelimit-headers), in Go's
// canonical header form; on the wire header names are case-insensitive.
const (
	headerRateLimitLimit     = "Ratelimit-Limit"
	headerRateLimitRemaining = "Ratelimit-Remaining"
	headerRateLimitReset     = "Ratelimit-Reset"
)

// keyBucketPrefix and the key's digest name an API key's rate-limit bucket.
const keyBucketPrefix = "key:"

// keyDigest is what an API key is named by in Redis, its rate-limit bucket
// and its signatures' records: the first 128 bits of the key's SHA-256 in
// hex, a prefix of the key_hash it is stored under, so an operator can find
// the key behind a bucket. The key itself never reaches Redis or a log.
func keyDigest(key string) string {
	var buf [96]byte // hashed from the stack, as orders.KeyHash does
	sum := sha256.Sum256(append(buf[:0], key...))
	return hex.EncodeToString(sum[:keyDigestBytes])
}

// keyDigestBytes is how much of a key's SHA-256 its digest holds.
const keyDigestBytes = 16

// rateLimit takes a permit from the authenticated key's bucket before the
// request is served, and refuses it with 429 when the bucket is empty. Every
// answer it lets through or refuses carries the RateLimit-* headers.
// Placements take theirs in the admission instead (placeOrder).
func (s *Server) rateLimit(next echo.HandlerFunc) echo.HandlerFunc {
	if !s.limiting() {
		return next
	}
	return func(c echo.Context) error {
		if err := s.takePermit(c); err != nil {
			return err
		}
		return next(c)
	}
}

// addressBucketPrefix and limitAddress name a client address's bucket.
const addressBucketPrefix = "addr:"

// rateLimitByAddress limits a public route, which has no API key, by the
// client's address (limitAddress: an IPv6 client by its /64): each address
// has a bucket of the same size as a key's, shared by the public routes
// (the instruments, the book, /healthz and /readyz): even one served from
// memory costs a request's work and its access log line.
// The address is the connection's, never a header a client can write, so
// behind a proxy every client shares the proxy's bucket (a proxy limits its
// own clients).
func (s *Server) rateLimitByAddress(next echo.HandlerFunc) echo.HandlerFunc {
	if !s.limiting() {
		return next
	}
	return func(c echo.Context) error {
		take, ok := s.takeFrom(c, addressBucketPrefix+limitAddress(c), s.limit())
		if ok {
			limit := s.limit()
			if err := s.answerTakeAs(c, take, fmt.Sprintf("requests without an API key (the instruments, the book, /healthz, /readyz) may come %d at once and %d a second from one client address",
				limit.Capacity, limit.PerSecond)); err != nil {
				return err
			}
		}
		return next(c)
	}
}

// limiting is whether requests are rate limited at all: the buckets live
// with the placer's queue, so a gateway without one (serving reads only, in
// tests) limits nothing.
func (s *Server) limiting() bool { return s.placer != nil && s.config.RateLimitBurst > 0 }

// limit is the rate-limit bucket of every API key.
func (s *Server) limit() placement.Rate {
	return placement.Rate{Capacity: s.config.RateLimitBurst, PerSecond: s.config.RateLimitPerSecond}
}

// takePermit takes a permit from the key's bucket of the orders queue, the
// bucket placements take from in their admission, and answers it: nil when
// the request may go on, the 429 refusal when not.
//
// It fails open: when the bucket's store (Redis) does not answer, the
// request goes through unlimited, logged and counted in
// rate_limit_fail_open_total. An exchange would rather keep serving reads
// (orders from PostgreSQL) than refuse everything because the limiter is
// down; placements need Redis anyway and answer 503 on their own.
func (s *Server) takePermit(c echo.Context) error {
	if !s.limiting() {
		return nil
	}
	take, ok := s.takeFrom(c, state(c).bucket, s.limit())
	if !ok {
		return nil
	}
	return s.answerTake(c, take)
}

// takeFrom takes a permit for the request from the named bucket of rate.
// ok is false when the limiter did not answer: the request then goes on
// unlimited (takePermit says why), logged and counted.
func (s *Server) takeFrom(c echo.Context, bucket string, rate placement.Rate) (take placement.Take, ok bool) {
	ctx := c.Request().Context()
	take, err := s.placer.TakePermit(ctx, bucket, rate)
	if err != nil && ctx.Err() != nil {
		// The request's own deadline (or its client's leaving) ended the
		// take, not the limiter: nothing to count as its outage. What the
		// request does next fails on the same context.
		return placement.Take{}, false
	}
	if err != nil {
		s.metrics.rateLimitFailOpen.Inc()
		s.requestLogger(c).Warn("rate limiter unavailable; request let through unlimited", "bucket", bucket, "err", err)
		return placement.Take{}, false
	}
	return take, true
}

// overLimit is the 429 refusal of a request whose bucket was empty, with
// its Retry-After; detail says which limit, and the refusal adds when to
// retry.
func (s *Server) overLimit(c echo.Context, take placement.Take, detail string) error {
	s.metrics.rateLimited.Inc()
	retry := wholeSeconds(take.RetryAfter, 1)
	c.Response().Header().Set("Retry-After", strconv.Itoa(retry))
	return &requestError{kind: kindRateLimited, detail: fmt.Sprintf("%s; retry after %d s", detail, retry)}
}

// refusedBucketPrefix and the key's digest name the bucket a key's
// refused requests take from.
const refusedBucketPrefix = "refused:"

// limitRefusal charges the refusal of a request whose key was found (a
// signature that does not check out, a body over the limit or unreadable
// while it is read for the signature, a scope the key lacks) to the key's
// bucket of refusals, the size of its own, and answers 429 instead once
// that bucket is empty: such requests never reach the key's own limit,
// and would otherwise come as fast as a sender likes (one holding a
// signed key's bearer key without its secret, or a read-only key posting
// orders). The bucket is apart from the key's own, so whoever sends them
// cannot spend the owner's requests. Any other error passes as it is.
func (s *Server) limitRefusal(c echo.Context, digest string, refusal error) error {
	if !s.limiting() || !keyRefusal(refusal) {
		return refusal
	}
	take, ok := s.takeFrom(c, refusedBucketPrefix+digest, s.limit())
	if !ok || take.Allowed {
		return refusal
	}
	limit := s.limit()
	problem, _ := problemFor(refusal)
	return s.overLimit(c, take, fmt.Sprintf(
		"this API key's refused requests (bad signatures, over-size bodies, missing scopes) are limited to %d at once and %d a second, apart from its own limit; this one was refused as %s: %s",
		limit.Capacity, limit.PerSecond, problem.Type, problem.Detail))
}

// keyRefusal is whether err refuses what a found key sent (its signature,
// its body as read for the signature, its scope), not a dependency's
// failure: every such refusal is the gateway's own requestError, or a
// missing scope.
func keyRefusal(err error) bool {
	var request *requestError
	var missingScope *orders.MissingScopeError
	return errors.As(err, &missingScope) || errors.As(err, &request)
}

// answerTake puts take on the answer as the RateLimit-* headers and, when
// the bucket was empty, returns the 429 refusal with its Retry-After.
func (s *Server) answerTake(c echo.Context, take placement.Take) error {
	if take.Allowed {
		return s.answerTakeAs(c, take, "") // no refusal: no detail to spell
	}
	limit := s.limit()
	return s.answerTakeAs(c, take, fmt.Sprintf("this API key may make %d requests at once and %d a second", limit.Capacity, limit.PerSecond))
}

// answerTakeAs is answerTake, detail naming the limit in a refusal.
func (s *Server) answerTakeAs(c echo.Context, take placement.Take, detail string) error {
	// Assigned in their canonical form: Header.Set would canonicalize
	// "RateLimit-…" into a new string on every request. The three values
	// share one allocation, each capped so an Add cannot write into the next.
	header := c.Response().Header()
	values := []string{s.limitText, strconv.Itoa(take.Remaining), strconv.Itoa(wholeSeconds(take.ResetAfter, 0))}
	header[headerRateLimitLimit] = values[0:1:1]
	header[headerRateLimitRemaining] = values[1:2:2]
	header[headerRateLimitReset] = values[2:3:3]
	if take.Allowed {
		return nil
	}
	return s.overLimit(c, take, detail)
}

// wholeSeconds rounds d up to whole seconds, and to at least least.
func wholeSeconds(d time.Duration, least int) int {
	seconds := int((d + time.Second - 1) / time.Second)
	return max(seconds, least)
}
