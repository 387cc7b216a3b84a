package gateway

import (
	"fmt"
	"net"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/emq"
)

// A request with no API key, or with a key the gateway does not recognize
// (a made-up one, one it never saw or forgot), may cost PostgreSQL a key
// lookup. Such requests are limited before the lookup, per client address
// and all of them together, so a flood of made-up keys costs a bounded
// number of lookups; a request with a key the cache recognizes (active when
// last looked up) passes at once and meets only its key's own limit.

// lookupBucketAll is the bucket of all lookups together; a client address's
// is "lookup:" and the address.
const lookupBucketAll = "lookup:*"

// lookupAddressRate is the least one client address's lookups may go:
// its bucket is an API key's, or this when that is smaller, so a client
// starting a few keys at once is not refused for it.
var lookupAddressRate = emq.Rate{Capacity: 20, PerSecond: 10}

// lookupAllFactor is how many times one client address's rate all lookups
// together may go.
const lookupAllFactor = 10

// KeyRecognizer tells a key a customer has been using from one the gateway
// does not know (placement.KeyCache). An Authenticator that does not
// implement it has every request limited as a lookup.
type KeyRecognizer interface {
	Recognizes(key string) bool
}

// clientAddress is the request's connection's address, without the port.
func clientAddress(c echo.Context) string {
	host, _, err := net.SplitHostPort(c.Request().RemoteAddr)
	if err != nil {
		return c.Request().RemoteAddr
	}
	return host
}

// limitLookup takes a permit for a request that may cost a key lookup:
// from its client address's bucket (an API key's size and rate, at least
// lookupAddressRate), then from
// the bucket of all of them (lookupAllFactor times that). A limiter that
// does not answer lets the request through, as the key's own limit does.
func (s *Server) limitLookup(c echo.Context) error {
	if !s.limiting() {
		return nil
	}
	key := s.limit()
	one := emq.Rate{Capacity: max(key.Capacity, lookupAddressRate.Capacity), PerSecond: max(key.PerSecond, lookupAddressRate.PerSecond)}
	all := emq.Rate{Capacity: min(one.Capacity*lookupAllFactor, emq.MaxBucketSize),
		PerSecond: min(one.PerSecond*lookupAllFactor, emq.MaxBucketSize)}
	for _, bucket := range []struct {
		name string
		rate emq.Rate
		who  string
	}{
		{"lookup:" + clientAddress(c), one, "from one client address"},
		{lookupBucketAll, all, "from all clients together"},
	} {
		take, err := s.placer.TakePermit(c.Request().Context(), bucket.name, bucket.rate)
		if err != nil {
			s.metrics.rateLimitFailOpen.Inc()
			s.logger(c).Warn("rate limiter unavailable; key lookup let through unlimited", "err", err)
			return nil
		}
		if take.Allowed {
			continue
		}
		s.metrics.rateLimited.Inc()
		retry := wholeSeconds(take.RetryAfter, 1)
		c.Response().Header().Set("Retry-After", strconv.Itoa(retry))
		return &requestError{kind: kindRateLimited, detail: fmt.Sprintf(
			"requests without an API key this gateway recognizes are limited to %d at once and %d a second %s; retry after %d s",
			bucket.rate.Capacity, bucket.rate.PerSecond, bucket.who, retry)}
	}
	return nil
}
