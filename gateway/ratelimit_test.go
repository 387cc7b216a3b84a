package gateway_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func limited(burst, perSecond int) gateway.Config {
	config := gateway.DefaultConfig()
	config.RateLimitBurst, config.RateLimitPerSecond = burst, perSecond
	return config
}

func headerInt(t testing.TB, res response, name string) int {
	t.Helper()
	value, err := strconv.Atoi(res.header.Get(name))
	if err != nil {
		t.Fatalf("%s: %q is not a whole number (status %d)", name, res.header.Get(name), res.status)
	}
	return value
}

// A key may make its burst of requests, each answer counting down
// RateLimit-Remaining; the next is refused with 429, Retry-After and the
// headers, and the refused placement writes nothing. f.http checks every
// exchange against the spec.
func TestRateLimitRefusesPastTheBurst(t *testing.T) {
	f := newFixtureWith(t, 1, limited(3, 1))
	key := f.keys[0]
	for i, want := range []int{2, 1, 0} {
		res := f.list(t, key, nil)
		if res.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, res.status, res.body)
		}
		if got := headerInt(t, res, "RateLimit-Limit"); got != 3 {
			t.Errorf("request %d: RateLimit-Limit %d, want 3", i, got)
		}
		if got := headerInt(t, res, "RateLimit-Remaining"); got != want {
			t.Errorf("request %d: RateLimit-Remaining %d, want %d", i, got, want)
		}
		if got := headerInt(t, res, "RateLimit-Reset"); got < 1 || got > 3 {
			t.Errorf("request %d: RateLimit-Reset %d, want 1..3 s", i, got)
		}
	}
	// A placement takes from the key's bucket on its instrument: a burst
	// of its own.
	for i, want := range []int{2, 1, 0} {
		res := f.place(t, key, limitOrder(fmt.Sprintf("c-%d", i)))
		if res.status != http.StatusAccepted || headerInt(t, res, "RateLimit-Remaining") != want {
			t.Fatalf("placement %d: %d %s, RateLimit-Remaining %q, want %d", i, res.status, res.body, res.header.Get("RateLimit-Remaining"), want)
		}
	}
	keysBefore := f.queueKeys(t)
	for _, res := range []response{f.list(t, key, nil), f.place(t, key, limitOrder("over"))} {
		if res.status != http.StatusTooManyRequests {
			t.Fatalf("past the burst: %d %s, want 429", res.status, res.body)
		}
		if got := res.header.Get("Content-Type"); got != "application/problem+json" {
			t.Errorf("Content-Type %q", got)
		}
		problem := res.json(t)
		if problem["type"] != "urn:ordergate:problem:rate-limited" || problem["title"] != "Too many requests" || problem["status"] != float64(429) {
			t.Errorf("problem %s", res.body)
		}
		if got := headerInt(t, res, "Retry-After"); got != 1 {
			t.Errorf("Retry-After %d, want 1 (a permit a second)", got)
		}
		if got := headerInt(t, res, "RateLimit-Remaining"); got != 0 {
			t.Errorf("RateLimit-Remaining %d, want 0", got)
		}
		if got := headerInt(t, res, "RateLimit-Limit"); got != 3 {
			t.Errorf("RateLimit-Limit %d, want 3", got)
		}
		if got := headerInt(t, res, "RateLimit-Reset"); got < 2 || got > 3 {
			t.Errorf("RateLimit-Reset %d, want 2..3 s", got)
		}
	}
	if keys := f.queueKeys(t); strings.Join(sorted(keys), " ") != strings.Join(sorted(keysBefore), " ") {
		t.Errorf("a refused placement changed the queue's keys from %v to %v", keysBefore, keys)
	}
	samples := parseSamples(t, f.scrape(t))
	if got := samples["rate_limited_total"]; got != "2" {
		t.Errorf("rate_limited_total %q, want 2", got)
	}
	if got := samples[`orders_refused_total{status="429"}`]; got != "1" {
		t.Errorf(`orders_refused_total{status="429"} %q, want 1`, got)
	}
}

