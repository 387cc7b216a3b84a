package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// newQueuedCancelFixture is a fixture whose gateway sends the cancels of
// resting orders through the instruments' queues, waiting at most wait,
// and whose accounts hold funds.
func newQueuedCancelFixture(t testing.TB, accounts int, wait time.Duration) *fixture {
	t.Helper()
	return newQueuedCancelFixtureWith(t, accounts, wait, func(h placement.History) placement.History { return h })
}

// newQueuedCancelFixtureWith is newQueuedCancelFixture whose gateway's
// history is wrap of PostgreSQL's, for tests that make its writes fail.
func newQueuedCancelFixtureWith(t testing.TB, accounts int, wait time.Duration, wrap func(placement.History) placement.History) *fixture {
	t.Helper()
	f := newFixture(t, accounts)
	ledger := postgres.NewLedger(f.db)
	for _, account := range f.accounts {
		for asset, amount := range map[string]string{"USD": "1000000", "BTC": "100", "ETH": "1000"} {
			if err := ledger.Deposit(context.Background(), account, asset, amount); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.deps.Placer = placement.NewPlacer(f.deps.Placer.Queues(),
		placement.WithHistory(wrap(postgres.NewOrders(postgres.NewHistory(f.db), postgres.NewSettler(f.db, nil, nil)))),
		placement.WithQueuedCancels(wait))
	f.url, _ = f.startGateway(t, prometheus.NewRegistry())
	return f
}

// startOwner runs a settlement worker, which owns the instruments' queues,
// until the test ends, and returns its metrics once it owns every one.
func (f *fixture) startOwner(t testing.TB) *prometheus.Registry {
	t.Helper()
	registry, _ := f.runOwner(t)
	return registry
}

// runOwner is startOwner's worker, which also stops when stop is called:
// stop returns once the worker has finished.
func (f *fixture) runOwner(t testing.TB) (registry *prometheus.Registry, stop func()) {
	t.Helper()
	registry = prometheus.NewRegistry()
	config := settlement.DefaultConfig()
	config.Concurrency = 16
	config.Symbols = []string{"BTC-USD", "ETH-USD"}
	worker, err := settlement.New(context.Background(), settlement.Deps{DB: f.db, Queues: f.client,
		Logger: slog.New(slog.DiscardHandler), Metrics: registry}, config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := worker.Run(ctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	f.waitFor(t, "the worker owns both instruments", func() bool {
		return loads(t, registry) == 2
	})
	return registry, stop
}

// loads is the worker's count of the books its owners loaded.
func loads(t testing.TB, registry *prometheus.Registry) int {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if family.GetName() == "orders_settlement_book_loads_total" {
			return int(family.GetMetric()[0].GetCounter().GetValue())
		}
	}
	return 0
}

func (f *fixture) waitFor(t testing.TB, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// placeResting places a limit order through the gateway and waits for it
// to rest.
func (f *fixture) placeResting(t testing.TB, key, body string) string {
	t.Helper()
	res := f.place(t, key, body)
	if res.status != http.StatusAccepted {
		t.Fatalf("place: %d %s", res.status, res.body)
	}
	id := res.json(t)["id"].(string)
	f.waitFor(t, id+" rests", func() bool { return f.get(t, key, id).json(t)["status"] == "open" })
	return id
}

func orderBody(clientOrderID, symbol, side, quantity, price string) string {
	return fmt.Sprintf(`{"client_order_id":%q,"symbol":%q,"side":%q,"type":"limit","quantity":%q,"price":%q}`,
		clientOrderID, symbol, side, quantity, price)
}

// held is the account's held amount of asset in PostgreSQL.
func (f *fixture) held(t testing.TB, account, asset string) string {
	t.Helper()
	var held string
	if err := f.db.QueryRow(context.Background(), `SELECT trim_scale(held)::text FROM balances WHERE account_id = $1 AND asset = $2`,
		account, asset).Scan(&held); err != nil {
		t.Fatal(err)
	}
	return held
}

func (f *fixture) audit(t testing.TB) {
	t.Helper()
	violations, err := postgres.Audit(context.Background(), f.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("audit: %s", v)
	}
}

// TestCancelOfARestingOrderGoesThroughItsOwner: DELETE of a resting order
// on an instrument a worker owns answers 200 with the order canceled, once
// the owner decided it; the hold is released, the audit is clean and the
// owner loaded no book again. Another account's order, and an unknown
// one, are 404 as before; a second DELETE is 409 canceled.
func TestCancelOfARestingOrderGoesThroughItsOwner(t *testing.T) {
	testserver.Parallel(t)
	f := newQueuedCancelFixture(t, 2, 5*time.Second)
	metrics := f.startOwner(t)
	key, account := f.keys[0], f.accounts[0]
	id := f.placeResting(t, key, orderBody("rest-1", "BTC-USD", "buy", "0.01000", "49000.00"))
	if held := f.held(t, account, "USD"); held == "0" {
		t.Fatalf("the resting bid holds nothing")
	}
	for _, tc := range []struct {
		name, key, id string
		status        int
	}{
		{"another account's order", f.keys[1], id, http.StatusNotFound},
		{"an unknown order", key, orders.NewOrderID(), http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := f.cancel(t, tc.key, tc.id); res.status != tc.status {
				t.Errorf("DELETE: %d %s, want %d", res.status, res.body, tc.status)
			}
		})
	}
	res := f.cancel(t, key, id)
	if res.status != http.StatusOK || res.json(t)["status"] != "canceled" {
		t.Fatalf("DELETE: %d %s", res.status, res.body)
	}
	if held := f.held(t, account, "USD"); held != "0" {
		t.Errorf("USD held after the cancel: %s", held)
	}
	if res := f.cancel(t, key, id); res.status != http.StatusConflict {
		t.Errorf("a second DELETE: %d %s", res.status, res.body)
	}
	if n := loads(t, metrics); n != 2 {
		t.Errorf("the owners loaded %d books, want the two take-overs' only", n)
	}
	f.audit(t)
}

// TestCancelsRaceFills: resting asks are canceled while bids that cross
// them arrive; each DELETE answers 200 canceled or 409 filled, as its
// order's row says, nothing stays held, and the owner never reloads.
func TestCancelsRaceFills(t *testing.T) {
	testserver.Parallel(t)
	f := newQueuedCancelFixture(t, 2, 5*time.Second)
	metrics := f.startOwner(t)
	seller, buyer := f.keys[0], f.keys[1]
	const n = 10
	asks := make([]string, n)
	for i := range asks {
		asks[i] = f.placeResting(t, seller, orderBody(fmt.Sprintf("ask-%d", i), "BTC-USD", "sell", "0.01000", "50000.00"))
	}
	answers := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := strings.Replace(orderBody(fmt.Sprintf("bid-%d", i), "BTC-USD", "buy", "0.01000", "50000.00"),
				`"type":"limit"`, `"type":"limit","time_in_force":"ioc"`, 1)
			if res := f.place(t, buyer, body); res.status != http.StatusAccepted {
				t.Errorf("place: %d %s", res.status, res.body)
			}
		})
		wg.Go(func() { answers[i] = f.cancel(t, seller, asks[i]) })
	}
	wg.Wait()
	for i, res := range answers {
		want := map[int]string{http.StatusOK: "canceled", http.StatusConflict: "filled"}[res.status]
		if want == "" {
			t.Errorf("DELETE %s: %d %s", asks[i], res.status, res.body)
			continue
		}
		if got := f.get(t, seller, asks[i]).json(t)["status"]; got != want {
			t.Errorf("DELETE %s answered %d, the order is %s", asks[i], res.status, got)
		}
	}
	f.waitFor(t, "every bid settled", func() bool {
		var rows int
		err := f.db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE account_id = $1`, f.accounts[1]).Scan(&rows)
		return err == nil && rows == n
	})
	if held := f.held(t, f.accounts[0], "BTC"); held != "0" {
		t.Errorf("BTC held after the cancels and fills: %s", held)
	}
	if got := loads(t, metrics); got != 2 {
		t.Errorf("the owners loaded %d books, want the two take-overs' only", got)
	}
	f.audit(t)
}

// TestCancelPastTheWaitIsAccepted: with no worker settling, DELETE of a
// resting order answers 202 with the order still open and where to read
// it; a retry waits for the same queued cancel (one job), and so does a
// cancel-all past the wait; once a worker runs, the cancel is decided and
// the order reads canceled.
func TestCancelPastTheWaitIsAccepted(t *testing.T) {
	f := newQueuedCancelFixture(t, 1, 50*time.Millisecond)
	key, account := f.keys[0], f.accounts[0]
	id := f.insertRestingOrder(t, account, "BTC-USD", "sell", "0.01", "51000")
	for range 2 {
		res := f.cancel(t, key, id)
		if res.status != http.StatusAccepted || res.json(t)["status"] != "open" || res.header.Get("Location") != "/v1/orders/"+id {
			t.Fatalf("DELETE past the wait: %d %v %s", res.status, res.header, res.body)
		}
	}
	if depth, err := f.queue.LaneDepth(context.Background(), account); err != nil || depth != 1 {
		t.Errorf("the account's lane holds %d jobs (%v), want the one cancel", depth, err)
	}
	// A cancel-all withdraws the queued cancel with the pending orders
	// (recording no order of it) and queues a cancel-all in its place.
	res := f.do(t, f.http, http.MethodDelete, "/v1/orders", key, "", "")
	if list, _ := res.json(t)["orders"].([]any); res.status != http.StatusAccepted || len(list) != 1 ||
		list[0].(map[string]any)["id"] != id || list[0].(map[string]any)["status"] != "open" {
		t.Fatalf("DELETE /v1/orders past the wait: %d %s", res.status, res.body)
	}
	var rows int
	if err := f.db.QueryRow(context.Background(), `SELECT count(*) FROM orders WHERE account_id = $1`, account).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("the account has %d orders rows (%v), want the resting one", rows, err)
	}
	f.startOwner(t)
	f.waitFor(t, "the queued cancel decided", func() bool { return f.get(t, key, id).json(t)["status"] == "canceled" })
}

// TestCancelAllThroughTheOwners: DELETE /v1/orders sends one cancel-all
// per instrument with resting orders of the caller; the owners cancel
// them all, on both instruments, and the answer lists them; the other
// account's stay.
func TestCancelAllThroughTheOwners(t *testing.T) {
	testserver.Parallel(t)
	f := newQueuedCancelFixture(t, 2, 5*time.Second)
	metrics := f.startOwner(t)
	key := f.keys[0]
	want := map[string]bool{}
	for i, o := range []struct{ symbol, side, quantity, price string }{
		{"BTC-USD", "buy", "0.01000", "49000.00"}, {"BTC-USD", "sell", "0.01000", "51000.00"}, {"ETH-USD", "buy", "0.100", "2900.00"},
	} {
		want[f.placeResting(t, key, orderBody(fmt.Sprintf("all-%d", i), o.symbol, o.side, o.quantity, o.price))] = true
	}
	theirs := f.placeResting(t, f.keys[1], orderBody("theirs", "BTC-USD", "buy", "0.01000", "48000.00"))
	res := f.do(t, f.http, http.MethodDelete, "/v1/orders", key, "", "")
	if res.status != http.StatusOK {
		t.Fatalf("DELETE /v1/orders: %d %s", res.status, res.body)
	}
	list := res.json(t)["orders"].([]any)
	for _, item := range list {
		order := item.(map[string]any)
		if !want[order["id"].(string)] || order["status"] != "canceled" {
			t.Errorf("answered %v", order)
		}
		delete(want, order["id"].(string))
	}
	if len(want) > 0 {
		t.Errorf("not answered: %v", want)
	}
	if got := f.get(t, f.keys[1], theirs).json(t)["status"]; got != "open" {
		t.Errorf("the other account's order is %s", got)
	}
	for _, asset := range []string{"USD", "BTC"} {
		if held := f.held(t, f.accounts[0], asset); held != "0" {
			t.Errorf("%s held after the cancel-all: %s", asset, held)
		}
	}
	if got := loads(t, metrics); got != 2 {
		t.Errorf("the owners loaded %d books, want the two take-overs' only", got)
	}
	f.audit(t)
}

// unrecordedCancels is a history whose writes of the cancels CancelAll
// withdrew from the queues fail, as when PostgreSQL refuses them.
type unrecordedCancels struct{ placement.History }

func (unrecordedCancels) RecordAllCanceled(context.Context, []orders.Order) ([]orders.Order, error) {
	return nil, errors.New("the write of the canceled rows failed")
}

// TestCancelAllThatCannotRecordPutsQueuedCancelsBack: DELETE /v1/orders
// withdraws a pending order and a resting order's queued cancel from the
// queue, and then cannot write the pending order's canceled row. It
// answers 503 naming the pending order unconfirmed and sweeps no book, so
// the queued cancel it withdrew goes back on the queue: once an owner runs
// again, the resting order is canceled and its hold released, and a GET of
// the pending order records its cancel.
func TestCancelAllThatCannotRecordPutsQueuedCancelsBack(t *testing.T) {
	testserver.Parallel(t)
	f := newQueuedCancelFixtureWith(t, 1, 300*time.Millisecond,
		func(h placement.History) placement.History { return unrecordedCancels{h} })
	key, account := f.keys[0], f.accounts[0]
	_, stop := f.runOwner(t)
	resting := f.placeResting(t, key, orderBody("rest-1", "BTC-USD", "buy", "0.01000", "49000.00"))
	stop()

	// No owner: the cancel waits on the queue past the wait.
	if res := f.cancel(t, key, resting); res.status != http.StatusAccepted || res.json(t)["status"] != "open" {
		t.Fatalf("DELETE of the resting order with no owner: %d %s, want 202 open", res.status, res.body)
	}
	pending := f.placeNew(t, key, "pending-1")

	res := f.do(t, f.http, http.MethodDelete, "/v1/orders", key, "", "")
	if res.status != http.StatusServiceUnavailable {
		t.Fatalf("DELETE /v1/orders: %d %s, want 503", res.status, res.body)
	}
	body := res.json(t)
	if unconfirmed, _ := body["unconfirmed"].([]any); len(unconfirmed) != 1 || unconfirmed[0] != pending {
		t.Errorf("unconfirmed = %v, want [%s]", body["unconfirmed"], pending)
	}
	if canceled, _ := body["canceled"].([]any); len(canceled) != 0 {
		t.Errorf("canceled = %v, want none: nothing was recorded", canceled)
	}
	if held := f.held(t, account, "USD"); held == "0" {
		t.Fatalf("the resting bid lost its hold though no book was swept")
	}

	f.startOwner(t)
	f.waitFor(t, "the readmitted cancel cancels the resting order", func() bool {
		return f.get(t, key, resting).json(t)["status"] == "canceled"
	})
	if held := f.held(t, account, "USD"); held != "0" {
		t.Errorf("USD held after the cancel: %s", held)
	}
	if status := f.get(t, key, pending).json(t)["status"]; status != "canceled" {
		t.Errorf("the withdrawn pending order reads %v, want canceled", status)
	}
	f.audit(t)
}
