package gateway_test

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// finalOrder is an orders row as settlement or a cancel leaves it: a BTC-USD
// limit buy of 0.01 at 50000 unless the test says otherwise.
type finalOrder struct {
	id, account, status string
	symbol, typ         string
	quantity, price     string
	// notional is a filled order's filled_notional: quantity × price.
	notional string
	reason   string
}

// insertFinalOrder writes the row directly, as settlement would (a filled
// row as the market's migration leaves an order settled before it: its one
// ledger transaction and fill at the limit price), and returns its id.
func (f *fixture) insertFinalOrder(t testing.TB, row finalOrder) string {
	t.Helper()
	ctx := context.Background()
	if row.id == "" {
		row.id = orders.NewOrderID()
	}
	if row.symbol == "" {
		row.symbol, row.typ, row.quantity, row.price, row.notional = "BTC-USD", "limit", "0.01", "50000", "500"
	}
	created, err := orders.ParseOrderID(row.id)
	if err != nil {
		t.Fatal(err)
	}
	var price, reason, fillPrice, fillQuantity, fillNotional *string
	var ledgerTx *int64
	if row.price != "" {
		price = &row.price
	}
	switch row.status {
	case "filled":
		fillPrice, fillQuantity, fillNotional = price, &row.quantity, &row.notional
		var id int64
		if err := f.db.QueryRow(ctx, `INSERT INTO ledger_transactions (kind, order_id) VALUES ('settlement', $1) RETURNING id`, row.id).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ledgerTx = &id
	case "rejected":
		if row.reason == "" {
			row.reason = "insufficient_funds"
		}
		reason = &row.reason
	}
	if _, err := f.db.Exec(ctx, `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price,
		status, reject_reason, fill_price, fill_quantity, fill_notional, ledger_transaction_id, created_at, finished_at,
		time_in_force, filled_quantity, filled_notional, sequence)
		VALUES ($1, $2, $3, $4, 'buy', $5, $6::numeric, $7::numeric, $8, $9, $10::numeric, $11::numeric, $12::numeric, $13, $14, $15,
		CASE WHEN $5 = 'market' THEN 'ioc' ELSE 'gtc' END, coalesce($11::numeric, 0), coalesce($12::numeric, 0),
		CASE WHEN $8 IN ('open', 'partially_filled') THEN nextval('orders_book_sequence') END)
		ON CONFLICT (id) DO NOTHING`,
		row.id, row.account, "c-"+row.id[len(row.id)-8:], row.symbol, row.typ, row.quantity, price,
		row.status, reason, fillPrice, fillQuantity, fillNotional, ledgerTx, created, created.Add(5*time.Millisecond)); err != nil {
		t.Fatalf("insert order row %+v: %v", row, err)
	}
	return row.id
}

// list reads one page of GET /v1/orders with the query, through a client that
// checks the request against the spec too.
func (f *fixture) list(t testing.TB, key string, query url.Values) response {
	t.Helper()
	return f.do(t, apitest.Client(t, apitest.ValidateRequests()), http.MethodGet, "/v1/orders?"+query.Encode(), key, "", "")
}

// listAll follows next_cursor to the end and returns the ids in order and the
// page sizes.
func (f *fixture) listAll(t testing.TB, key string, query url.Values) (ids []string, sizes []int) {
	t.Helper()
	for range 100 {
		res := f.list(t, key, query)
		if res.status != http.StatusOK {
			t.Fatalf("list %v: %d %s", query, res.status, res.body)
		}
		page := res.json(t)
		listed := page["orders"].([]any)
		for _, order := range listed {
			ids = append(ids, order.(map[string]any)["id"].(string))
		}
		sizes = append(sizes, len(listed))
		next, more := page["next_cursor"].(string)
		if !more {
			return ids, sizes
		}
		query.Set("cursor", next)
	}
	t.Fatal("the listing never ends")
	return nil, nil
}

