package gateway_test

import (
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// startWorker settles the fixture's queue with the real settler until the
// test ends, as cmd/worker does.
func (f *fixture) startWorker(t testing.TB) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	quiet := slog.New(slog.DiscardHandler)
	settler := postgres.NewSettler(f.db, nil, quiet)
	var working sync.WaitGroup
	working.Go(func() {
		err := f.queue.Work(ctx, settlement.Settle(settler), emq.WorkerOptions{
			Concurrency: 2, Lease: 10 * time.Second, Logger: quiet,
			Retry: emq.RetryPolicy{MaxAttempts: 10, BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second},
		})
		if err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	t.Cleanup(func() {
		stop()
		working.Wait()
	})
}

// awaitStatus reads the order until it shows the status.
func (f *fixture) awaitStatus(t testing.TB, key, id, status string) {
	t.Helper()
	var last response
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = f.get(t, key, id); last.status == http.StatusOK && last.json(t)["status"] == status {
			return
		}
	}
	t.Fatalf("order %s: %d %s, want status %s", id, last.status, last.body, status)
}

// fills reads one page of GET /v1/fills, through a client that checks the
// request against the spec too.
func (f *fixture) fills(t testing.TB, key string, query url.Values) response {
	t.Helper()
	return f.do(t, apitest.Client(t, apitest.ValidateRequests()), http.MethodGet, "/v1/fills?"+query.Encode(), key, "", "")
}

// fillsAll follows next_cursor to the end and returns the fills in order and
// the page sizes.
func (f *fixture) fillsAll(t testing.TB, key string, query url.Values) (fills []map[string]any, sizes []int) {
	t.Helper()
	for range 100 {
		res := f.fills(t, key, query)
		if res.status != http.StatusOK {
			t.Fatalf("fills %v: %d %s", query, res.status, res.body)
		}
		page := res.json(t)
		listed := page["fills"].([]any)
		for _, fill := range listed {
			fills = append(fills, fill.(map[string]any))
		}
		sizes = append(sizes, len(listed))
		next, more := page["next_cursor"].(string)
		if !more {
			return fills, sizes
		}
		query.Set("cursor", next)
	}
	t.Fatal("the listing never ends")
	return nil, nil
}

func idsOf(fills []map[string]any) []string {
	var ids []string
	for _, fill := range fills {
		ids = append(ids, fill["id"].(string))
	}
	return ids
}

// TestFillsOfASettledTrade: a crossing pair from two accounts, settled by
// the real settlement, reads as one fill for each, from its own side.
func TestFillsOfASettledTrade(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newFixture(t, 3)
	ledger := postgres.NewLedger(f.db)
	for _, funds := range [][3]string{{f.accounts[0], "BTC", "1"}, {f.accounts[1], "USD", "10000"}} {
		if err := ledger.Deposit(ctx, funds[0], funds[1], funds[2]); err != nil {
			t.Fatal(err)
		}
	}
	f.startWorker(t)
	maker, taker := f.keys[0], f.keys[1]
	ask := f.place(t, maker, `{"client_order_id":"ask","symbol":"BTC-USD","side":"sell","type":"limit","quantity":"0.01","price":"50000.00"}`)
	if ask.status != http.StatusAccepted {
		t.Fatalf("ask: %d %s", ask.status, ask.body)
	}
	askID := ask.json(t)["id"].(string)
	f.awaitStatus(t, maker, askID, "open")
	bid := f.place(t, taker, `{"client_order_id":"bid","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01","price":"50000.00"}`)
	if bid.status != http.StatusAccepted {
		t.Fatalf("bid: %d %s", bid.status, bid.body)
	}
	bidID := bid.json(t)["id"].(string)
	f.awaitStatus(t, taker, bidID, "filled")
	f.awaitStatus(t, maker, askID, "filled")

	// 0.01 × 50000 = 500: the maker pays 10 bps, the taker 20.
	want := map[string]map[string]any{
		maker: {"order_id": askID, "symbol": "BTC-USD", "side": "sell", "price": "50000.00", "quantity": "0.01000",
			"fee": "0.50", "fee_asset": "USD", "liquidity": "maker"},
		taker: {"order_id": bidID, "symbol": "BTC-USD", "side": "buy", "price": "50000.00", "quantity": "0.01000",
			"fee": "1.00", "fee_asset": "USD", "liquidity": "taker"},
	}
	seen := map[string]map[string]any{}
	for _, key := range []string{maker, taker} {
		res := f.fills(t, key, url.Values{})
		if res.status != http.StatusOK || res.header.Get("RateLimit-Limit") == "" {
			t.Fatalf("fills: %d %v %s, want 200 with the rate limit's headers", res.status, res.header, res.body)
		}
		page := res.json(t)
		listed := page["fills"].([]any)
		if len(listed) != 1 || page["next_cursor"] != nil {
			t.Fatalf("fills %s, want one and no cursor", res.body)
		}
		fill := listed[0].(map[string]any)
		for name, value := range want[key] {
			if fill[name] != value {
				t.Errorf("%s: %v, want %v (fill %v)", name, fill[name], value, fill)
			}
		}
		if _, err := time.Parse(time.RFC3339Nano, fill["created_at"].(string)); err != nil || !strings.HasSuffix(fill["created_at"].(string), "Z") {
			t.Errorf("created_at %v, want RFC 3339 in UTC", fill["created_at"])
		}
		seen[key] = fill
	}
	if seen[maker]["id"] != seen[taker]["id"] || seen[maker]["created_at"] != seen[taker]["created_at"] {
		t.Errorf("one trade read as %v and %v: want one id and time", seen[maker], seen[taker])
	}

	t.Run("one order", func(t *testing.T) {
		tests := []struct {
			name, key, order string
			want             []map[string]any
		}{
			{"the maker's ask", maker, askID, []map[string]any{seen[maker]}},
			{"the taker's bid", taker, bidID, []map[string]any{seen[taker]}},
			{"the taker's bid, asked by the maker", maker, bidID, nil},
			{"the maker's ask, asked by the taker", taker, askID, nil},
			{"the ask, asked by a third account", f.keys[2], askID, nil},
			{"an order nobody placed", maker, orders.NewOrderID(), nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				fills, _ := f.fillsAll(t, tt.key, url.Values{"order_id": {tt.order}})
				if !reflect.DeepEqual(fills, tt.want) {
					t.Errorf("fills %v, want %v", fills, tt.want)
				}
			})
		}
	})

	t.Run("generated client", func(t *testing.T) {
		sdk, err := client.NewClientWithResponses(f.url,
			client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, nil, apitest.ValidateRequests())}),
			client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
				req.Header.Set("Authorization", "Bearer "+taker)
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		order := bidID
		res, err := sdk.ListFillsWithResponse(ctx, &client.ListFillsParams{OrderID: &order})
		if err != nil || res.JSON200 == nil || len(res.JSON200.Fills) != 1 {
			t.Fatalf("list: %v %d %s", err, res.StatusCode(), res.Body)
		}
		fill := res.JSON200.Fills[0]
		if fill.ID != seen[taker]["id"] || fill.OrderID != bidID || fill.Side != client.SideBuy ||
			fill.Liquidity != client.FillLiquidityTaker || fill.Fee != "1.00" || fill.FeeAsset != "USD" {
			t.Errorf("fill %+v", fill)
		}
	})
}

