package gateway_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// streamLines reads an open stream's lines as they come, with when each
// came; the channel closes when the stream ends.
type streamLine struct {
	text string
	at   time.Time
}

func streamLines(t testing.TB, res *http.Response) <-chan streamLine {
	t.Helper()
	lines := make(chan streamLine, 1024)
	go func() {
		defer close(lines)
		reader := bufio.NewReader(res.Body)
		for {
			line, err := reader.ReadString('\n')
			if line != "" {
				lines <- streamLine{strings.TrimRight(line, "\n"), time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { res.Body.Close() })
	return lines
}

// untilEnd reads lines until the stream ends, for at most timeout, and
// returns them and when the stream ended (zero if it did not).
func untilEnd(lines <-chan streamLine, timeout time.Duration) ([]string, time.Time) {
	var read []string
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return read, time.Now()
			}
			read = append(read, line.text)
		case <-deadline:
			return read, time.Time{}
		}
	}
}

// TestAKeysPowerEndsWithIt: every open event stream of a key that is
// revoked (signed or not), or that loses the read scope, ends at once
// when the gateway hears the change's broadcast (the fixture's key cache
// trusts its copies for an hour: only the broadcast can tell it), each
// with a last comment naming the problem a request with the key now
// gets; no event of the account reaches it after. The key's other
// streams, and another key's, are not touched by it.
func TestAKeysPowerEndsWithIt(t *testing.T) {
	f := newFixture(t, 1)
	bystander := openEvents(t, f.http, f.url, f.keys[0], "", nil)
	bystander.position(t)
	ctx := context.Background()
	revoke := func(t *testing.T, issued orders.IssuedKey) {
		if err := control.New(f.db, f.caches).RevokeKey(ctx, issued.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name    string
		spec    orders.KeySpec
		change  func(t *testing.T, issued orders.IssuedKey)
		problem string
		want    string
	}{
		{"a revoked key", orders.KeySpec{Scopes: orders.AllScopes}, revoke, "unauthorized", ": ended unauthorized: the API key was revoked"},
		{"a revoked signed key", orders.KeySpec{Scopes: orders.AllScopes, Signed: true}, revoke, "unauthorized", ": ended unauthorized: the API key was revoked"},
		{"a key that lost the read scope", orders.KeySpec{Scopes: orders.AllScopes}, func(t *testing.T, issued orders.IssuedKey) {
			// As an operator's change of scopes would: the row, then the
			// broadcast that drops the gateways' copies.
			if _, err := f.db.Exec(ctx, `UPDATE api_keys SET scopes = '{trade}' WHERE id = $1`, issued.ID); err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256([]byte(issued.Key.Reveal()))
			if err := f.caches.Broadcast(ctx, placement.APIKeysTable, hex.EncodeToString(sum[:])); err != nil {
				t.Fatal(err)
			}
		}, "forbidden", ": ended forbidden: the API key no longer has the read scope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			issued := newFixtureKey(t, f, tt.spec)
			account := f.accounts[len(f.accounts)-1]
			var header http.Header
			var streams []<-chan streamLine
			for range 2 {
				if tt.spec.Signed {
					header = signature{secret: issued.SigningSecret, method: http.MethodGet, target: "/v1/events"}.header()
				}
				res := requestEvents(t, f.http, f.url, issued.Key.Reveal(), "", header)
				if res.StatusCode != http.StatusOK {
					body, _ := io.ReadAll(res.Body)
					t.Fatalf("open: %d %s", res.StatusCode, body)
				}
				lines := streamLines(t, res)
				if first := <-lines; first.text != "id: 0" {
					t.Fatalf("first line %q", first.text)
				}
				streams = append(streams, lines)
			}
			appendAccountEvents(t, f.events, account, 1, 1, 0)
			changed := time.Now()
			tt.change(t, issued)
			for i, lines := range streams {
				read, ended := untilEnd(lines, 5*time.Second)
				if ended.IsZero() {
					t.Fatalf("stream %d still open 5 s after the change; it read %q", i, read)
				}
				// At once: a lookup and the last comment, and slack for a
				// loaded machine; a check on a fixed 500 ms cadence misses it.
				if took := ended.Sub(changed); took > 300*time.Millisecond {
					t.Errorf("stream %d ended %v after the change, want at once (within 300 ms)", i, took)
				}
				if len(read) < 2 || read[len(read)-2] != tt.want || read[len(read)-1] != "" {
					t.Errorf("stream %d ended with %q, want the comment %q", i, read, tt.want)
				}
				for _, line := range read {
					if strings.HasPrefix(line, "id: ") && line != "id: 1" {
						t.Errorf("stream %d got %q after the change", i, line)
					}
				}
			}
			if got := parseSamples(t, f.scrape(t))[`event_streams_key_ended_total{problem="`+tt.problem+`"}`]; got == "" || got == "0" {
				t.Errorf("event_streams_key_ended_total{problem=%q} %q, want the streams counted", tt.problem, got)
			}
		})
	}
	appendAccountEvents(t, f.events, f.accounts[0], 1, 1, 0)
	bystander.expectSequences(t, 1, 1)
}