func newestFirst(ids []string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func TestListOrdersPagesNewestFirst(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 3)
	alice, bob := f.accounts[0], f.accounts[1]
	statuses := []string{"filled", "rejected", "canceled", "filled", "open", "filled"}
	var aliceIDs, bobIDs []string
	byStatus := map[string][]string{}
	for i := range 120 {
		status := statuses[i%len(statuses)]
		id := f.insertFinalOrder(t, finalOrder{account: alice, status: status})
		aliceIDs, byStatus[status] = append(aliceIDs, id), append(byStatus[status], id)
		if i%20 == 0 {
			bobIDs = append(bobIDs, f.insertFinalOrder(t, finalOrder{account: bob, status: status}))
		}
	}
	// Pending and active orders live in the queue only: never listed.
	pending := f.placeNew(t, f.keys[0], "in-flight")

	tests := []struct {
		name      string
		key       string
		query     url.Values
		wantIDs   []string
		wantSizes []int
	}{
		{"default limit", f.keys[0], url.Values{}, newestFirst(aliceIDs), []int{50, 50, 20}},
		{"limit 200", f.keys[0], url.Values{"limit": {"200"}}, newestFirst(aliceIDs), []int{120}},
		{"filled, limit 25", f.keys[0], url.Values{"status": {"filled"}, "limit": {"25"}}, newestFirst(byStatus["filled"]), []int{25, 25, 10}},
		{"rejected", f.keys[0], url.Values{"status": {"rejected"}}, newestFirst(byStatus["rejected"]), []int{20}},
		{"canceled, limit 1", f.keys[0], url.Values{"status": {"canceled"}, "limit": {"1"}}, newestFirst(byStatus["canceled"]), slices.Repeat([]int{1}, 20)},
		{"open, resting in the book", f.keys[0], url.Values{"status": {"open"}}, newestFirst(byStatus["open"]), []int{20}},
		{"partially filled: none", f.keys[0], url.Values{"status": {"partially_filled"}}, nil, []int{0}},
		{"another account", f.keys[1], url.Values{}, newestFirst(bobIDs), []int{6}},
		{"an account without final orders", f.keys[2], url.Values{}, nil, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids, sizes := f.listAll(t, tt.key, tt.query)
			if !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("listed %d orders, want %d newest first:\n got %v\nwant %v", len(ids), len(tt.wantIDs), ids, tt.wantIDs)
			}
			if !slices.Equal(sizes, tt.wantSizes) {
				t.Errorf("page sizes %v, want %v", sizes, tt.wantSizes)
			}
			if slices.Contains(ids, pending) {
				t.Errorf("the pending order %s is listed", pending)
			}
		})
	}
	// A listed order reads as GET shows it.
	first := f.list(t, f.keys[0], url.Values{"limit": {"1"}})
	listed := first.json(t)["orders"].([]any)[0].(map[string]any)
	if one := f.get(t, f.keys[0], listed["id"].(string)); !reflect.DeepEqual(one.json(t), listed) {
		t.Errorf("listed as %v, read as %s", listed, one.body)
	}
	if cursor := first.json(t)["next_cursor"]; cursor != base64.RawURLEncoding.EncodeToString([]byte(listed["id"].(string))) {
		t.Errorf("next_cursor %v is not the last id in base64url", cursor)
	}
}

