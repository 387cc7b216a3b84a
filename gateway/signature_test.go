package gateway_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/signing"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// signature is what a test signs: with the secret, a timestamp (now moved
// by at) and the request's method, target and body.
type signature struct {
	secret               secret.Text
	at                   time.Duration
	method, target, body string
}

// header is the signature headers for sig, signed now.
func (sig signature) header() http.Header {
	timestamp := strconv.FormatInt(time.Now().Add(sig.at).UnixMilli(), 10)
	return http.Header{
		signing.HeaderTimestamp: {timestamp},
		signing.HeaderSignature: {signing.Sign(sig.secret, timestamp, sig.method, sig.target, []byte(sig.body))},
	}
}

// TestSignedRequests: a key that requires signatures is served only with
// a signature of exactly the request sent, made with its secret within the
// allowed skew (5 s) of now either way; anything else is a 401 naming what is
// wrong, and does nothing. The key's scopes still apply once it is signed.
func TestSignedRequests(t *testing.T) {
	f := newFixture(t, 0)
	key := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	readOnly := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.ScopeRead, Signed: true})
	other := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	apiKey, signingSecret := key.Key.Reveal(), key.SigningSecret
	place := func(id string) signature {
		return signature{secret: signingSecret, method: http.MethodPost, target: "/v1/orders", body: limitOrder(id)}
	}
	read := signature{secret: signingSecret, method: http.MethodGet, target: "/v1/orders?limit=5"}
	oversize := `{"client_order_id":"big","padding":"` + strings.Repeat("x", 17<<10) + `"}`
	tests := []struct {
		name               string
		key                string
		method, path, body string
		sig                signature
		header             func(http.Header)
		status             int
		slug               string
	}{
		{"a placement", apiKey, "POST", "/v1/orders", limitOrder("sig-1"), place("sig-1"), nil, 202, ""},
		{"a read with a query", apiKey, "GET", "/v1/orders?limit=5", "", read, nil, 200, ""},
		{"a cancel without a body", apiKey, "DELETE", "/v1/orders", "", signature{secret: signingSecret, method: "DELETE", target: "/v1/orders"}, nil, 200, ""},
		{"signed 4 s ago", apiKey, "GET", "/v1/orders?limit=5", "", signature{secret: signingSecret, at: -4 * time.Second, method: "GET", target: "/v1/orders?limit=5"}, nil, 200, ""},
		{"signed 4 s ahead", apiKey, "GET", "/v1/orders?limit=5", "", signature{secret: signingSecret, at: 4 * time.Second, method: "GET", target: "/v1/orders?limit=5"}, nil, 200, ""},
		{"another key's secret", apiKey, "GET", "/v1/orders?limit=5", "", signature{secret: other.SigningSecret, method: "GET", target: "/v1/orders?limit=5"}, nil, 401, "signature-invalid"},
		{"the body changed", apiKey, "POST", "/v1/orders", limitOrder("sig-2"), place("sig-3"), nil, 401, "signature-invalid"},
		{"the query changed", apiKey, "GET", "/v1/orders?limit=6", "", read, nil, 401, "signature-invalid"},
		{"the path changed", apiKey, "GET", "/v1/fills?limit=5", "", read, nil, 401, "signature-invalid"},
		{"the method changed", apiKey, "DELETE", "/v1/orders", "", signature{secret: signingSecret, method: "GET", target: "/v1/orders"}, nil, 401, "signature-invalid"},
		{"signed 6 s ago", apiKey, "GET", "/v1/orders?limit=5", "", signature{secret: signingSecret, at: -6 * time.Second, method: "GET", target: "/v1/orders?limit=5"}, nil, 401, "signature-outside-window"},
		{"signed 6 s ahead", apiKey, "GET", "/v1/orders?limit=5", "", signature{secret: signingSecret, at: 6 * time.Second, method: "GET", target: "/v1/orders?limit=5"}, nil, 401, "signature-outside-window"},
		{"a timestamp in seconds", apiKey, "GET", "/v1/orders?limit=5", "", read, func(h http.Header) {
			ms, _ := strconv.ParseInt(h.Get(signing.HeaderTimestamp), 10, 64)
			seconds := strconv.FormatInt(ms/1000, 10)
			h.Set(signing.HeaderTimestamp, seconds)
			h.Set(signing.HeaderSignature, signing.Sign(signingSecret, seconds, "GET", "/v1/orders?limit=5", nil))
		}, 401, "signature-outside-window"},
		{"a timestamp with a sign", apiKey, "GET", "/v1/orders?limit=5", "", read, func(h http.Header) {
			h.Set(signing.HeaderTimestamp, "+"+h.Get(signing.HeaderTimestamp))
		}, 401, "signature-invalid"},
		{"the signature in base64", apiKey, "GET", "/v1/orders?limit=5", "", read, func(h http.Header) {
			h.Set(signing.HeaderSignature, "q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=")
		}, 401, "signature-invalid"},
		{"no signature headers", apiKey, "GET", "/v1/orders?limit=5", "", read, func(h http.Header) {
			h.Del(signing.HeaderTimestamp)
			h.Del(signing.HeaderSignature)
		}, 401, "signature-required"},
		{"a timestamp without a signature", apiKey, "GET", "/v1/orders?limit=5", "", read, func(h http.Header) {
			h.Del(signing.HeaderSignature)
		}, 401, "signature-required"},
		{"a body over the limit", apiKey, "POST", "/v1/orders", oversize, signature{secret: signingSecret, method: "POST", target: "/v1/orders", body: oversize}, nil, 413, "payload-too-large"},
		{"signed, but without the scope", readOnly.Key.Reveal(), "POST", "/v1/orders", limitOrder("sig-4"), signature{secret: readOnly.SigningSecret, method: "POST", target: "/v1/orders", body: limitOrder("sig-4")}, nil, 403, "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := tt.sig.header()
			if tt.header != nil {
				tt.header(header)
			}
			contentType := ""
			if tt.body != "" {
				contentType = "application/json"
			}
			res := f.doWith(t, f.http, tt.method, tt.path, tt.key, contentType, tt.body, header)
			if res.status != tt.status {
				t.Fatalf("%d %s, want %d %s", res.status, res.body, tt.status, tt.slug)
			}
			if tt.slug != "" && res.json(t)["type"] != "urn:ordergate:problem:"+tt.slug {
				t.Errorf("problem %s, want %s", res.body, tt.slug)
			}
		})
	}
	if admitted := parseSamples(t, f.scrape(t))["orders_admitted_total"]; admitted != "1" {
		t.Errorf("%s orders admitted, want only the one signed placement", admitted)
	}
}

