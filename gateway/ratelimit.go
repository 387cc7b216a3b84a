package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/emq"
)

// RateLimiter takes a token from a named token bucket; *emq.Client is one.
type RateLimiter interface {
	TakeToken(ctx context.Context, bucket string, limit emq.TokenBucket) (emq.TokenTake, error)
}

// The rate limit headers (draft-ietf-httpapi-ratelimit-headers).
const (
	headerRateLimitLimit     = "RateLimit-Limit"
	headerRateLimitRemaining = "RateLimit-Remaining"
	headerRateLimitReset     = "RateLimit-Reset"
)

// keyBucket names an API key's token bucket: the first 128 bits of the key's
// SHA-256 in hex, a prefix of the key_hash it is stored under, so an operator
// can find the key behind a bucket. The key itself never reaches Redis or a
// log.
func keyBucket(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "key:" + hex.EncodeToString(sum[:16])
}

// rateLimit takes a token from the authenticated key's bucket, and refuses
// the request with 429 when the bucket is empty. Every answer it lets through
// or refuses carries the RateLimit-* headers.
//
// It fails open: when the bucket's store (Redis) does not answer, the
// request goes through unlimited, logged and counted in
// rate_limit_fail_open_total. An exchange would rather keep serving reads
// (orders from PostgreSQL) than refuse everything because the limiter is
// down; placements need Redis anyway and answer 503 on their own.
func (s *Server) rateLimit(next echo.HandlerFunc) echo.HandlerFunc {
	if s.limiter == nil || s.config.RateLimitBurst <= 0 {
		return next
	}
	limit := emq.TokenBucket{Capacity: s.config.RateLimitBurst, PerSecond: s.config.RateLimitPerSecond}
	return func(c echo.Context) error {
		bucket, _ := c.Get(contextBucket).(string)
		take, err := s.limiter.TakeToken(c.Request().Context(), bucket, limit)
		if err != nil {
			s.metrics.rateLimitFailOpen.Inc()
			logger(c).Warn("rate limiter unavailable; request let through unlimited", "err", err)
			return next(c)
		}
		header := c.Response().Header()
		header.Set(headerRateLimitLimit, strconv.Itoa(limit.Capacity))
		header.Set(headerRateLimitRemaining, strconv.Itoa(take.Remaining))
		header.Set(headerRateLimitReset, strconv.Itoa(wholeSeconds(take.ResetAfter, 0)))
		if !take.Allowed {
			s.metrics.rateLimited.Inc()
			retry := wholeSeconds(take.RetryAfter, 1)
			header.Set("Retry-After", strconv.Itoa(retry))
			return &requestError{kind: kindRateLimited, detail: fmt.Sprintf(
				"this API key may make %d requests at once and %d a second; retry after %d s",
				limit.Capacity, limit.PerSecond, retry)}
		}
		return next(c)
	}
}

// wholeSeconds rounds d up to whole seconds, and to at least least.
func wholeSeconds(d time.Duration, least int) int {
	seconds := int((d + time.Second - 1) / time.Second)
	return max(seconds, least)
}
