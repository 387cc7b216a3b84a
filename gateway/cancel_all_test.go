package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// insertRestingOrder writes a resting row as settlement leaves one (open,
// with its book sequence), for tests that run before settlement rests
// orders itself, and returns its id.
func (f *fixture) insertRestingOrder(t testing.TB, account, symbol, side, quantity, price string) string {
	t.Helper()
	id := orders.NewOrderID()
	created, _ := orders.ParseOrderID(id)
	if _, err := f.db.Exec(context.Background(), `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type,
		quantity, price, status, time_in_force, sequence, created_at)
		VALUES ($1, $2, $3, $4, $5, 'limit', $6::numeric, $7::numeric, 'open', 'gtc', nextval('orders_book_sequence'), $8)`,
		id, account, "rest-"+id[len(id)-8:], symbol, side, quantity, price, created); err != nil {
		t.Fatalf("insert resting order: %v", err)
	}
	return id
}

// TestCancelAllOrders: DELETE /v1/orders cancels the caller's pending and
// resting orders, of one symbol with ?symbol=, and no one else's.
func TestCancelAllOrders(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 2)
	key, account := f.keys[0], f.accounts[0]
	ethOrder := `{"client_order_id":"eth-1","symbol":"ETH-USD","side":"buy","type":"limit","quantity":"0.100","price":"3000.00"}`
	pendingBTC := f.placeNew(t, key, "btc-1")
	res := f.place(t, key, ethOrder)
	if res.status != http.StatusAccepted {
		t.Fatalf("place: %d %s", res.status, res.body)
	}
	pendingETH := res.json(t)["id"].(string)
	restingBTC := f.insertRestingOrder(t, account, "BTC-USD", "sell", "0.01", "51000")
	restingETH := f.insertRestingOrder(t, account, "ETH-USD", "buy", "0.1", "2900")
	othersPending := f.placeNew(t, f.keys[1], "theirs")
	othersResting := f.insertRestingOrder(t, f.accounts[1], "BTC-USD", "buy", "0.01", "49000")

	cancelAll := func(query string) []string {
		t.Helper()
		res := f.do(t, f.http, http.MethodDelete, "/v1/orders"+query, key, "", "")
		if res.status != http.StatusOK {
			t.Fatalf("DELETE /v1/orders%s: %d %s", query, res.status, res.body)
		}
		var ids []string
		for _, order := range res.json(t)["orders"].([]any) {
			o := order.(map[string]any)
			if o["status"] != "canceled" || o["account_id"] != account {
				t.Errorf("answered %v, want the caller's canceled order", o)
			}
			ids = append(ids, o["id"].(string))
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(ids ...string) []string { slices.Sort(ids); return ids }

	if got, want := cancelAll("?symbol=BTC-USD"), sorted(pendingBTC, restingBTC); !slices.Equal(got, want) {
		t.Errorf("BTC-USD canceled %v, want %v", got, want)
	}
	if got, want := cancelAll(""), sorted(pendingETH, restingETH); !slices.Equal(got, want) {
		t.Errorf("the rest canceled %v, want %v", got, want)
	}
	if got := cancelAll(""); len(got) != 0 {
		t.Errorf("a second call canceled %v, want none", got)
	}
	for _, id := range []string{pendingBTC, pendingETH} {
		if status := f.get(t, key, id).json(t)["status"]; status != "canceled" {
			t.Errorf("order %s is %v, want canceled", id, status)
		}
	}
	if status := f.get(t, f.keys[1], othersPending).json(t)["status"]; status != "pending" {
		t.Errorf("another account's pending order is %v", status)
	}
	var status string
	if err := f.db.QueryRow(context.Background(), `SELECT status FROM orders WHERE id = $1`, othersResting).Scan(&status); err != nil || status != "open" {
		t.Errorf("another account's resting order is %q (%v), want open", status, err)
	}

	t.Run("bad query", func(t *testing.T) {
		for _, query := range []string{"?symbol=DOGE-USD", "?symbol=btc", "?sym=BTC-USD", "?symbol=BTC-USD&symbol=ETH-USD"} {
			res := f.do(t, f.http, http.MethodDelete, "/v1/orders"+query, key, "", "")
			if res.status != http.StatusBadRequest || res.json(t)["type"] != "urn:ordergate:problem:invalid-query" {
				t.Errorf("%s: %d %s, want 400 invalid-query", query, res.status, res.body)
			}
		}
	})
	t.Run("needs a key", func(t *testing.T) {
		if res := f.do(t, f.http, http.MethodDelete, "/v1/orders", "", "", ""); res.status != http.StatusUnauthorized {
			t.Errorf("no key: %d %s", res.status, res.body)
		}
	})
}

// admitOrder admits an order of the account onto the queue as the gateway
// does, without the HTTP round trip, and returns its id.
func (f *fixture) admitOrder(t testing.TB, account, clientOrderID, symbol string, side orders.Side, quantity, price string) string {
	t.Helper()
	_, job, err := placement.PlaceJob(orders.PlaceCommand{
		Account: account, ClientOrderID: clientOrderID, Symbol: symbol, Side: side, Type: orders.Limit,
		Quantity: decimal.MustParse(quantity), Price: decimal.MustParse(price),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.queue.Admit(context.Background(), job); err != nil {
		t.Fatalf("admit %s: %v", clientOrderID, err)
	}
	return job.ID
}

// settleAll runs a settlement worker until every order the queue holds has
// its row, then stops it.
func (f *fixture) settleAll(t testing.TB, ids []string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	quiet := slog.New(slog.DiscardHandler)
	done := make(chan error, 1)
	go func() {
		done <- f.queue.Work(ctx, settlement.Settle(postgres.NewSettler(f.db, nil, quiet)), emq.WorkerOptions{
			Concurrency: 8, Lease: 10 * time.Second, Logger: quiet,
		})
	}()
	deadline := time.Now().Add(time.Minute)
	for rows := 0; rows < len(ids); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders settled within a minute", rows, len(ids))
		}
		if err := f.db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE id = ANY($1)`, ids).Scan(&rows); err != nil {
			t.Fatal(err)
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("worker: %v", err)
	}
}

// TestCancelAllCancelsEveryWaitingOrder (issue 23): 5,000 pending orders of
// the caller in every place the queue keeps them (its lane, delayed for a
// retry, handed back to the front list by a stopping worker, and some a
// worker holds), resting orders with their holds, and another account's
// orders. DELETE /v1/orders?symbol= then DELETE /v1/orders cancel every
// order of the caller that no worker holds, each once, answer them all,
// leave the held ones and the other account's alone, release every hold and
// leave the lanes consistent.
func TestCancelAllCancelsEveryWaitingOrder(t *testing.T) {
	total := 5000
	if testing.Short() {
		total = 1500
	}
	ctx := context.Background()
	// Each DELETE cancels some 2,500 orders, which under the race detector
	// on a loaded machine takes up to the default request timeout (5 s):
	// past it the call answers 503 with what it canceled so far, which
	// TestCancelAllThatFailsMidwayAnswersWhatItCanceled covers. This test
	// checks which orders are canceled, not how fast.
	config := gateway.DefaultConfig()
	config.RequestTimeout = time.Minute
	f := newFixtureWith(t, 2, config)
	key, account, other := f.keys[0], f.accounts[0], f.accounts[1]
	ledger := postgres.NewLedger(f.db)
	for _, acc := range f.accounts {
		for asset, amount := range map[string]string{"USD": "1000000", "BTC": "100", "ETH": "1000"} {
			if err := ledger.Deposit(ctx, acc, asset, amount); err != nil {
				t.Fatal(err)
			}
		}
	}
	symbols := []string{"BTC-USD", "ETH-USD"}
	// Buys below and sells above the reference price: they rest.
	prices := map[string][2]string{"BTC-USD": {"49000.00", "51000.00"}, "ETH-USD": {"2900.00", "3100.00"}}
	quantity := map[string]string{"BTC-USD": "0.01000", "ETH-USD": "0.100"}
	order := func(acc, name string, i int) string {
		symbol, side := symbols[i%2], []orders.Side{orders.Buy, orders.Sell}[i/2%2]
		return f.admitOrder(t, acc, fmt.Sprintf("%s-%05d", name, i), symbol, side, quantity[symbol], prices[symbol][i/2%2])
	}
	symbolOf := func(i int) string { return symbols[i%2] }

	expected := map[string]map[string]bool{"BTC-USD": {}, "ETH-USD": {}}
	// Resting orders, with their holds, settled by a worker.
	var resting, othersResting []string
	for i := range 40 {
		resting = append(resting, order(account, "rest", i))
		expected[symbolOf(i)][resting[i]] = true
	}
	for i := range 10 {
		othersResting = append(othersResting, order(other, "their-rest", i))
	}
	f.settleAll(t, append(slices.Clone(resting), othersResting...))

	// Then the pending ones: those a worker moves are admitted and claimed
	// before the rest, so the claim takes exactly them.
	delayed, front, active := total/10, total/10, total/50
	moved := map[string]string{}
	for i := range delayed + front + active {
		id := order(account, "moved", i)
		switch {
		case i < delayed:
			moved[id] = emq.StateDelayed
		case i < delayed+front:
			moved[id] = "front"
		default:
			moved[id] = emq.StateActive
		}
		if moved[id] != emq.StateActive {
			expected[symbolOf(i)][id] = true
		}
	}
	claims, err := f.queue.Claim(ctx, len(moved), time.Hour)
	if err != nil || len(claims) != len(moved) {
		t.Fatalf("claim: %d, %v", len(claims), err)
	}
	later := emq.RetryPolicy{MaxAttempts: 10, BaseDelay: time.Hour, MaxDelay: time.Hour}
	for _, c := range claims {
		switch moved[c.ID] {
		case emq.StateDelayed:
			_, err = f.queue.Retry(ctx, c.ID, c.Token, errors.New("database down"), later)
		case "front":
			err = f.queue.Release(ctx, c.ID, c.Token)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range total - len(moved) {
		expected[symbolOf(i)][order(account, "lane", i)] = true
	}
	var othersPending []string
	for i := range 50 {
		othersPending = append(othersPending, order(other, "theirs", i))
	}

	cancelAll := func(query string) map[string]bool {
		t.Helper()
		res := f.do(t, f.http, http.MethodDelete, "/v1/orders"+query, key, "", "")
		if res.status != http.StatusOK {
			t.Fatalf("DELETE /v1/orders%s: %d %.500s", query, res.status, res.body)
		}
		ids := map[string]bool{}
		for _, order := range res.json(t)["orders"].([]any) {
			o := order.(map[string]any)
			id := o["id"].(string)
			if o["status"] != "canceled" || o["account_id"] != account || ids[id] {
				t.Errorf("answered %v (again: %v), want the caller's canceled order once", o, ids[id])
			}
			ids[id] = true
		}
		return ids
	}
	for _, step := range []struct{ query, symbol string }{{"?symbol=BTC-USD", "BTC-USD"}, {"", "ETH-USD"}} {
		start := time.Now()
		got := cancelAll(step.query)
		t.Logf("DELETE /v1/orders%s: %d orders in %v", step.query, len(got), time.Since(start))
		if want := expected[step.symbol]; !maps.Equal(got, want) {
			t.Errorf("DELETE /v1/orders%s canceled %d orders, want %d: %d missing, %d not expected",
				step.query, len(got), len(want), len(difference(want, got)), len(difference(got, want)))
		}
	}
	if got := cancelAll(""); len(got) != 0 {
		t.Errorf("a third call canceled %d orders, want none", len(got))
	}

	// Every order canceled has its canceled row; nothing else of the
	// caller's is canceled, and the other account's are as they were.
	var all []string
	for _, ids := range expected {
		for id := range ids {
			all = append(all, id)
		}
	}
	var rows int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'canceled' AND hold = 0`, all).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != len(all) {
		t.Errorf("%d canceled rows, want %d", rows, len(all))
	}
	for id, where := range moved {
		info, err := f.queue.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{true: emq.StateActive, false: emq.StateCanceled}[where == emq.StateActive]; info.State != want {
			t.Errorf("%s (%s) is %s, want %s", id, where, info.State, want)
		}
	}
	for _, id := range othersPending {
		if info, err := f.queue.Job(ctx, id); err != nil || info.State != emq.StatePending {
			t.Errorf("another account's order %s is %s, %v; want pending", id, info.State, err)
		}
	}
	var open int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'open'`, othersResting).Scan(&open); err != nil || open != len(othersResting) {
		t.Errorf("%d of the other account's %d resting orders open, %v", open, len(othersResting), err)
	}
	var held string
	if err := f.db.QueryRow(ctx, `SELECT trim_scale(coalesce(sum(held), 0))::text FROM balances WHERE account_id = $1`, account).Scan(&held); err != nil || held != "0" {
		t.Errorf("the caller still holds %s, %v", held, err)
	}
	violations, err := postgres.Audit(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("audit: %+v", v)
	}

	// The queue holds nothing of the caller's but what workers hold, and its
	// lanes agree with that.
	if depth, err := f.queue.LaneDepth(ctx, account); err != nil || depth != 0 {
		t.Errorf("the caller's lane count is %d, %v; want 0", depth, err)
	}
	stats, err := f.queue.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Pending != int64(len(othersPending)) || stats.Delayed != 0 || stats.Active != int64(active) || stats.Lanes != 1 {
		t.Errorf("queue stats %+v; want %d pending in one lane (the other account's), none delayed, %d active", stats, len(othersPending), active)
	}
	claims, err = f.queue.Claim(ctx, 1000, time.Hour)
	if err != nil || len(claims) != len(othersPending) {
		t.Errorf("claimed %d after, %v; want the other account's %d", len(claims), err, len(othersPending))
	}
}

// difference lists the keys of a that b lacks.
func difference(a, b map[string]bool) []string {
	var ids []string
	for id := range a {
		if !b[id] {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestCancelAllThatFailsMidwayAnswersWhatItCanceled: when PostgreSQL
// refuses the canceled rows of the second batch, DELETE /v1/orders answers
// 503 with the first batch's orders in canceled and the second's ids in
// unconfirmed, and leaves the book alone; a GET of an unconfirmed order
// records its cancel, and a second DELETE cancels the rest.
func TestCancelAllThatFailsMidwayAnswersWhatItCanceled(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newFixture(t, 1)
	key, account := f.keys[0], f.accounts[0]
	if err := postgres.NewLedger(f.db).Deposit(ctx, account, "USD", "100000"); err != nil {
		t.Fatal(err)
	}
	resting := f.admitOrder(t, account, "rest", "BTC-USD", orders.Buy, "0.01000", "49000.00")
	f.settleAll(t, []string{resting})
	var pending []string
	for i := range 600 {
		name := fmt.Sprintf("ok-%03d", i)
		if i == 550 {
			name = "boom-550"
		}
		pending = append(pending, f.admitOrder(t, account, name, "BTC-USD", orders.Buy, "0.01000", "50000.00"))
	}
	if _, err := f.db.Exec(ctx, `ALTER TABLE orders ADD CONSTRAINT boom CHECK (client_order_id NOT LIKE 'boom%')`); err != nil {
		t.Fatal(err)
	}

	res := f.do(t, f.http, http.MethodDelete, "/v1/orders", key, "", "")
	problem := res.json(t)
	if res.status != http.StatusServiceUnavailable || problem["type"] != "urn:ordergate:problem:unavailable" {
		t.Fatalf("DELETE /v1/orders: %d %.300s; want 503 unavailable", res.status, res.body)
	}
	t.Logf("detail: %s", problem["detail"])
	var canceled, unconfirmed []string
	for _, order := range problem["canceled"].([]any) {
		o := order.(map[string]any)
		if o["status"] != "canceled" {
			t.Errorf("canceled lists %v", o)
		}
		canceled = append(canceled, o["id"].(string))
	}
	for _, id := range problem["unconfirmed"].([]any) {
		unconfirmed = append(unconfirmed, id.(string))
	}
	if !slices.Equal(canceled, pending[:500]) || !slices.Equal(unconfirmed, pending[500:]) {
		t.Errorf("canceled %d, unconfirmed %d; want the first 500 and the other 100 pending orders", len(canceled), len(unconfirmed))
	}
	var rows int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'canceled'`, pending).Scan(&rows); err != nil || rows != 500 {
		t.Errorf("%d canceled rows, %v; want the first batch's 500", rows, err)
	}
	if status := f.get(t, key, resting).json(t)["status"]; status != "open" {
		t.Errorf("the resting order is %v; the book is swept only once the pending orders are recorded", status)
	}

	if _, err := f.db.Exec(ctx, `ALTER TABLE orders DROP CONSTRAINT boom`); err != nil {
		t.Fatal(err)
	}
	for _, id := range unconfirmed {
		if status := f.get(t, key, id).json(t)["status"]; status != "canceled" {
			t.Errorf("unconfirmed %s is %v, want canceled", id, status)
		}
	}
	res = f.do(t, f.http, http.MethodDelete, "/v1/orders", key, "", "")
	if res.status != http.StatusOK {
		t.Fatalf("DELETE /v1/orders again: %d %.300s", res.status, res.body)
	}
	if list := res.json(t)["orders"].([]any); len(list) != 1 || list[0].(map[string]any)["id"] != resting {
		t.Errorf("the second DELETE canceled %v; want the resting order", list)
	}
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1) AND status = 'canceled'`, pending).Scan(&rows); err != nil || rows != len(pending) {
		t.Errorf("%d canceled rows, %v; want %d", rows, err, len(pending))
	}
	violations, err := postgres.Audit(ctx, f.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("audit: %+v", v)
	}
}