// TestSignedRequestThroughAForwardProxy: through an HTTP forward proxy the
// Go client's transport writes the target in absolute-form
// (http://host/path), which the gateway may receive as it is (here it is
// the proxy itself); the signer signed the path and query, and so does the
// gateway.
func TestSignedRequestThroughAForwardProxy(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	key := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	proxy, err := url.Parse(f.url)
	if err != nil {
		t.Fatal(err)
	}
	viaProxy := &http.Client{Transport: apitest.Transport(t, &http.Transport{Proxy: http.ProxyURL(proxy)})}
	for _, target := range []string{"/v1/balances", "/v1/orders?limit=5&status=open"} {
		t.Run(target, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, "http://gateway.example"+target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := client.NewSigner(key.Key.Reveal(), key.SigningSecret.Reveal()).Edit(context.Background(), req); err != nil {
				t.Fatal(err)
			}
			res, err := viaProxy.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			if body, _ := io.ReadAll(res.Body); res.StatusCode != http.StatusOK {
				t.Errorf("signed GET through a forward proxy: %d %s", res.StatusCode, body)
			}
		})
	}
}

// TestSignedRequestIsAcceptedOnce: a signed request sent again within the
// allowed skew is refused signature-replayed, even with its signature written in
// capitals, and does nothing; the same request signed anew is served.
func TestSignedRequestIsAcceptedOnce(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	key := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	body := limitOrder("once-1")
	sig := signature{secret: key.SigningSecret, method: "POST", target: "/v1/orders", body: body}
	header := sig.header()
	capitals := header.Clone()
	capitals.Set(signing.HeaderSignature, strings.ToUpper(header.Get(signing.HeaderSignature)))
	steps := []struct {
		name   string
		header http.Header
		status int
		slug   string
	}{
		{"first", header, 202, ""},
		{"sent again", header, 401, "signature-replayed"},
		{"sent again in capitals", capitals, 401, "signature-replayed"},
		// A second earlier: the steps' headers are all made in the same
		// millisecond. The answer is the placement's idempotent replay.
		{"signed anew", signature{secret: key.SigningSecret, at: -time.Second, method: "POST", target: "/v1/orders", body: body}.header(), 200, ""},
	}
	for _, step := range steps {
		res := f.doWith(t, f.http, "POST", "/v1/orders", key.Key.Reveal(), "application/json", body, step.header)
		if res.status != step.status || (step.slug != "" && res.json(t)["type"] != "urn:ordergate:problem:"+step.slug) {
			t.Fatalf("%s: %d %s, want %d %s", step.name, res.status, res.body, step.status, step.slug)
		}
	}
}