func TestListOrdersRefusesBadParameters(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	f.insertFinalOrder(t, finalOrder{account: f.accounts[0], status: "filled"})
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
		{"limit negative", "limit=-1", []string{"limit"}},
		{"limit with a sign", "limit=%2B5", []string{"limit"}},
		{"limit with a leading zero", "limit=050", []string{"limit"}},
		{"limit empty", "limit=", []string{"limit"}},
		{"limit twice", "limit=5&limit=6", []string{"limit"}},
		{"cursor not base64url", "cursor=T1JE%2BXzAx", []string{"cursor"}},
		{"cursor of something else", "cursor=" + cursorOf("hello"), []string{"cursor"}},
		{"cursor with padding", "cursor=" + cursorOf(orders.NewOrderID()) + "%3D", []string{"cursor"}},
		{"cursor of a lowercase id", "cursor=" + cursorOf(strings.ToLower(orders.NewOrderID())), []string{"cursor"}},
		{"cursor empty", "cursor=", []string{"cursor"}},
		{"status pending", "status=pending", []string{"status"}},
		{"status active", "status=active", []string{"status"}},
		{"status failed", "status=failed", []string{"status"}},
		{"status upper case", "status=FILLED", []string{"status"}},
		{"status settled, gone with the market", "status=settled", []string{"status"}},
		{"unknown parameter", "stauts=filled", []string{"stauts"}},
		{"all of them", "status=opened&limit=0&cursor=x&page=2", []string{"page", "limit", "cursor", "status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Invalid on purpose: only the answer is held to the spec.
			res := f.do(t, f.http, http.MethodGet, "/v1/orders?"+tt.query, f.keys[0], "", "")
			if res.status != http.StatusBadRequest {
				t.Fatalf("status %d %s, want 400", res.status, res.body)
			}
			problem := res.json(t)
			if problem["type"] != "urn:ordergate:problem:invalid-query" || problem["instance"] != "/v1/orders" {
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
	// Without any parameter, and with all of them valid, it lists.
	for _, query := range []string{"", "limit=200&status=filled&cursor=" + cursorOf(orders.NewOrderID())} {
		if res := f.do(t, f.http, http.MethodGet, "/v1/orders?"+query, f.keys[0], "", ""); res.status != http.StatusOK || len(res.json(t)["orders"].([]any)) != 1 {
			t.Errorf("list ?%s: %d %s, want the order", query, res.status, res.body)
		}
	}
}

// TestRoutesWithoutParametersRefuseThem: a parameter on a route that takes
// none is a typo or a guess (?symbol= on the balances), refused like an
// unknown one on the listings rather than silently ignored.
func TestRoutesWithoutParametersRefuseThem(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	for _, path := range []string{"/v1/balances", "/v1/instruments"} {
		t.Run(path, func(t *testing.T) {
			res := f.do(t, f.http, http.MethodGet, path+"?asset=USD", f.keys[0], "", "")
			if res.status != http.StatusBadRequest {
				t.Fatalf("status %d %s, want 400", res.status, res.body)
			}
			problem := res.json(t)
			errs, _ := problem["errors"].([]any)
			if problem["type"] != "urn:ordergate:problem:invalid-query" || len(errs) != 1 ||
				errs[0].(map[string]any)["reason"] != "query parameter asset is not defined; this operation takes no query parameters" {
				t.Errorf("problem %s", res.body)
			}
		})
	}
}

// TestGetShowsFinalOrdersFromPostgres: a final order is read from its orders
// row with its fill or reject reason; an order in flight from the queue; and
// an order settlement just recorded shows settled even while its job is
// still held.
func TestGetShowsFinalOrdersFromPostgres(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	key, account := f.keys[0], f.accounts[0]
	filledID := f.insertFinalOrder(t, finalOrder{account: account, status: "filled", symbol: "ETH-USD", typ: "limit", quantity: "0.25", price: "3000.05", notional: "750.0125"})
	rejectedID := f.insertFinalOrder(t, finalOrder{account: account, status: "rejected", symbol: "ETH-BTC", typ: "market", quantity: "0.5", reason: "instrument_halted"})
	created := func(id string) string {
		at, _ := orders.ParseOrderID(id)
		return at.Format(time.RFC3339Nano)
	}
	finished := func(id string) string {
		at, _ := orders.ParseOrderID(id)
		return at.Add(5 * time.Millisecond).Format(time.RFC3339Nano)
	}
	tests := []struct {
		name string
		id   string
		want map[string]any
	}{
		{"filled", filledID, map[string]any{
			"id": filledID, "client_order_id": "c-" + filledID[22:], "account_id": account,
			"symbol": "ETH-USD", "side": "buy", "type": "limit", "quantity": "0.250", "price": "3000.05",
			"status": "filled", "created_at": created(filledID), "finished_at": finished(filledID),
			"time_in_force": "gtc",
		}},
		{"rejected", rejectedID, map[string]any{
			"id": rejectedID, "client_order_id": "c-" + rejectedID[22:], "account_id": account,
			"symbol": "ETH-BTC", "side": "buy", "type": "market", "quantity": "0.500",
			"status": "rejected", "created_at": created(rejectedID), "finished_at": finished(rejectedID),
			"reject_reason": "instrument_halted", "time_in_force": "ioc",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := f.get(t, key, tt.id)
			if res.status != http.StatusOK {
				t.Fatalf("get: %d %s", res.status, res.body)
			}
			// The fields named; the market's fill fields (filled_quantity,
			// fees, ...) come with its row reading and are not pinned here.
			got := res.json(t)
			for name, want := range tt.want {
				if !reflect.DeepEqual(got[name], want) {
					t.Errorf("%s: got %v, want %v (order %v)", name, got[name], want, got)
				}
			}
			for _, gone := range []string{"fill_price", "fill_quantity", "fill_notional"} {
				if _, ok := got[gone]; ok {
					t.Errorf("order shows %s, which the market removed: %v", gone, got)
				}
			}
		})
	}

	t.Run("pending, then settled while its job is held", func(t *testing.T) {
		id := f.placeNew(t, key, "in-flight")
		if res := f.get(t, key, id); res.json(t)["status"] != "pending" || res.json(t)["finished_at"] != nil {
			t.Fatalf("before a worker: %s, want it pending from the queue", res.body)
		}
		claim := f.claim(t, id)
		if res := f.get(t, key, id); res.json(t)["status"] != "active" {
			t.Fatalf("held: %s, want it active", res.body)
		}
		f.insertFinalOrder(t, finalOrder{id: id, account: account, status: "filled", symbol: "BTC-USD", typ: "limit", quantity: "0.01", price: "50000", notional: "500"})
		if res := f.get(t, key, id); res.json(t)["status"] != "filled" {
			t.Errorf("recorded, job still held: %s, want it settled from the row", res.body)
		}
		if err := f.queue.Complete(context.Background(), id, claim.Token); err != nil {
			t.Fatal(err)
		}
		if res := f.get(t, key, id); res.json(t)["status"] != "filled" {
			t.Errorf("job completed: %s, want settled, never accepted", res.body)
		}
		assertNotCancelable(t, f.cancel(t, key, id), "filled")
	})
}

func TestCancelRecordsTheOrderAndListsIt(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	key := f.keys[0]
	id := f.placeNew(t, key, "to-cancel")
	settled := f.insertFinalOrder(t, finalOrder{account: f.accounts[0], status: "filled"})

	res := f.cancel(t, key, id)
	if res.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", res.status, res.body)
	}
	canceled := res.json(t)
	if canceled["status"] != "canceled" || canceled["canceled_at"] == nil || canceled["finished_at"] != canceled["canceled_at"] {
		t.Errorf("canceled order: %s, want finished_at = canceled_at", res.body)
	}
	var status string
	if err := f.db.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, id).Scan(&status); err != nil || status != "canceled" {
		t.Fatalf("orders row: %q, %v; want canceled", status, err)
	}
	read := f.get(t, key, id).json(t)
	if !reflect.DeepEqual(read, canceled) {
		t.Errorf("read back as %v, canceled as %v", read, canceled)
	}
	listed := f.list(t, key, url.Values{"status": {"canceled"}}).json(t)["orders"].([]any)
	if len(listed) != 1 || !reflect.DeepEqual(listed[0], read) {
		t.Errorf("canceled listing %v, want only %v", listed, read)
	}
	if ids, _ := f.listAll(t, key, url.Values{"status": {"filled"}}); !slices.Equal(ids, []string{settled}) {
		t.Errorf("settled listing %v, want only %s", ids, settled)
	}
	assertNotCancelable(t, f.cancel(t, key, id), "canceled")
	assertNotCancelable(t, f.cancel(t, key, settled), "filled")
}

// TestCancelStandsWhenItsRowCannotBeWritten: the queue canceled the order, so
// the client hears 200 even though the row failed; the failure is logged, and
// the next read writes the row.
// TestCancelWithoutItsRowIsNotAcknowledged: the queue canceled the job but
// the canceled row could not be written, so a worker whose lease ran out could
// still settle the order. The answer is 503, not 200; the retry after the
// database recovers reads the order, writes the row, and reports canceled.
func TestCancelWithoutItsRowIsNotAcknowledged(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	ctx := context.Background()
	key := f.keys[0]
	id := f.placeNew(t, key, "unrecorded")
	if _, err := f.db.Exec(ctx, `
		CREATE FUNCTION refuse_order_writes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'orders table unwritable (test)'; END $$;
		CREATE TRIGGER refuse_order_writes BEFORE INSERT ON orders
			FOR EACH ROW EXECUTE FUNCTION refuse_order_writes();`); err != nil {
		t.Fatal(err)
	}
	res := f.cancel(t, key, id)
	if res.status != http.StatusServiceUnavailable {
		t.Fatalf("cancel: %d %s, want 503", res.status, res.body)
	}
	if !strings.Contains(f.logs.String(), "order canceled in the queue but its orders row was not written") {
		t.Errorf("the failed write is not logged:\n%s", f.logs.String())
	}
	if listed := f.list(t, key, url.Values{}).json(t)["orders"].([]any); len(listed) != 0 {
		t.Fatalf("listed %v with no row written", listed)
	}
	if _, err := f.db.Exec(ctx, `DROP TRIGGER refuse_order_writes ON orders`); err != nil {
		t.Fatal(err)
	}
	if retry := f.cancel(t, key, id); retry.status != http.StatusConflict || !strings.Contains(string(retry.body), "canceled") {
		t.Fatalf("retried cancel: %d %s, want 409 naming canceled", retry.status, retry.body)
	}
	if read := f.get(t, key, id); read.json(t)["status"] != "canceled" {
		t.Fatalf("read: %s", read.body)
	}
	if listed := f.list(t, key, url.Values{"status": {"canceled"}}).json(t)["orders"].([]any); len(listed) != 1 || listed[0].(map[string]any)["id"] != id {
		t.Errorf("after a read, canceled listing %v, want the order", listed)
	}
}

// TestOrdersOfOtherAccountsStayHidden: every order route answers another
// account's order, wherever it lives, exactly as an unknown one.
func TestOrdersOfOtherAccountsStayHidden(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 2)
	owner, other := f.keys[0], f.keys[1]
	ids := map[string]string{
		"pending (queue)":   f.placeNew(t, owner, "pending"),
		"settled (orders)":  f.insertFinalOrder(t, finalOrder{account: f.accounts[0], status: "filled"}),
		"rejected (orders)": f.insertFinalOrder(t, finalOrder{account: f.accounts[0], status: "rejected"}),
		"canceled (both)":   f.placeNew(t, owner, "canceled"),
		"unknown (nowhere)": "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2",
	}
	if res := f.cancel(t, owner, ids["canceled (both)"]); res.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", res.status, res.body)
	}
	unknown := f.get(t, other, ids["unknown (nowhere)"]).json(t)
	for name, id := range ids {
		for _, method := range []string{http.MethodGet, http.MethodDelete} {
			t.Run(method+" "+name, func(t *testing.T) {
				res := f.do(t, f.http, method, "/v1/orders/"+id, other, "", "")
				if res.status != http.StatusNotFound {
					t.Fatalf("status %d %s, want 404", res.status, res.body)
				}
				problem := res.json(t)
				if problem["title"] != unknown["title"] || problem["detail"] != unknown["detail"] || problem["type"] != unknown["type"] {
					t.Errorf("answers %v, an unknown id %v: ids can be probed", problem, unknown)
				}
				if strings.Contains(string(res.body), f.accounts[0]) {
					t.Errorf("404 leaks the owner: %s", res.body)
				}
			})
		}
	}
	t.Run("GET list", func(t *testing.T) {
		for _, status := range []string{"", "filled", "rejected", "canceled"} {
			query := url.Values{}
			if status != "" {
				query.Set("status", status)
			}
			if mine, _ := f.listAll(t, other, query); len(mine) != 0 {
				t.Errorf("the other account lists %v", mine)
			}
			// A cursor names an id only: another account's cursor lists
			// nothing of the owner's.
			query.Set("cursor", base64.RawURLEncoding.EncodeToString([]byte("ORD_7ZZZZZZZZZZZZZZZZZZZZZZZZZ")))
			if mine, _ := f.listAll(t, other, query); len(mine) != 0 {
				t.Errorf("the other account lists %v with a cursor", mine)
			}
		}
		if theirs, _ := f.listAll(t, owner, url.Values{}); len(theirs) != 3 {
			t.Errorf("the owner lists %v, want its 3 final orders", theirs)
		}
	})
	if res := f.get(t, owner, ids["pending (queue)"]); res.json(t)["status"] != "pending" {
		t.Errorf("the owner's pending order after the other account's attempts: %s", res.body)
	}
}

