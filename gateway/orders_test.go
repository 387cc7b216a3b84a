package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestConcurrentRetriesAdmitOneOrder(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	const callers = 64
	responses := make([]response, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			responses[i] = f.place(t, f.keys[0], limitOrder("retry-1"))
		}()
	}
	wg.Wait()

	created, replayed := 0, 0
	ids := map[string]bool{}
	for _, res := range responses {
		order := res.json(t)
		ids[order["id"].(string)] = true
		switch res.status {
		case http.StatusAccepted:
			created++
		case http.StatusOK:
			replayed++
			if res.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("replay without Idempotent-Replayed: %v", res.header)
			}
		default:
			t.Fatalf("status %d: %s", res.status, res.body)
		}
		if want := "/v1/orders/" + order["id"].(string); res.header.Get("Location") != want {
			t.Errorf("Location = %q, want %q", res.header.Get("Location"), want)
		}
	}
	if created != 1 || replayed != callers-1 || len(ids) != 1 {
		t.Fatalf("created %d, replayed %d, distinct ids %d; want 1, %d, 1", created, replayed, len(ids), callers-1)
	}
	if jobs := f.rdb.HLen(context.Background(), emq.JobsKey(orders.InstrumentQueue("BTC-USD"))).Val(); jobs != 1 {
		t.Errorf("job rows = %d, want 1", jobs)
	}
}

func TestReuseOfClientOrderIDWithAnotherBodyConflicts(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	first := f.place(t, f.keys[0], limitOrder("c-1"))
	if first.status != http.StatusAccepted {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	different := strings.Replace(limitOrder("c-1"), `"0.01000"`, `"0.02000"`, 1)
	conflict := f.place(t, f.keys[0], different)
	if conflict.status != http.StatusConflict {
		t.Fatalf("reuse: %d %s, want 409", conflict.status, conflict.body)
	}
	problem := conflict.json(t)
	if !strings.Contains(problem["detail"].(string), first.json(t)["id"].(string)) {
		t.Errorf("conflict does not name the order holding the id: %s", conflict.body)
	}
	// The same order written with other spacing and equal amounts is a replay.
	replay := f.place(t, f.keys[0], `{ "price": "50000.0", "quantity": "0.01", "type": "limit", "side": "buy", "symbol": "BTC-USD", "client_order_id": "c-1" }`)
	if replay.status != http.StatusOK {
		t.Errorf("equivalent request: %d %s, want a 200 replay", replay.status, replay.body)
	}
	stored := f.get(t, f.keys[0], first.json(t)["id"].(string))
	if stored.status != http.StatusOK || stored.json(t)["quantity"] != "0.01000" {
		t.Errorf("first order changed: %d %s", stored.status, stored.body)
	}
	// The same client order id is free for another account.
	if other := f.place(t, newFixtureAccount(t, f), different); other.status != http.StatusAccepted {
		t.Errorf("other account: %d %s", other.status, other.body)
	}
}

func TestThousandOrdersFromTenAccountsLandInTheirLanes(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 10)
	const perAccount = 100
	type placed struct{ account, id string }
	results := make(chan placed, 10*perAccount)
	var wg sync.WaitGroup
	for a := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAccount {
				res := f.place(t, f.keys[a], limitOrder(fmt.Sprintf("o-%d", i)))
				if res.status != http.StatusAccepted {
					t.Errorf("account %d order %d: %d %s", a, i, res.status, res.body)
					return
				}
				results <- placed{f.accounts[a], res.json(t)["id"].(string)}
			}
		}()
	}
	wg.Wait()
	close(results)
	ctx := context.Background()
	count := 0
	for p := range results {
		count++
		job, err := f.queue.Job(ctx, p.id)
		if err != nil || job.Group != p.account {
			t.Errorf("job %s group = %q, %v; want %s", p.id, job.Group, err, p.account)
		}
	}
	jobs := f.rdb.HLen(ctx, emq.JobsKey(orders.InstrumentQueue("BTC-USD"))).Val()
	pending, err := f.queue.Pending(ctx)
	if count != 1000 || jobs != 1000 || pending != 1000 || err != nil {
		t.Fatalf("placed %d, job rows %d, pending %d (%v); want 1000 each", count, jobs, pending, err)
	}
	for _, account := range f.accounts {
		if lane := f.rdb.LLen(ctx, "emq:{"+orders.InstrumentQueue("BTC-USD")+"}:lane:"+account).Val(); lane != perAccount {
			t.Errorf("lane of %s holds %d, want %d", account, lane, perAccount)
		}
	}
}