// insertTrade writes a trades row directly, with a ledger transaction of its
// own (without entries: the listing reads trades only), and returns its
// fill id.
func (f *fixture) insertTrade(t testing.TB, makerOrder, takerOrder, makerAccount, takerAccount, takerSide string) string {
	t.Helper()
	ctx := context.Background()
	var transaction, trade int64
	if err := f.db.QueryRow(ctx, `INSERT INTO ledger_transactions (kind, order_id) VALUES ('trade', $1) RETURNING id`, takerOrder).Scan(&transaction); err != nil {
		t.Fatal(err)
	}
	if err := f.db.QueryRow(ctx, `INSERT INTO trades (symbol, maker_order_id, taker_order_id, maker_account_id, taker_account_id,
		taker_side, price, quantity, maker_fee, taker_fee, ledger_transaction_id, maker_fee_bps, taker_fee_bps)
		VALUES ('BTC-USD', $1, $2, $3, $4, $5, 50000, 0.01, 0.5, 1, $6, 10, 20) RETURNING id`,
		makerOrder, takerOrder, makerAccount, takerAccount, takerSide, transaction).Scan(&trade); err != nil {
		t.Fatal(err)
	}
	return orders.FillID(trade)
}

func TestListFillsPagesNewestFirst(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 3)
	alice, bob := f.accounts[0], f.accounts[1]
	// alice's ask rests and bob's bid takes it; bob's ask rests and alice's
	// bid takes it.
	aliceAsk := f.insertFinalOrder(t, finalOrder{account: alice, status: "filled"})
	aliceBid := f.insertFinalOrder(t, finalOrder{account: alice, status: "filled"})
	bobBid := f.insertFinalOrder(t, finalOrder{account: bob, status: "filled"})
	bobAsk := f.insertFinalOrder(t, finalOrder{account: bob, status: "filled"})
	var all, asks, bids []string
	for i := range 130 {
		var id string
		if i%2 == 0 {
			id = f.insertTrade(t, aliceAsk, bobBid, alice, bob, "buy")
			asks = append(asks, id)
		} else {
			id = f.insertTrade(t, bobAsk, aliceBid, bob, alice, "buy")
			bids = append(bids, id)
		}
		all = append(all, id)
	}
	slices.Reverse(all)
	slices.Reverse(asks)
	slices.Reverse(bids)

	tests := []struct {
		name      string
		key       string
		query     url.Values
		wantIDs   []string
		wantSizes []int
	}{
		{"default limit", f.keys[0], url.Values{}, all, []int{50, 50, 30}},
		{"limit 200", f.keys[0], url.Values{"limit": {"200"}}, all, []int{130}},
		{"limit 7", f.keys[0], url.Values{"limit": {"7"}}, all, append(slices.Repeat([]int{7}, 18), 4)},
		{"the ask, limit 25", f.keys[0], url.Values{"order_id": {aliceAsk}, "limit": {"25"}}, asks, []int{25, 25, 15}},
		{"the bid", f.keys[0], url.Values{"order_id": {aliceBid}}, bids, []int{50, 15}},
		{"the counterparty", f.keys[1], url.Values{"limit": {"100"}}, all, []int{100, 30}},
		{"the counterparty's order", f.keys[0], url.Values{"order_id": {bobBid}}, nil, []int{0}},
		{"an account without fills", f.keys[2], url.Values{}, nil, []int{0}},
		{"an account without fills, another's order", f.keys[2], url.Values{"order_id": {aliceAsk}}, nil, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fills, sizes := f.fillsAll(t, tt.key, tt.query)
			if ids := idsOf(fills); !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("listed %d fills, want %d newest first:\n got %v\nwant %v", len(ids), len(tt.wantIDs), ids, tt.wantIDs)
			}
			if !slices.Equal(sizes, tt.wantSizes) {
				t.Errorf("page sizes %v, want %v", sizes, tt.wantSizes)
			}
		})
	}
	// Each side sees its own order, side, fee and liquidity.
	views := map[string]map[string]any{}
	for _, key := range f.keys[:2] {
		for _, fill := range f.fills(t, key, url.Values{"limit": {"2"}}).json(t)["fills"].([]any) {
			views[fill.(map[string]any)["order_id"].(string)] = fill.(map[string]any)
		}
	}
	for order, want := range map[string]string{
		aliceAsk: "sell maker 0.50", aliceBid: "buy taker 1.00", bobBid: "buy taker 1.00", bobAsk: "sell maker 0.50",
	} {
		fill := views[order]
		if got := strings.Join([]string{fill["side"].(string), fill["liquidity"].(string), fill["fee"].(string)}, " "); got != want {
			t.Errorf("order %s's fill %v: %s, want %s", order, fill, got, want)
		}
	}
	first := f.fills(t, f.keys[0], url.Values{"limit": {"1"}}).json(t)
	if cursor := first["next_cursor"]; cursor != base64.RawURLEncoding.EncodeToString([]byte(all[0])) {
		t.Errorf("next_cursor %v is not the last id in base64url", cursor)
	}
}

