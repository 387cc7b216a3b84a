package gateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/signing"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/logbuffer"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// fixture is a gateway on a real Redis and a real PostgreSQL, with customer
// accounts and their API keys.
type fixture struct {
	url   string
	redis *testserver.QueueServer
	rdb   redis.UniversalClient
	db    *pgxpool.Pool
	// queue is BTC-USD's orders queue, for tests that play the worker.
	queue *emq.Queue
	// events are the accounts' logs of events.
	events      *placement.EventLogs
	client      *emq.Client
	caches      *coherence.Client
	databaseURL string
	accounts    []string
	keys        []string
	keyIDs      []string
	// sealer seals the signing secrets of the keys the fixture issues;
	// secrets are those secrets, which no log line may hold.
	sealer      *signing.Sealer
	secrets     []string
	instruments *placement.Instruments
	http        *http.Client
	logs        *logbuffer.Buffer
	// lookups counts the key cache's lookups in PostgreSQL.
	lookups *countingLookup
	// metrics is the gateway's registry, which cmd/gateway serves on its
	// own listener (scrape reads it).
	metrics *prometheus.Registry
	// deps and config are the gateway's, for startGateway.
	deps   gateway.Deps
	config gateway.Config
}

// countingLookup counts the API key lookups that reach PostgreSQL.
type countingLookup struct {
	placement.KeyLookup
	n atomic.Int64
}

func (l *countingLookup) Key(ctx context.Context, hash [sha256.Size]byte) (orders.ActiveKey, error) {
	l.n.Add(1)
	return l.KeyLookup.Key(ctx, hash)
}

func newFixture(t testing.TB, accounts int) *fixture {
	t.Helper()
	return newFixtureWith(t, accounts, gateway.DefaultConfig())
}

// newFixtureWith is newFixture with the gateway configured by config, and
// its key cache by keyOptions after the fixture's own (which open signing
// secrets with the fixture's sealer).
func newFixtureWith(t testing.TB, accounts int, config gateway.Config, keyOptions ...placement.KeyCacheOption) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{redis: testserver.QueueRedisServer(t), logs: &logbuffer.Buffer{}, metrics: prometheus.NewRegistry()}
	var err error
	if f.sealer, err = signing.NewSealer(bytes.Repeat([]byte{0x5E}, signing.EncryptionKeyBytes)); err != nil {
		t.Fatal(err)
	}
	f.rdb = f.redis.Client(t)
	database := testserver.MigratedPostgres(t)
	f.db = database.Pool(t)

	queueClient, err := emq.Connect(ctx, f.rdb)
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(queueClient)
	f.queue, f.client, f.databaseURL = queues.For("BTC-USD"), queueClient, database.URL
	f.events = placement.NewEventLogs(queueClient)
	f.caches = coherence.New(f.rdb)
	placer := placement.NewPlacer(queues, placement.WithHistory(postgres.NewOrders(postgres.NewHistory(f.db), postgres.NewSettler(f.db, nil, nil))))
	// Declared at start as the gateway declares them, so tests that play
	// the gateway's admission may admit directly.
	if err := placer.Declare(ctx, "BTC-USD", "ETH-USD", "ETH-BTC"); err != nil {
		t.Fatal(err)
	}
	f.instruments, err = placement.LoadInstruments(ctx, postgres.NewInstruments(f.db))
	if err != nil {
		t.Fatal(err)
	}
	// As cmd/gateway wires it, but with an hour-long ttl: a revocation must
	// reach the cache by its broadcast.
	f.lookups = &countingLookup{KeyLookup: postgres.NewAccounts(f.db)}
	keys := placement.NewKeyCache(f.lookups, time.Hour, append([]placement.KeyCacheOption{placement.OpenSecretsWith(f.sealer)}, keyOptions...)...)
	following, stopFollowing := context.WithCancel(ctx)
	subscription, err := keys.FollowRevocations(following, f.caches)
	if err != nil {
		stopFollowing()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopFollowing()
		<-subscription.Done()
	})
	for range accounts {
		newFixtureAccount(t, f)
	}
	logger := slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.config = config
	f.deps = gateway.Deps{
		Placer:      placer,
		Instruments: f.instruments,
		Accounts:    keys,
		Signatures:  placement.NewSignatures(f.rdb),
		Balances:    placement.NewBalances(postgres.NewBalances(f.db), f.caches, logger),
		Depth:       postgres.NewBook(f.db),
		Fills:       postgres.NewFills(f.db),
		StreamSeats: placement.NewStreamSeats(f.queue),
		Probes: []gateway.Probe{
			{Name: "redis", Check: func(ctx context.Context) error { return f.rdb.Ping(ctx).Err() }},
			{Name: "fence", Check: queueClient.Check},
			{Name: "postgres", Check: f.db.Ping},
		},
		Logger: logger,
	}
	f.url, _ = f.startGateway(t, f.metrics)
	f.http = apitest.Client(t)
	t.Cleanup(func() {
		for _, key := range f.keys {
			if strings.Contains(f.logs.String(), key) {
				t.Errorf("an API key appears in the gateway's logs")
			}
		}
		for _, secret := range f.secrets {
			if strings.Contains(f.logs.String(), secret) {
				t.Errorf("a signing secret appears in the gateway's logs")
			}
		}
	})
	return f
}

// eventTailBlock is how long the tail loop of a test gateway's event
// streams waits: short, so a stream's first events come soon.
const eventTailBlock = 100 * time.Millisecond