// A placement takes its permit in its admission, from the key's bucket on
// its instrument's queue (its slot): placements count RateLimit-Remaining
// down, a replay and a conflicting reuse spend a permit too and say so, and
// an order past the burst is refused with 429 and not admitted. A refused
// body and a read take from the key's bucket of other requests, apart.
func TestRateLimitPlacementsShareTheBucket(t *testing.T) {
	f := newFixtureWith(t, 1, limited(5, 1))
	key := f.keys[0]
	steps := []struct {
		name          string
		res           func() response
		status        int
		wantRemaining int
	}{
		{"placement", func() response { return f.place(t, key, limitOrder("first")) }, http.StatusAccepted, 4},
		{"replay", func() response { return f.place(t, key, limitOrder("first")) }, http.StatusOK, 3},
		{"conflicting reuse of the client order id", func() response {
			return f.place(t, key, strings.Replace(limitOrder("first"), `"side":"buy"`, `"side":"sell"`, 1))
		}, http.StatusConflict, 2},
		{"bad body", func() response { return f.place(t, key, `{"symbol":"BTC-USD"}`) }, http.StatusUnprocessableEntity, 4},
		{"read", func() response { return f.list(t, key, nil) }, http.StatusOK, 3},
		{"second placement", func() response { return f.place(t, key, limitOrder("second")) }, http.StatusAccepted, 1},
		{"third placement", func() response { return f.place(t, key, limitOrder("third")) }, http.StatusAccepted, 0},
		{"placement past the burst", func() response { return f.place(t, key, limitOrder("fourth")) }, http.StatusTooManyRequests, 0},
	}
	for _, step := range steps {
		res := step.res()
		if res.status != step.status {
			t.Fatalf("%s: %d %s, want %d", step.name, res.status, res.body, step.status)
		}
		if got := headerInt(t, res, "RateLimit-Remaining"); got != step.wantRemaining {
			t.Errorf("%s: RateLimit-Remaining %d, want %d", step.name, got, step.wantRemaining)
		}
		if got := headerInt(t, res, "RateLimit-Limit"); got != 5 {
			t.Errorf("%s: RateLimit-Limit %d, want 5", step.name, got)
		}
		if step.status == http.StatusTooManyRequests && headerInt(t, res, "Retry-After") != 1 {
			t.Errorf("%s: Retry-After %q, want 1", step.name, res.header.Get("Retry-After"))
		}
	}
	if pending, err := f.queue.Pending(context.Background()); err != nil || pending != 3 {
		t.Errorf("pending %d, %v; want the three orders within the burst", pending, err)
	}
}

func TestRateLimitRefillsAfterRetryAfter(t *testing.T) {
	f := newFixtureWith(t, 1, limited(1, 1))
	key := f.keys[0]
	if res := f.list(t, key, nil); res.status != http.StatusOK {
		t.Fatalf("first: %d %s", res.status, res.body)
	}
	refused := f.list(t, key, nil)
	if refused.status != http.StatusTooManyRequests {
		t.Fatalf("second: %d %s, want 429", refused.status, refused.body)
	}
	time.Sleep(time.Duration(headerInt(t, refused, "Retry-After"))*time.Second + 20*time.Millisecond)
	res := f.list(t, key, nil)
	if res.status != http.StatusOK {
		t.Fatalf("after Retry-After: %d %s, want 200", res.status, res.body)
	}
	if got := headerInt(t, res, "RateLimit-Remaining"); got != 0 {
		t.Errorf("RateLimit-Remaining %d, want 0 (the one refilled permit was taken)", got)
	}
}

