package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// balanceFixture is the gateway fixture with the balance read side wired as
// cmd/gateway wires it, plus the coherence job mode a worker runs.
type balanceFixture struct {
	*fixture
	url      string
	client   *emq.Client
	ledger   *postgres.Ledger
	relay    *placement.OutboxRelay
	consumer *placement.BalanceCoherence
}

func newBalanceFixture(t testing.TB, accounts int) *balanceFixture {
	t.Helper()
	ctx := context.Background()
	f := &balanceFixture{fixture: newFixture(t, accounts)}
	var err error
	if f.client, err = emq.Connect(ctx, f.rdb); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(f.logs, nil))
	f.url = f.serve(t, placement.NewBalances(postgres.NewBalances(f.db), f.caches, logger))
	f.ledger = postgres.NewLedger(f.db)
	f.relay = placement.NewOutboxRelay(postgres.NewOutbox(f.db), f.client, placement.CoherenceModes, logger)
	if err := f.relay.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	f.consumer = placement.NewBalanceCoherence(postgres.NewBalances(f.db), f.caches, logger)
	return f
}

// serve starts a gateway reading balances from balances and returns its URL.
func (f *balanceFixture) serve(t testing.TB, balances gateway.BalanceReader) string {
	t.Helper()
	server := gateway.New(gateway.Deps{
		Instruments: f.instruments,
		Accounts:    placement.NewKeyCache(postgres.NewAccounts(f.db), 0),
		Balances:    balances,
		Logger:      slog.New(slog.NewJSONHandler(f.logs, nil)),
	}, gateway.DefaultConfig())
	httpServer := httptest.NewServer(server)
	t.Cleanup(httpServer.Close)
	return httpServer.URL
}

func (f *balanceFixture) listAt(t testing.TB, url, key string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/v1/balances", nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := apitest.Client(t, apitest.ValidateRequests()).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body json.RawMessage
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("GET /v1/balances: %v", err)
	}
	return response{status: res.StatusCode, header: res.Header, body: body}
}

// balancesOf lists the key's balances and renders them as "ASSET available vN".
func (f *balanceFixture) balancesOf(t testing.TB, key string) []string {
	t.Helper()
	res := f.listAt(t, f.url, key)
	if res.status != http.StatusOK {
		t.Fatalf("GET /v1/balances: %d %s", res.status, res.body)
	}
	var list client.BalanceList
	if err := json.Unmarshal(res.body, &list); err != nil {
		t.Fatal(err)
	}
	if list.Balances == nil {
		t.Fatalf("balances is %s, want a list", res.body)
	}
	rendered := make([]string, len(list.Balances))
	for i, b := range list.Balances {
		rendered[i] = fmt.Sprintf("%s %s v%d", b.Asset, b.Available, b.Version)
		// No order rests in these tests: every balance shows held zero,
		// with its available part's decimals.
		if _, fraction, _ := strings.Cut(b.Available, "."); b.Held != strings.TrimSuffix("0."+strings.Repeat("0", len(fraction)), ".") {
			t.Errorf("%s held %q, want zero with the decimals of %s", b.Asset, b.Held, b.Available)
		}
	}
	return rendered
}

func (f *balanceFixture) deposit(t testing.TB, account, asset, amount string) {
	t.Helper()
	if err := f.ledger.Deposit(context.Background(), account, asset, amount); err != nil {
		t.Fatal(err)
	}
}

func TestBalancesShowOnlyTheCallersOwn(t *testing.T) {
	testserver.Parallel(t)
	f := newBalanceFixture(t, 3)
	f.deposit(t, f.accounts[0], "USD", "100")
	f.deposit(t, f.accounts[0], "BTC", "1.5")
	f.deposit(t, f.accounts[0], "BTC", "0.25")
	f.deposit(t, f.accounts[1], "ETH", "2")

	for _, c := range []struct {
		key  string
		want string
	}{
		{f.keys[0], "[BTC 1.75000000 v2 USD 100.00 v1]"},
		{f.keys[1], "[ETH 2.00000000 v1]"},
		{f.keys[2], "[]"},
	} {
		if got := fmt.Sprint(f.balancesOf(t, c.key)); got != c.want {
			t.Errorf("balances %s, want %s", got, c.want)
		}
	}
}

func TestBalancesNeedAValidKey(t *testing.T) {
	testserver.Parallel(t)
	f := newBalanceFixture(t, 1)
	for _, key := range []string{"", "ogk_unknown"} {
		res := f.listAt(t, f.url, key)
		if res.status != http.StatusUnauthorized || res.header.Get("WWW-Authenticate") == "" {
			t.Errorf("key %q: %d %s, want 401", key, res.status, res.body)
		}
	}
}