// startGateway starts a gateway on the fixture's stores, with metrics on
// registry and its event streams configured by opts, and returns its URL
// and what stops it as cmd/gateway does: its streams end, then the server.
// The cleanup stops it, if the test did not.
func (f *fixture) startGateway(t testing.TB, registry *prometheus.Registry, opts ...placement.EventStreamsOption) (string, func()) {
	t.Helper()
	deps := f.deps
	deps.Metrics = registry
	deps.Events = placement.NewEventStreams(f.events, append([]placement.EventStreamsOption{
		placement.WithEventTailBlock(eventTailBlock), placement.WithEventLogger(deps.Logger)}, opts...)...)
	httpServer := httptest.NewServer(gateway.New(deps, f.config))
	stop := sync.OnceFunc(func() {
		deps.Events.Close()
		httpServer.Close()
	})
	t.Cleanup(stop)
	return httpServer.URL, stop
}

// newFixtureAccount adds a customer account with an API key and returns the key.
func newFixtureAccount(t testing.TB, f *fixture) string {
	t.Helper()
	return newFixtureKey(t, f, orders.KeySpec{Scopes: orders.AllScopes}).Key.Reveal()
}

// newFixtureKey adds a customer account with an API key issued for spec.
func newFixtureKey(t testing.TB, f *fixture, spec orders.KeySpec) orders.IssuedKey {
	t.Helper()
	ctx := context.Background()
	store := postgres.NewAccounts(f.db, postgres.SealSecretsWith(f.sealer))
	account, err := store.Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	issued, err := store.IssueKeyFor(ctx, account, spec)
	if err != nil {
		t.Fatal(err)
	}
	f.accounts, f.keys, f.keyIDs = append(f.accounts, account), append(f.keys, issued.Key.Reveal()), append(f.keyIDs, issued.ID)
	if !issued.SigningSecret.IsZero() {
		f.secrets = append(f.secrets, issued.SigningSecret.Reveal())
	}
	return issued
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var decoded map[string]any
	if err := json.Unmarshal(r.body, &decoded); err != nil {
		t.Fatalf("response body %q: %v", r.body, err)
	}
	return decoded
}

// do sends a request with the key (none when empty) through the contract-checking client.
func (f *fixture) do(t testing.TB, client *http.Client, method, path, key, contentType, body string) response {
	t.Helper()
	return f.doWith(t, client, method, path, key, contentType, body, nil)
}

// doWith is do with the header's fields added to the request's.
func (f *fixture) doWith(t testing.TB, client *http.Client, method, path, key, contentType, body string, header http.Header) response {
	t.Helper()
	req := newRequest(t, method, f.url+path, key, header, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: data}
}

// newRequest is a request with the key (none when empty) and the header's
// fields.
func newRequest(t testing.TB, method, url, key string, header http.Header, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range header {
		req.Header[name] = values
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return req
}

// scrape reads the gateway's series the way Prometheus does, in the text
// exposition format, as cmd/gateway serves them on its metrics listener.
func (f *fixture) scrape(t testing.TB) []byte {
	t.Helper()
	return scrapeRegistry(t, f.metrics)
}

// scrapeRegistry reads a registry's series as scrape does.
func scrapeRegistry(t testing.TB, registry *prometheus.Registry) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	recorder := httptest.NewRecorder()
	promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).ServeHTTP(recorder, req)
	if recorder.Code != http.StatusOK || !strings.HasPrefix(recorder.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: %d %q %s", recorder.Code, recorder.Header().Get("Content-Type"), recorder.Body)
	}
	return recorder.Body.Bytes()
}

func (f *fixture) place(t testing.TB, key, body string) response {
	t.Helper()
	return f.do(t, f.http, http.MethodPost, "/v1/orders", key, "application/json", body)
}

func (f *fixture) get(t testing.TB, key, id string) response {
	t.Helper()
	return f.do(t, f.http, http.MethodGet, "/v1/orders/"+id, key, "", "")
}

func (f *fixture) cancel(t testing.TB, key, id string) response {
	t.Helper()
	return f.do(t, f.http, http.MethodDelete, "/v1/orders/"+id, key, "", "")
}

// placeNew places a new limit order and returns its id.
func (f *fixture) placeNew(t testing.TB, key, clientOrderID string) string {
	t.Helper()
	res := f.place(t, key, limitOrder(clientOrderID))
	if res.status != http.StatusAccepted {
		t.Fatalf("place %s: %d %s", clientOrderID, res.status, res.body)
	}
	return res.json(t)["id"].(string)
}

// claim takes the next pending order as a worker would and checks it is the
// one the test expects.
func (f *fixture) claim(t testing.TB, id string) emq.Claim {
	t.Helper()
	claims, err := f.queue.Claim(context.Background(), 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 1 || claims[0].ID != id {
		t.Fatalf("claimed %+v, want order %s", claims, id)
	}
	return claims[0]
}

// queueKeys lists the keys of the queues that hold orders (not their
// declared kinds, nor the rate limiter's buckets).
func (f *fixture) queueKeys(t testing.TB) []string {
	t.Helper()
	all := testserver.Keys(t, f.rdb, "*")
	var written []string
	for _, key := range all {
		// Any queue's rate-limit buckets (the instruments' and the
		// limits shards') and declared kinds are not orders.
		if !strings.HasSuffix(key, ":kinds") && key != "{emq}:version" && key != "{emq}:queues" && !strings.Contains(key, "}:bucket:") {
			written = append(written, key)
		}
	}
	return written
}

func limitOrder(clientOrderID string) string {
	return `{"client_order_id":"` + clientOrderID + `","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00"}`
}
