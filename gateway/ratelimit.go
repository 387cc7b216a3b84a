package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/emq"
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
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16])
}

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

// rateLimitByAddress limits a public route, which has no API key, by the
// client's address: each address has a bucket of the same size as a key's.
// The address is the connection's, never a header a client can write, so
// behind a proxy every client shares the proxy's bucket (a proxy limits its
// own clients).
func (s *Server) rateLimitByAddress(next echo.HandlerFunc) echo.HandlerFunc {
	if !s.limiting() {
		return next
	}
	return func(c echo.Context) error {
		state(c).bucket = "addr:" + clientAddress(c)
		if err := s.takePermit(c); err != nil {
			return err
		}
		return next(c)
	}
}

// limiting is whether requests are rate limited at all: the buckets live
// with the placer's queue, so a gateway without one (serving reads only, in
// tests) limits nothing.
func (s *Server) limiting() bool { return s.placer != nil && s.config.RateLimitBurst > 0 }

// limit is the rate-limit bucket of every API key.
func (s *Server) limit() emq.Rate {
	return emq.Rate{Capacity: s.config.RateLimitBurst, PerSecond: s.config.RateLimitPerSecond}
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
	take, err := s.placer.TakePermit(c.Request().Context(), state(c).bucket, s.limit())
	if err != nil {
		s.metrics.rateLimitFailOpen.Inc()
		s.logger(c).Warn("rate limiter unavailable; request let through unlimited", "err", err)
		return nil
	}
	return s.answerTake(c, take)
}

// answerTake puts take on the answer as the RateLimit-* headers and, when
// the bucket was empty, returns the 429 refusal with its Retry-After.
func (s *Server) answerTake(c echo.Context, take emq.Take) error {
	limit := s.limit()
	// Assigned in their canonical form: Header.Set would canonicalize
	// "RateLimit-…" into a new string on every request.
	header := c.Response().Header()
	header[headerRateLimitLimit] = []string{s.limitText}
	header[headerRateLimitRemaining] = []string{strconv.Itoa(take.Remaining)}
	header[headerRateLimitReset] = []string{strconv.Itoa(wholeSeconds(take.ResetAfter, 0))}
	if take.Allowed {
		return nil
	}
	s.metrics.rateLimited.Inc()
	retry := wholeSeconds(take.RetryAfter, 1)
	header.Set("Retry-After", strconv.Itoa(retry))
	return &requestError{kind: kindRateLimited, detail: fmt.Sprintf(
		"this API key may make %d requests at once and %d a second; retry after %d s",
		limit.Capacity, limit.PerSecond, retry)}
}

// wholeSeconds rounds d up to whole seconds, and to at least least.
func wholeSeconds(d time.Duration, least int) int {
	seconds := int((d + time.Second - 1) / time.Second)
	return max(seconds, least)
}