// Buckets are per API key: one key's exhaustion leaves another's alone, and
// the bucket is named by a hash of the key, never the key itself.
func TestRateLimitBucketsArePerKey(t *testing.T) {
	f := newFixtureWith(t, 2, limited(1, 1))
	if res := f.list(t, f.keys[0], nil); res.status != http.StatusOK {
		t.Fatalf("key 0: %d", res.status)
	}
	if res := f.list(t, f.keys[0], nil); res.status != http.StatusTooManyRequests {
		t.Fatalf("key 0 again: %d, want 429", res.status)
	}
	if res := f.list(t, f.keys[1], nil); res.status != http.StatusOK || headerInt(t, res, "RateLimit-Remaining") != 0 {
		t.Errorf("key 1 after key 0 ran dry: %d %v, want 200 from its own bucket", res.status, res.header)
	}
	// A second key of the same account has its own bucket too.
	_, second, err := postgres.NewAccounts(f.db).IssueKey(context.Background(), f.accounts[0])
	if err != nil {
		t.Fatal(err)
	}
	f.keys = append(f.keys, second)
	if res := f.list(t, second, nil); res.status != http.StatusOK {
		t.Errorf("another key of account 0: %d, want 200", res.status)
	}

	// Reads take from the limits shards' buckets (placement.PermitShards).
	buckets := testserver.Keys(t, f.rdb, "emq:{"+placement.PermitsQueuePrefix+"*}:bucket:*")
	nameOf := func(bucket string) string { _, name, _ := strings.Cut(bucket, "}:bucket:"); return name }
	want := map[string]bool{}
	for _, key := range f.keys {
		sum := sha256.Sum256([]byte(key))
		want["key:"+hex.EncodeToString(sum[:16])] = true
	}
	// Each key's first request also took a permit of the lookups before
	// authentication, named by the client's address (lookuplimit.go).
	lookups := 0
	for _, bucket := range buckets {
		if strings.HasPrefix(nameOf(bucket), "lookup:") {
			lookups++
		}
	}
	if len(buckets) != len(f.keys)+lookups || lookups != 2 {
		t.Errorf("buckets %v, want one per key used and two of lookups", buckets)
	}
	for _, bucket := range buckets {
		if !want[nameOf(bucket)] && !strings.HasPrefix(nameOf(bucket), "lookup:") {
			t.Errorf("bucket %q is not named by a key's hash", bucket)
		}
		for _, key := range f.keys {
			if strings.Contains(bucket, key) || strings.Contains(bucket, strings.TrimPrefix(key, "ogk_")) {
				t.Errorf("bucket %q holds an API key", bucket)
			}
		}
	}
}