// TestGeneratedClientListsOrders pages through the listing with the client
// generated from the spec, as an SDK user would.
func TestGeneratedClientListsOrders(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	ctx := context.Background()
	var want []string
	for _, status := range []string{"filled", "rejected", "canceled", "filled", "rejected"} {
		want = append(want, f.insertFinalOrder(t, finalOrder{account: f.accounts[0], status: status}))
	}
	sdkOf := func(opts ...apitest.Option) *client.ClientWithResponses {
		sdk, err := client.NewClientWithResponses(f.url,
			client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, nil, opts...)}),
			client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
				req.Header.Set("Authorization", "Bearer "+f.keys[0])
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		return sdk
	}
	sdk := sdkOf(apitest.ValidateRequests())
	limit := 2
	params := &client.ListOrdersParams{Limit: &limit}
	var got []string
	for range 10 {
		res, err := sdk.ListOrdersWithResponse(ctx, params)
		if err != nil || res.JSON200 == nil {
			t.Fatalf("list: %v %d %s", err, res.StatusCode(), res.Body)
		}
		for _, order := range res.JSON200.Orders {
			got = append(got, order.ID)
			if order.FinishedAt == nil || (order.Status == client.OrderStatusRejected) != (order.RejectReason != nil) {
				t.Errorf("order %+v lacks its final fields", order)
			}
		}
		if res.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = res.JSON200.NextCursor
	}
	if !slices.Equal(got, newestFirst(want)) {
		t.Errorf("listed %v, want %v", got, newestFirst(want))
	}
	status := client.ListOrdersParamsStatusRejected
	rejected, err := sdk.ListOrdersWithResponse(ctx, &client.ListOrdersParams{Status: &status})
	if err != nil || rejected.JSON200 == nil || len(rejected.JSON200.Orders) != 2 {
		t.Fatalf("rejected: %v %d %s", err, rejected.StatusCode(), rejected.Body)
	}
	bad := 0
	// Invalid on purpose: only the answer is held to the spec.
	refused, err := sdkOf().ListOrdersWithResponse(ctx, &client.ListOrdersParams{Limit: &bad})
	if err != nil || refused.ApplicationProblemJSON400 == nil || refused.ApplicationProblemJSON400.Type != client.ProblemTypeInvalidQuery {
		t.Errorf("limit 0: %v %d %s", err, refused.StatusCode(), refused.Body)
	}
}