// TestEveryOrderRouteHidesAnotherAccountsOrders: reading or canceling
// another account's order answers exactly as for an order that does not
// exist, and changes nothing. (Placing is per account by construction: the
// order is the caller's, and client order ids are per account, see
// TestReuseOfClientOrderIDWithAnotherBodyConflicts.)
func TestEveryOrderRouteHidesAnotherAccountsOrders(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 2)
	owner, other := f.keys[0], f.keys[1]
	id := f.placeNew(t, owner, "mine")
	const unknownID = "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2"
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			tests := []struct {
				name, key, id string
			}{
				{"another account", other, id},
				{"unknown id", owner, unknownID},
				{"unknown id, another account", other, unknownID},
			}
			var answers []map[string]any
			for _, tt := range tests {
				res := f.do(t, f.http, method, "/v1/orders/"+tt.id, tt.key, "", "")
				if res.status != http.StatusNotFound {
					t.Fatalf("%s: status %d %s, want 404", tt.name, res.status, res.body)
				}
				if strings.Contains(string(res.body), f.accounts[0]) {
					t.Errorf("%s: 404 leaks the owner: %s", tt.name, res.body)
				}
				answers = append(answers, res.json(t))
			}
			for i, answer := range answers[1:] {
				if answer["title"] != answers[0]["title"] || answer["detail"] != answers[0]["detail"] {
					t.Errorf("%s answers %v, %s answers %v: ids can be probed", tests[i+1].name, answer, tests[0].name, answers[0])
				}
			}
			// A malformed id is not a route of the spec, so it goes through a plain client.
			if res := f.do(t, http.DefaultClient, method, "/v1/orders/not-an-id", owner, "", ""); res.status != http.StatusNotFound {
				t.Errorf("malformed id: %d %s", res.status, res.body)
			}
		})
	}
	if res := f.get(t, owner, id); res.status != http.StatusOK || res.json(t)["status"] != "pending" {
		t.Errorf("the owner's order after the other account's attempts: %d %s, want it pending", res.status, res.body)
	}
}

func TestAuthentication(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	revokedKey := newFixtureAccount(t, f)
	pendingID := f.placeNew(t, f.keys[0], "stays-pending")
	keysBefore := f.queueKeys(t)
	var keyID string
	if err := f.db.QueryRow(context.Background(), `SELECT id FROM api_keys ORDER BY created_at DESC, id DESC LIMIT 1`).Scan(&keyID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.db.Exec(context.Background(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, keyID); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		header string
	}{
		{"no header", ""},
		{"empty bearer", "Bearer "},
		{"basic scheme", "Basic dXNlcjpwYXNz"},
		{"unknown key", "Bearer ogk_notakeyatall"},
		{"key without prefix", "Bearer " + strings.TrimPrefix(f.keys[0], "ogk_")},
		{"revoked key", "Bearer " + revokedKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, send := range []func() (*http.Response, error){
				func() (*http.Response, error) {
					req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/orders", strings.NewReader(limitOrder("x")))
					req.Header.Set("Content-Type", "application/json")
					if tt.header != "" {
						req.Header.Set("Authorization", tt.header)
					}
					return f.http.Do(req)
				},
				func() (*http.Response, error) {
					req, _ := http.NewRequest(http.MethodGet, f.url+"/v1/orders/ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2", nil)
					if tt.header != "" {
						req.Header.Set("Authorization", tt.header)
					}
					return f.http.Do(req)
				},
				func() (*http.Response, error) {
					req, _ := http.NewRequest(http.MethodDelete, f.url+"/v1/orders/"+pendingID, nil)
					if tt.header != "" {
						req.Header.Set("Authorization", tt.header)
					}
					return f.http.Do(req)
				},
			} {
				res, err := send()
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("status %d, WWW-Authenticate %q; want 401 Bearer", res.StatusCode, res.Header.Get("WWW-Authenticate"))
				}
			}
		})
	}
	if keys := f.queueKeys(t); !slices.Equal(sorted(keys), sorted(keysBefore)) {
		t.Errorf("unauthenticated requests changed the queue's keys from %v to %v", keysBefore, keys)
	}
	if res := f.get(t, f.keys[0], pendingID); res.json(t)["status"] != "pending" {
		t.Errorf("unauthenticated cancels changed the order: %s", res.body)
	}
}

func sorted(values []string) []string {
	values = slices.Clone(values)
	slices.Sort(values)
	return values
}

func TestHealthAndReadiness(t *testing.T) {
	f := newFixture(t, 1)
	id := f.placeNew(t, f.keys[0], "before-the-outage")
	if res := f.do(t, f.http, http.MethodGet, "/healthz", "", "", ""); res.status != http.StatusOK {
		t.Fatalf("healthz: %d", res.status)
	}
	ready := f.readyWithin(t, http.StatusOK)
	if ready.status != http.StatusOK || ready.json(t)["status"] != "ready" {
		t.Fatalf("readyz: %d %s", ready.status, ready.body)
	}
	f.rdb.Set(context.Background(), "{emq}:version", "echomq:9.9.9", 0)
	mismatch := f.readyWithin(t, http.StatusServiceUnavailable)
	if mismatch.status != http.StatusServiceUnavailable {
		t.Errorf("readyz with a foreign protocol version: %d %s", mismatch.status, mismatch.body)
	}
	f.redis.Single(t, "stops Redis").Stop(t)
	var down response
	var checks map[string]any
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		down = f.do(t, f.http, http.MethodGet, "/readyz", "", "", "")
		checks, _ = down.json(t)["checks"].(map[string]any)
		if checks["redis"] != "ok" || time.Now().After(deadline) {
			break
		}
	}
	if down.status != http.StatusServiceUnavailable || checks["redis"] == "ok" || checks["postgres"] != "ok" {
		t.Errorf("readyz with Redis down: %d %s", down.status, down.body)
	}
	placed := f.place(t, f.keys[0], limitOrder("while-down"))
	if placed.status != http.StatusServiceUnavailable {
		t.Errorf("place with Redis down: %d %s, want 503", placed.status, placed.body)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		if res := f.do(t, f.http, method, "/v1/orders/"+id, f.keys[0], "", ""); res.status != http.StatusServiceUnavailable {
			t.Errorf("%s an order with Redis down: %d %s, want 503", method, res.status, res.body)
		}
	}
}