// TestBalanceChangeShowsOnceItsCoherenceJobRan follows one change through the
// whole job mode: the outbox row, the relay onto ecc.coh.balances, the
// consumer, and the read.
func TestBalanceChangeShowsOnceItsCoherenceJobRan(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newBalanceFixture(t, 1)
	account, key := f.accounts[0], f.keys[0]
	f.deposit(t, account, "USD", "100")
	if got, want := fmt.Sprint(f.balancesOf(t, key)), "[USD 100.00 v1]"; got != want {
		t.Fatalf("balances %s, want %s", got, want)
	}

	// A withdrawal, and the outbox row it wrote for the account's balance.
	if err := f.ledger.Withdraw(ctx, account, "USD", "40"); err != nil {
		t.Fatal(err)
	}
	var entry orders.OutboxEntry
	name := orders.BalanceName(account, "USD")
	if err := f.db.QueryRow(ctx, `SELECT j.id, j.name, j.version, j.payload
		FROM outbox j JOIN balances b ON j.name = $1 AND j.version = b.version
		WHERE b.account_id = $2 AND b.asset = 'USD'`, name, account).Scan(&entry.ID, &entry.Name, &entry.Version, &entry.Payload); err != nil {
		t.Fatal(err)
	}
	// Until its coherence job runs, the cache answers.
	if got, want := fmt.Sprint(f.balancesOf(t, key)), "[USD 100.00 v1]"; got != want {
		t.Errorf("before the coherence job: balances %s, want the cached %s", got, want)
	}

	f.relay.Relay(ctx, []orders.OutboxEntry{entry})
	claims, err := f.client.Queue(placement.CoherenceJobQueue(placement.BalancesTable, name+"@2")).Claim(ctx, 10, time.Minute)
	if err != nil || len(claims) != 1 || string(claims[0].Payload) != name+"@2" {
		t.Fatalf("claimed %+v, %v; want the one job %s@2", claims, err, name)
	}
	if err := f.consumer.Handle(ctx, claims[0]); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(f.balancesOf(t, key)), "[USD 60.00 v2]"; got != want {
		t.Errorf("after the coherence job: balances %s, want %s", got, want)
	}
}

func TestBalancesWhenADependencyIsDown(t *testing.T) {
	testserver.Parallel(t)
	f := newBalanceFixture(t, 1)
	f.deposit(t, f.accounts[0], "ETH", "3")

	t.Run("PostgreSQL down behind the balances", func(t *testing.T) {
		dead, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(dead.Close)
		url := f.serve(t, placement.NewBalances(postgres.NewBalances(dead), nil, nil))
		res := f.listAt(t, url, f.keys[0])
		if res.status != http.StatusServiceUnavailable || res.header.Get("Retry-After") == "" {
			t.Errorf("%d %s, want 503 with Retry-After", res.status, res.body)
		}
	})

	// The cache is what keeps versions from going back; without it, 503.
	t.Run("Redis down", func(t *testing.T) {
		server := f.redis.Single(t, "stops Redis")
		server.Stop(t)
		defer server.Restart(t)
		res := f.listAt(t, f.url, f.keys[0])
		if res.status != http.StatusServiceUnavailable {
			t.Errorf("%d %s, want 503", res.status, res.body)
		}
	})

	t.Run("not wired", func(t *testing.T) {
		res := f.listAt(t, f.serve(t, nil), f.keys[0])
		if res.status != http.StatusInternalServerError {
			t.Errorf("%d %s, want 500", res.status, res.body)
		}
	})
}

func TestGeneratedClientListsBalances(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newBalanceFixture(t, 1)
	f.deposit(t, f.accounts[0], "USD", "12.5")
	sdk, err := client.NewClientWithResponses(f.url,
		client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, nil, apitest.ValidateRequests())}),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+f.keys[0])
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	listed, err := sdk.ListBalancesWithResponse(ctx, nil)
	if err != nil || listed.JSON200 == nil {
		t.Fatalf("list: %v %d %s", err, listed.StatusCode(), listed.Body)
	}
	want := []client.Balance{{Asset: "USD", Available: "12.50", Held: "0.00", Version: 1}}
	if fmt.Sprint(listed.JSON200.Balances) != fmt.Sprint(want) {
		t.Errorf("balances %+v, want %+v", listed.JSON200.Balances, want)
	}
}
