package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/ordergate/ordergate/orders"
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