// keyCacheTTL is the ttl of the key cache the tests of a missed
// broadcast give their gateway.
const keyCacheTTL = time.Second

// gatewayMissingBroadcasts starts a gateway on f's stores whose key cache
// trusts a copy for keyCacheTTL and hears no broadcast, configured by
// opts, and returns its URL.
func gatewayMissingBroadcasts(t testing.TB, f *fixture, opts ...placement.KeyCacheOption) string {
	t.Helper()
	deps := f.deps
	defer func() { f.deps = deps }()
	f.deps.Accounts = placement.NewKeyCache(postgres.NewAccounts(f.db), keyCacheTTL, opts...)
	url, _ := f.startGateway(t, prometheus.NewRegistry())
	return url
}

// openStream opens an event stream with key on the gateway at url and
// reads its first line.
func openStream(t testing.TB, f *fixture, url, key string) <-chan streamLine {
	t.Helper()
	res := requestEvents(t, f.http, url, key, "", nil)
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("open: %d %s", res.StatusCode, body)
	}
	lines := streamLines(t, res)
	if first := <-lines; first.text != "id: 0" {
		t.Fatalf("first line %q", first.text)
	}
	return lines
}

// TestAKeysPowerEndsWithinTheKeyCachesTTLWithoutItsBroadcast: on a
// gateway that misses the change's broadcast (or a change made without
// one), a key's streams still end once the key cache's copy of the key
// expires and PostgreSQL is asked again: within KEY_CACHE_TTL of the
// change, as a request with the key would be refused, and with the same
// last comment.
func TestAKeysPowerEndsWithinTheKeyCachesTTLWithoutItsBroadcast(t *testing.T) {
	f := newFixture(t, 0)
	url := gatewayMissingBroadcasts(t, f)
	ctx := context.Background()
	for _, tt := range []struct {
		name   string
		change string
		want   string
	}{
		{"a revoked key", `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, ": ended unauthorized: the API key was revoked"},
		{"a key that lost the read scope", `UPDATE api_keys SET scopes = '{trade}' WHERE id = $1`, ": ended forbidden: the API key no longer has the read scope"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			issued := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes})
			lines := openStream(t, f, url, issued.Key.Reveal())
			if _, err := f.db.Exec(ctx, tt.change, issued.ID); err != nil {
				t.Fatal(err)
			}
			changed := time.Now()
			read, ended := untilEnd(lines, 3*keyCacheTTL)
			if ended.IsZero() {
				t.Fatalf("the stream is still open %v after the change; it read %q", 3*keyCacheTTL, read)
			}
			// The ttl, the loop's round and slack for a loaded machine.
			if took := ended.Sub(changed); took > keyCacheTTL+400*time.Millisecond {
				t.Errorf("the stream ended %v after the change, want within the key cache's ttl %v", took, keyCacheTTL)
			}
			if len(read) < 2 || read[len(read)-2] != tt.want {
				t.Errorf("the stream ended with %q, want the comment %q", read, tt.want)
			}
		})
	}
}

// TestAPostgresOutageEndsNoEventStream: while PostgreSQL is down, past the
// key cache's ttl and with no stale copy to answer, a stream's key cannot
// be checked, and nothing can be revoked: the stream goes on, through the
// outage and after it.
func TestAPostgresOutageEndsNoEventStream(t *testing.T) {
	f := newFixture(t, 1)
	url := gatewayMissingBroadcasts(t, f, placement.StaleIfError(0))
	server := testserver.PostgresServer(t)
	lines := openStream(t, f, url, f.keys[0])
	server.Stop(t)
	if read, ended := untilEnd(lines, 3*keyCacheTTL); !ended.IsZero() {
		t.Fatalf("the stream ended during the outage; it read %q", read)
	}
	server.Start(t)
	if read, ended := untilEnd(lines, 2*keyCacheTTL); !ended.IsZero() {
		t.Fatalf("the stream ended after the outage; it read %q", read)
	}
	appendAccountEvents(t, f.events, f.accounts[0], 1, 1, 0)
	timeout := time.After(5 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended after the outage")
			}
			if strings.HasPrefix(line.text, "id: ") {
				if line.text != "id: 1" {
					t.Errorf("after the outage the stream read %q, want the next event", line.text)
				}
				return
			}
		case <-timeout:
			t.Fatal("after the outage the stream carried no event")
		}
	}
}

// TestEventStreamsAreCappedPerKeyAndPerAddress: a key may have its cap of
// streams open at once, and a client address its own; past either a
// stream is refused 429 too-many-streams, with Retry-After, naming the
// cap; a stream that ends frees its place at once.
func TestEventStreamsAreCappedPerKeyAndPerAddress(t *testing.T) {
	config := gateway.DefaultConfig()
	config.EventStreamsPerKey, config.EventStreamsPerAddress = 2, 3
	f := newFixtureWith(t, 3, config)
	open := func(key string) *http.Response {
		return requestEvents(t, f.http, f.url, key, "", nil)
	}
	refused := func(res *http.Response, who string) {
		t.Helper()
		if res.StatusCode == http.StatusOK {
			// An open stream's body never ends: do not read it.
			res.Body.Close()
			t.Errorf("a stream past a cap opened, want 429 too-many-streams naming %q", who)
			return
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "urn:ordergate:problem:too-many-streams") ||
			!strings.Contains(string(body), who) || res.Header.Get("Retry-After") == "" {
			t.Errorf("%d %v %s, want 429 too-many-streams naming %q with Retry-After", res.StatusCode, res.Header, body, who)
		}
	}
	var held []*http.Response
	for _, key := range []string{f.keys[0], f.keys[0]} {
		res := open(key)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("stream within the caps: %d", res.StatusCode)
		}
		t.Cleanup(func() { res.Body.Close() })
		held = append(held, res)
	}
	refused(open(f.keys[0]), "this API key has 2 event streams open")
	third := open(f.keys[1])
	if third.StatusCode != http.StatusOK {
		t.Fatalf("another key's stream, the address's third: %d", third.StatusCode)
	}
	t.Cleanup(func() { third.Body.Close() })
	refused(open(f.keys[2]), "this client address has 3 event streams open")
	// Read before a place is freed: until the close reaches the gateway, a
	// stream opened to take its place is refused and counted again.
	samples := parseSamples(t, f.scrape(t))
	if key, address := samples[`event_streams_refused_total{cap="key"}`], samples[`event_streams_refused_total{cap="address"}`]; key != "1" || address != "1" {
		t.Errorf("event_streams_refused_total: key %q, address %q; want 1 each", key, address)
	}

	held[0].Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := open(f.keys[0])
		if res.StatusCode == http.StatusOK {
			t.Cleanup(func() { res.Body.Close() })
			break
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a stream closed did not free its place: %d", res.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAStreamThatJoinsAKeysEndedStreamsEndsToo: a stream whose request
// was authorized just before its key's revocation was heard, and that
// joins the registry after the key's streams were ended for it while one
// of them is still on its way out (its client reads nothing), ends at
// once as they did, not a KEY_CACHE_TTL later (an hour in the fixture).
func TestAStreamThatJoinsAKeysEndedStreamsEndsToo(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	issued := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes})
	key := issued.Key.Reveal()
	if _, err := f.deps.Accounts.Authenticate(ctx, key); err != nil {
		t.Fatal(err)
	}
	deps := f.deps
	deps.Metrics = prometheus.NewRegistry()
	server := gateway.New(deps, f.config)
	lingering, leave := gateway.FollowStream(server, key)
	defer leave()
	// The registry's first check of the key, a cache hit, puts the next
	// an hour away.
	time.Sleep(300 * time.Millisecond)
	if err := control.New(f.db, f.caches).RevokeKey(ctx, issued.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lingering:
	case <-time.After(5 * time.Second):
		t.Fatal("the key's stream was not ended 5 s after its revocation")
	}
	late, leaveLate := gateway.FollowStream(server, key)
	defer leaveLate()
	select {
	case <-late:
	case <-time.After(time.Second):
		t.Error("a stream that joined the revoked key's ended streams was still open 1 s later")
	}
}