// TestRefusalsOfAKnownKeyAreLimitedApart: requests of a known key refused
// before its own limit (a signature that does not check out, a body over
// the limit read for the signature, a scope the key lacks) take from a bucket of refusals of their own, the size of the
// key's: past its burst they are answered 429 with Retry-After, naming
// why they were refused. The key's own bucket is untouched, so its owner's
// good requests are still served.
func TestRefusalsOfAKnownKeyAreLimitedApart(t *testing.T) {
	f := newFixtureWith(t, 0, limited(2, 1))
	signedBalances := func(key orders.IssuedKey, signingSecret secret.Text) response {
		header := signature{secret: signingSecret, method: "GET", target: "/v1/balances"}.header()
		return f.doWith(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", "", header)
	}
	signed := orders.KeySpec{Scopes: orders.AllScopes, Signed: true}
	tests := []struct {
		name    string
		spec    orders.KeySpec
		refused func(key orders.IssuedKey) response
		status  int
		slug    string
		good    func(key orders.IssuedKey) response
	}{
		{"bad signatures", signed, func(key orders.IssuedKey) response { return signedBalances(key, secret.New("ogs_not-the-secret")) },
			http.StatusUnauthorized, "signature-invalid", func(key orders.IssuedKey) response { return signedBalances(key, key.SigningSecret) }},
		{"unsigned requests of a signed key", signed, func(key orders.IssuedKey) response {
			return f.do(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", "")
		},
			http.StatusUnauthorized, "signature-required", func(key orders.IssuedKey) response { return signedBalances(key, key.SigningSecret) }},
		{"over-size bodies of a signed key, sent with its bearer key alone", signed, func(key orders.IssuedKey) response {
			body := strings.Repeat("x", int(gateway.DefaultConfig().BodyLimit)+1)
			header := signature{secret: secret.New("ogs_not-the-secret"), method: "POST", target: "/v1/orders", body: body}.header()
			return f.doWith(t, f.http, "POST", "/v1/orders", key.Key.Reveal(), "application/json", body, header)
		},
			http.StatusRequestEntityTooLarge, "payload-too-large", func(key orders.IssuedKey) response { return signedBalances(key, key.SigningSecret) }},
		{"placements of a read-only key", orders.KeySpec{Scopes: orders.ScopeRead}, func(key orders.IssuedKey) response { return f.place(t, key.Key.Reveal(), limitOrder("forbidden")) },
			http.StatusForbidden, "forbidden", func(key orders.IssuedKey) response {
				return f.do(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", "")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := newFixtureKey(t, f, tt.spec)
			seen := map[int]int{}
			for i := range 10 {
				res := tt.refused(key)
				seen[res.status]++
				switch res.status {
				case tt.status: // within the burst, or the bucket refilled meanwhile
				case http.StatusTooManyRequests:
					problem := res.json(t)
					if problem["type"] != "urn:ordergate:problem:rate-limited" || !strings.Contains(problem["detail"].(string), tt.slug) ||
						headerInt(t, res, "Retry-After") < 1 {
						t.Errorf("request %d: 429 %v %s, want rate-limited naming %s, with Retry-After", i, res.header, res.body, tt.slug)
					}
				default:
					t.Fatalf("request %d: %d %s, want %d %s or 429", i, res.status, res.body, tt.status, tt.slug)
				}
				if i < 2 && res.status != tt.status {
					t.Errorf("request %d of a burst of 2: %d, want %d %s", i, res.status, tt.status, tt.slug)
				}
			}
			if seen[http.StatusTooManyRequests] == 0 {
				t.Errorf("10 refusals with a burst of 2: %v, none rate limited", seen)
			}
			if res := tt.good(key); res.status != http.StatusOK || headerInt(t, res, "RateLimit-Remaining") != 1 {
				t.Errorf("the owner's request after them: %d %v %s, want 200 from the key's own, full bucket", res.status, res.header, res.body)
			}
		})
	}
}

// The limiter fails open: with Redis down, reads that need only PostgreSQL
// still succeed, without RateLimit headers, logged and counted.
func TestRateLimitFailsOpenWhenRedisIsDown(t *testing.T) {
	f := newFixtureWith(t, 1, limited(1, 1))
	key := f.keys[0]
	if res := f.list(t, key, nil); res.status != http.StatusOK {
		t.Fatalf("before the outage: %d", res.status)
	}
	f.redis.Single(t, "stops Redis").Stop(t)
	for i := range 3 { // past the burst of 1: the bucket is not consulted
		res := f.list(t, key, nil)
		if res.status != http.StatusOK {
			t.Fatalf("request %d with Redis down: %d %s, want 200", i, res.status, res.body)
		}
		for _, name := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if res.header.Get(name) != "" {
				t.Errorf("request %d: %s %q without a bucket to read it from", i, name, res.header.Get(name))
			}
		}
	}
	samples := parseSamples(t, f.scrape(t))
	if got := samples["rate_limit_fail_open_total"]; got != "3" {
		t.Errorf("rate_limit_fail_open_total %q, want 3", got)
	}
	if !strings.Contains(f.logs.String(), "rate limiter unavailable") {
		t.Error("the fail-open is not logged")
	}
}

// A key revoked between two requests is refused as soon as the revocation's
// broadcast reaches the gateway's key cache (whose ttl here is an hour).
func TestRevokedKeyIsRefusedOnceTheRevocationIsBroadcast(t *testing.T) {
	f := newFixture(t, 1)
	key := f.keys[0]
	if res := f.list(t, key, nil); res.status != http.StatusOK {
		t.Fatalf("before revocation: %d %s", res.status, res.body)
	}
	if err := control.New(f.db, f.caches).RevokeKey(context.Background(), f.keyIDs[0]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.list(t, key, nil).status == http.StatusOK && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, res := range []response{f.list(t, key, nil), f.place(t, key, limitOrder("after-revoke"))} {
		if res.status != http.StatusUnauthorized || res.json(t)["type"] != "urn:ordergate:problem:unauthorized" {
			t.Errorf("after revocation: %d %s, want 401", res.status, res.body)
		}
	}
}

// TestMadeUpKeysCostBoundedLookups: a burst of 10,000 requests with
// made-up keys from one address costs PostgreSQL no more key lookups than
// the address's bucket lets through (its burst and refill over the burst's
// length), the rest is refused 429 before any lookup, and a customer whose
// key the gateway knows keeps being served throughout. A request with no
// key at all is limited the same way. On the cluster and Valkey legs
// (testserver.RerunLeg) the burst is 2,000 requests, still twenty times the
// bucket: the same script refuses them there, and the first leg sends the
// 10,000 (5 s there, 20 s on the cluster).
func TestMadeUpKeysCostBoundedLookups(t *testing.T) {
	// A slow refill (the least an address's bucket gets: ten permits a
	// second), so the figures below hardly depend on how fast a loaded
	// machine sends the burst.
	const burst, perSecond = 100, 10
	made := int64(10_000)
	if testserver.RerunLeg() {
		made = 2_000
	}
	f := newFixtureWith(t, 1, limited(burst, perSecond))
	good := f.keys[0]
	if res := f.list(t, good, nil); res.status != http.StatusOK {
		t.Fatalf("the customer: %d %s", res.status, res.body)
	}
	before := f.lookups.n.Load()
	began := time.Now()
	var refused, unauthorized, served atomic.Int64
	work := make(chan string)
	var flood sync.WaitGroup
	for range 32 {
		flood.Go(func() {
			for key := range work {
				req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/orders", nil)
				req.Header.Set("Authorization", "Bearer "+key)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				switch res.StatusCode {
				case http.StatusTooManyRequests:
					refused.Add(1)
				case http.StatusUnauthorized:
					unauthorized.Add(1)
				default:
					t.Errorf("a made-up key: %d", res.StatusCode)
				}
			}
		})
	}
	customer := make(chan struct{})
	go func() {
		defer close(customer)
		for i := 0; i < 20; i++ {
			if res := f.list(t, good, nil); res.status == http.StatusOK {
				served.Add(1)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	buf := make([]byte, 16)
	for range made {
		_, _ = rand.Read(buf)
		work <- orders.APIKeyPrefix + hex.EncodeToString(buf)
	}
	close(work)
	flood.Wait()
	<-customer
	elapsed := time.Since(began)

	lookups := f.lookups.n.Load() - before
	allowed := int64(burst + perSecond*int(elapsed.Seconds()+1))
	if lookups > allowed || lookups != unauthorized.Load() {
		t.Errorf("%d made-up keys cost %d lookups (%d answered 401) in %v; the address's bucket allows %d",
			made, lookups, unauthorized.Load(), elapsed, allowed)
	}
	if refused.Load() < made-allowed {
		t.Errorf("%d refused 429, want at least %d", refused.Load(), made-allowed)
	}
	if served.Load() != 20 {
		t.Errorf("the customer was served %d of 20 requests during the flood", served.Load())
	}
	// With no key at all: the address's bucket is spent (a permit may have
	// come back since the flood, not three).
	refusedAfter := 0
	for range 3 {
		if res := f.do(t, f.http, http.MethodGet, "/v1/orders", "", "", ""); res.status == http.StatusTooManyRequests {
			refusedAfter++
		}
	}
	if refusedAfter < 2 {
		t.Errorf("no key after the flood: %d of 3 refused 429, want at least 2 (the address's bucket is spent)", refusedAfter)
	}
}

// clientFrom is an HTTP client whose connections come from the loopback
// address ip (Linux routes all of 127.0.0.0/8 to lo), so the gateway sees
// a client address of its own per client.
func clientFrom(t testing.TB, ip string) *http.Client {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	transport := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 8}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

// TestRequestsThatCostNoLookupLeaveTheSharedBucket: requests with no key
// from forty addresses, which cost PostgreSQL nothing, are limited per
// address only; customers whose keys this gateway has not seen yet (a new
// key, or any key after a restart) still get their lookups.
func TestRequestsThatCostNoLookupLeaveTheSharedBucket(t *testing.T) {
	const burst, perSecond = 20, 10 // per address; all lookups together 200 and 100 a second
	f := newFixtureWith(t, 10, limited(burst, perSecond))
	stop := make(chan struct{})
	var flood sync.WaitGroup
	for i := 2; i < 42; i++ {
		client := clientFrom(t, fmt.Sprintf("127.0.0.%d", i))
		flood.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/orders", nil)
				if res, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	customer := clientFrom(t, "127.0.0.1")
	served := 0
	for _, key := range f.keys {
		req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/orders", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := customer.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode == http.StatusOK {
			served++
		}
	}
	close(stop)
	flood.Wait()
	if served != len(f.keys) {
		t.Errorf("%d of %d customers' first requests served during a keyless flood", served, len(f.keys))
	}
}
