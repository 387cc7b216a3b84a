package gateway

import (
	"fmt"
	"net"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/placement"
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
var lookupAddressRate = placement.Rate{Capacity: 20, PerSecond: 10}

// lookupAllFactor is how many times one client address's rate all lookups
// together may go.
const lookupAllFactor = 10

// KeyRecognizer tells a key a customer has been using from one the gateway
// does not know, and whether authenticating a key would cost a lookup
// (placement.KeyCache). An Authenticator that does not implement it has
// every request limited as a lookup.
type KeyRecognizer interface {
	Recognizes(key string) bool
	NeedsLookup(key string) bool
}

// lookupCost is what a request's key may cost PostgreSQL.
type lookupCost int

const (
	// noLookup: a request with no key, a malformed one, or one the cache
	// answers unknown from memory. It costs nothing but is still limited
	// per client address, so one address cannot hammer the gateway with
	// refusals.
	noLookup lookupCost = iota
	// lookup: the key will be looked up. Limited per address and overall,
	// which bounds the lookups all clients together can force.
	lookup
)

// limitAddress is the address a client's limits key on, every one of
// them (the lookups', the public routes', the event streams' caps): the
// connection's IPv4 address, or the /64 of its IPv6 one, since one host is
// handed a whole /64 and could otherwise take a new bucket with every
// address in it. An IPv4 address mapped into IPv6 (::ffff:a.b.c.d) is its
// IPv4 address. Behind a proxy it is the proxy's.
func limitAddress(c echo.Context) string {
	remote := c.Request().RemoteAddr
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	switch {
	case ip == nil:
		return host
	case ip.To4() != nil:
		return ip.To4().String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// limitLookup takes a permit for a request without a key the gateway
// recognizes: from its client's bucket (its IPv4 address or IPv6 /64; an
// API key's size and rate, at least lookupAddressRate), and, when the key
// will be looked up, from the bucket of all lookups (lookupAllFactor times
// that): requests that cost no lookup leave the shared bucket to those that
// do. A limiter that does not answer lets the request through, as the key's
// own limit does.
func (s *Server) limitLookup(c echo.Context, cost lookupCost) error {
	if !s.limiting() {
		return nil
	}
	key := s.limit()
	one := placement.Rate{Capacity: max(key.Capacity, lookupAddressRate.Capacity), PerSecond: max(key.PerSecond, lookupAddressRate.PerSecond)}
	all := placement.Rate{Capacity: min(one.Capacity*lookupAllFactor, placement.MaxBucketSize),
		PerSecond: min(one.PerSecond*lookupAllFactor, placement.MaxBucketSize)}
	buckets := []struct {
		name string
		rate placement.Rate
		who  string
	}{
		{"lookup:" + limitAddress(c), one, "from one client address"},
		{lookupBucketAll, all, "from all clients together"},
	}
	if cost == noLookup {
		buckets = buckets[:1]
	}
	for _, bucket := range buckets {
		take, ok := s.takeFrom(c, bucket.name, bucket.rate)
		if !ok {
			return nil
		}
		if take.Allowed {
			continue
		}
		return s.overLimit(c, take, fmt.Sprintf("requests without an API key this gateway recognizes are limited to %d at once and %d a second %s",
			bucket.rate.Capacity, bucket.rate.PerSecond, bucket.who))
	}
	return nil
}
