package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/internal/apitest"
	"github.com/ordergate/ordergate/internal/logbuffer"
	"github.com/ordergate/ordergate/orders"
)

const testKey = "test-mm-key"

// fakeGateway answers the two routes the market maker uses, as the gateway
// would: placing admits the order (pending), canceling cancels it, or
// answers 409 when it "filled" (every fifth order) and 404 when unknown.
type fakeGateway struct {
	t  testing.TB
	mu sync.Mutex
	// resting are the orders placed and neither canceled nor filled.
	resting map[string]client.Order
	filled  map[string]bool
	placed  int
	cancels int
	// most are the most orders resting at once per symbol.
	most map[string]int
}

func newFakeGateway(t testing.TB) (*fakeGateway, *httptest.Server) {
	g := &fakeGateway{t: t, resting: map[string]client.Order{}, filled: map[string]bool{}, most: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", g.place)
	mux.HandleFunc("DELETE /v1/orders/{id}", g.cancel)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-test")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	return g, server
}

func (g *fakeGateway) place(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testKey {
		g.t.Errorf("place without the market maker's key: %q", r.Header.Get("Authorization"))
	}
	var body client.PlaceOrderRequest
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		g.t.Errorf("place: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if body.Type != client.OrderTypeLimit || body.Price == nil {
		g.t.Errorf("place: not a limit order: %+v", body)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.placed++
	price := *body.Price
	order := client.Order{ID: orders.NewOrderID(), AccountID: "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1", ClientOrderID: body.ClientOrderID,
		Symbol: body.Symbol, Side: body.Side, Type: body.Type, Quantity: body.Quantity, Price: &price,
		Status: client.OrderStatusPending, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if g.placed%5 == 0 {
		g.filled[order.ID] = true
	} else {
		g.resting[order.ID] = order
		n := 0
		for _, o := range g.resting {
			if o.Symbol == body.Symbol {
				n++
			}
		}
		g.most[body.Symbol] = max(g.most[body.Symbol], n)
	}
	w.Header().Set("Location", "/v1/orders/"+order.ID)
	writeJSON(w, http.StatusAccepted, order)
}

func (g *fakeGateway) cancel(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testKey {
		g.t.Errorf("cancel without the market maker's key")
	}
	id := r.PathValue("id")
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancels++
	order, ok := g.resting[id]
	switch {
	case ok:
		delete(g.resting, id)
		now := time.Now().UTC().Truncate(time.Millisecond)
		order.Status, order.CanceledAt, order.FinishedAt = client.OrderStatusCanceled, &now, &now
		writeJSON(w, http.StatusOK, order)
	case g.filled[id]:
		writeProblem(w, http.StatusConflict, "order-not-cancelable")
	default:
		g.t.Errorf("cancel of an order never placed: %s", id)
		writeProblem(w, http.StatusNotFound, "not-found")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeProblem(w http.ResponseWriter, status int, kind string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"urn:ordergate:problem:%s","title":%q,"status":%d}`, kind, kind, status)
}

func envOf(values map[string]string) func(string) string {
	return func(name string) string { return values[name] }
}

// TestMarketMakerQuotesAndCancelsOnShutdown runs the market maker against a
// fake gateway for a few rounds: each round replaces the ladder (never more
// than one ladder of a symbol rests at once) and the shutdown cancels every
// quote left.
func TestMarketMakerQuotesAndCancelsOnShutdown(t *testing.T) {
	g, server := newFakeGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuffer.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runWith(ctx, []string{"marketmaker", "-levels", "2"}, envOf(map[string]string{
			"GATEWAY_URL": server.URL, "MM_API_KEY": testKey, "MM_INTERVAL": "20ms", "LOG_LEVEL": "debug",
		}), &out, apitest.Client(t, apitest.ValidateRequests()))
	}()
	const rounds = 5
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		placed := g.placed
		g.mu.Unlock()
		if placed >= rounds*3*4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, %d orders placed\n%s", placed, out.String())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the market maker did not stop")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.resting) != 0 {
		t.Errorf("%d quotes left resting after the shutdown", len(g.resting))
	}
	for _, symbol := range []string{"BTC-USD", "ETH-USD", "ETH-BTC"} {
		if g.most[symbol] == 0 || g.most[symbol] > 4 {
			t.Errorf("%s: at most %d quotes rested at once, want 1 to 4 (2 levels a side)", symbol, g.most[symbol])
		}
	}
	if g.cancels < g.placed-4*3 {
		t.Errorf("%d cancels for %d orders placed", g.cancels, g.placed)
	}
	if strings.Contains(out.String(), testKey) {
		t.Errorf("the log holds the API key")
	}
}

func TestMarketMakerRefusesBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no key", nil, map[string]string{}, "MM_API_KEY"},
		{"unknown symbol", []string{"-symbols", "DOGE-USD"}, map[string]string{"MM_API_KEY": "k"}, "DOGE-USD"},
		{"bad interval", nil, map[string]string{"MM_API_KEY": "k", "MM_INTERVAL": "soon"}, "MM_INTERVAL"},
		{"no levels", []string{"-levels", "0"}, map[string]string{"MM_API_KEY": "k"}, "levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), append([]string{"marketmaker"}, tt.args...), envOf(tt.env), &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// The quotes' prices print at the tick's scale, as the gateway requires.
func TestQuotePricesPrintOnTheTickScale(t *testing.T) {
	w, err := newWalk(seeded["BTC-USD"], 1)
	if err != nil {
		t.Fatal(err)
	}
	quotes, err := w.ladder()
	if err != nil {
		t.Fatal(err)
	}
	if quotes[0].price.String() != "49950.00" || quotes[1].price.String() != "50050.00" || quotes[0].quantity != decimal.MustParse("0.01000") {
		t.Errorf("ladder %v", quotes)
	}
}