func TestListFillsRefusesBadParameters(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	cursorOf := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name  string
		query string
		// want are the refused parameters, in the order errors name them.
		want []string
	}{
		{"limit zero", "limit=0", []string{"limit"}},
		{"limit over the maximum", "limit=201", []string{"limit"}},
		{"limit not a number", "limit=ten", []string{"limit"}},
		{"limit twice", "limit=5&limit=6", []string{"limit"}},
		{"cursor not base64url", "cursor=RklM%2BXzE", []string{"cursor"}},
		{"cursor of an order", "cursor=" + cursorOf(orders.NewOrderID()), []string{"cursor"}},
		{"cursor of fill 0", "cursor=" + cursorOf("FIL_0"), []string{"cursor"}},
		{"cursor of a padded fill id", "cursor=" + cursorOf("FIL_01"), []string{"cursor"}},
		{"cursor with padding", "cursor=" + cursorOf("FIL_42") + "%3D", []string{"cursor"}},
		{"cursor empty", "cursor=", []string{"cursor"}},
		{"order_id malformed", "order_id=ORD_1", []string{"order_id"}},
		{"order_id lowercase", "order_id=" + strings.ToLower(orders.NewOrderID()), []string{"order_id"}},
		{"order_id a fill id", "order_id=FIL_42", []string{"order_id"}},
		{"order_id empty", "order_id=", []string{"order_id"}},
		{"order_id twice", "order_id=" + orders.NewOrderID() + "&order_id=" + orders.NewOrderID(), []string{"order_id"}},
		{"unknown parameter", "symbol=BTC-USD", []string{"symbol"}},
		{"all of them", "order_id=x&limit=0&cursor=x&page=2", []string{"page", "limit", "cursor", "order_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Invalid on purpose: only the answer is held to the spec.
			res := f.do(t, f.http, http.MethodGet, "/v1/fills?"+tt.query, f.keys[0], "", "")
			if res.status != http.StatusBadRequest {
				t.Fatalf("status %d %s, want 400", res.status, res.body)
			}
			problem := res.json(t)
			if problem["type"] != "urn:ordergate:problem:invalid-query" || problem["instance"] != "/v1/fills" {
				t.Errorf("problem %s", res.body)
			}
			errs, _ := problem["errors"].([]any)
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want one for each of %v", errs, tt.want)
			}
			for i, name := range tt.want {
				e := errs[i].(map[string]any)
				if e["pointer"] != "" || !strings.HasPrefix(e["reason"].(string), "query parameter "+name+" ") {
					t.Errorf("error %d = %v, want the empty pointer and a reason naming query parameter %s", i, e, name)
				}
			}
		})
	}
	// Without any parameter, and with all of them valid, it lists (nothing).
	for _, query := range []string{"", "limit=200&order_id=" + orders.NewOrderID() + "&cursor=" + cursorOf("FIL_9223372036854775807")} {
		if res := f.fills(t, f.keys[0], mustQuery(t, query)); res.status != http.StatusOK || len(res.json(t)["fills"].([]any)) != 0 {
			t.Errorf("fills ?%s: %d %s, want an empty list", query, res.status, res.body)
		}
	}
	if res := f.do(t, f.http, http.MethodGet, "/v1/fills", "", "", ""); res.status != http.StatusUnauthorized {
		t.Errorf("without a key: %d %s, want 401", res.status, res.body)
	}
}

func mustQuery(t testing.TB, query string) url.Values {
	t.Helper()
	values, err := url.ParseQuery(query)
	if err != nil {
		t.Fatal(err)
	}
	return values
}