// TestSignatureRecordOutlivesTheSkew: a signature is remembered for
// three times the skew: two cover every moment its timestamp is
// acceptable to this gateway, the third a gateway whose clock is up to a
// skew behind, where it stays acceptable longer. A request signed ahead of
// the clock is refused as a replay for as long as its timestamp is
// acceptable, not only for a moment after it was first served.
func TestSignatureRecordOutlivesTheSkew(t *testing.T) {
	// Seconds, not milliseconds: the margins must outlast a busy machine.
	const skew = 4 * time.Second
	config := gateway.DefaultConfig()
	config.SignatureSkew = skew
	f := newFixtureWith(t, 0, config)
	key := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	header := signature{secret: key.SigningSecret, at: skew * 9 / 10, method: "GET", target: "/v1/balances"}.header()
	if res := f.doWith(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", "", header); res.status != http.StatusOK {
		t.Fatalf("first: %d %s", res.status, res.body)
	}
	keyHash := sha256.Sum256([]byte(key.Key.Reveal()))
	sum, err := hex.DecodeString(header.Get(signing.HeaderSignature))
	if err != nil {
		t.Fatal(err)
	}
	record := placement.SignatureKey(hex.EncodeToString(keyHash[:16]), sum)
	if left, err := f.rdb.PTTL(context.Background(), record).Result(); err != nil || left <= 2*skew || left > 3*skew {
		t.Errorf("the signature is remembered for %s (%v), want three skews (%s)", left, err, 3*skew)
	}
	// Past a record of one skew, while the timestamp stays
	// acceptable for 2.6 s more.
	time.Sleep(skew * 5 / 4)
	if res := f.doWith(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", "", header); res.status != http.StatusUnauthorized || res.json(t)["type"] != "urn:ordergate:problem:signature-replayed" {
		t.Errorf("sent again %s later, still acceptable: %d %s, want 401 signature-replayed", skew*5/4, res.status, res.body)
	}
}

// TestSignedKeyWithoutTheEncryptionKey: a gateway that cannot open a
// key's signing secret refuses the key's signed requests with a 503 and a
// log line (one for many requests), rather than serving them unverified;
// an unsigned one is refused 401 signature-required first, as anywhere.
// Keys that need no signature are served as before.
func TestSignedKeyWithoutTheEncryptionKey(t *testing.T) {
	testserver.Parallel(t)
	f := newFixtureWith(t, 1, gateway.DefaultConfig(), placement.OpenSecretsWith(nil))
	key := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	for i := range 3 {
		sig := signature{secret: key.SigningSecret, at: time.Duration(-i) * time.Millisecond, method: "GET", target: "/v1/balances"}
		res := f.doWith(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", "", sig.header())
		if res.status != http.StatusServiceUnavailable || res.json(t)["type"] != "urn:ordergate:problem:unavailable" {
			t.Errorf("signed request %d: %d %s, want a 503", i, res.status, res.body)
		}
	}
	if n := strings.Count(f.logs.String(), orders.ErrSigningUnavailable.Error()); n != 1 {
		t.Errorf("3 requests logged why %d times, want once:\n%s", n, f.logs.String())
	}
	if res := f.do(t, f.http, "GET", "/v1/balances", key.Key.Reveal(), "", ""); res.status != http.StatusUnauthorized {
		t.Errorf("unsigned request: %d %s, want 401 signature-required", res.status, res.body)
	}
	if res := f.do(t, f.http, "GET", "/v1/balances", f.keys[0], "", ""); res.status != http.StatusOK {
		t.Errorf("a key without signing: %d %s, want 200", res.status, res.body)
	}
}

// TestREADMESignedCurl runs the README's signed placement, the lines from
// BODY= to the curl as written there, against a gateway with a signed key
// in KEY and its secret in SECRET: the example must place an order with
// the tools it names (bash, date, perl, curl), skipped where one is
// missing. curl's exchange cannot go through the contract check.
func TestREADMESignedCurl(t *testing.T) {
	testserver.Parallel(t)
	for _, tool := range []string{"bash", "date", "perl", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s: %v", tool, err)
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, example, found := strings.Cut(string(readme), "\nBODY=")
	example, _, closed := strings.Cut(example, "\n```")
	if !found || !closed || !strings.Contains(example, signing.HeaderSignature) {
		t.Fatal("the README has no signed example starting BODY=")
	}
	f := newFixture(t, 0)
	key := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
	script := "BODY=" + strings.ReplaceAll(example, "http://127.0.0.1:8080", f.url)
	cmd := exec.Command("bash", "-euc", script)
	cmd.Env = append(os.Environ(), "KEY="+key.Key.Reveal(), "SECRET="+key.SigningSecret.Reveal())
	out, err := cmd.CombinedOutput()
	var order map[string]any
	if err != nil || json.Unmarshal(out, &order) != nil || order["status"] != "pending" || order["client_order_id"] != "demo-5" {
		t.Errorf("the README's signed curl: %v\n%s", err, out)
	}
}
