package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/logbuffer"
)

const testKey = "test-mm-key"

// fakeGateway answers the routes the market maker uses, as the gateway
// would: the instruments (which a test may halt or move), placing (the
// order rests; every fifth "trades" at once and every seventh is rejected
// post-only, as settlement would), canceling all of an account's orders or
// one instrument's, and listing the rejected orders.
type fakeGateway struct {
	t  testing.TB
	mu sync.Mutex
	// instruments is what GET /v1/instruments answers.
	instruments []client.Instrument
	// resting are the orders placed and neither canceled nor traded.
	resting  map[string]client.Order
	rejected []client.Order // oldest first
	placed   int
	// placedOf counts the orders placed per symbol; cancelAlls the calls
	// of DELETE /v1/orders, by symbol ("" for all).
	placedOf, cancelAlls map[string]int
	listed               int
	refusedHalted        int
	// most are the most orders resting at once per symbol.
	most map[string]int
}

func newFakeGateway(t testing.TB) (*fakeGateway, *httptest.Server) {
	g := &fakeGateway{t: t, instruments: slices.Clone(listing[:3]), resting: map[string]client.Order{},
		placedOf: map[string]int{}, cancelAlls: map[string]int{}, most: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/instruments", g.listInstruments)
	mux.HandleFunc("POST /v1/orders", g.place)
	mux.HandleFunc("DELETE /v1/orders", g.cancelAll)
	mux.HandleFunc("GET /v1/orders", g.listRejected)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-test")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(server.Close)
	return g, server
}

// set changes an instrument as an operator or a trade would.
func (g *fakeGateway) set(symbol string, change func(*client.Instrument)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range g.instruments {
		if g.instruments[i].Symbol == symbol {
			change(&g.instruments[i])
		}
	}
}

func (g *fakeGateway) listInstruments(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.listed++
	writeJSON(w, http.StatusOK, client.InstrumentList{Instruments: slices.Clone(g.instruments)})
}

func (g *fakeGateway) authorized(r *http.Request) bool {
	if r.Header.Get("Authorization") != "Bearer "+testKey {
		g.t.Errorf("%s %s without the market maker's key: %q", r.Method, r.URL, r.Header.Get("Authorization"))
		return false
	}
	return true
}

func (g *fakeGateway) place(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(r) {
		writeProblem(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	var body client.PlaceOrderRequest
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		g.t.Errorf("place: %v", err)
		writeProblem(w, http.StatusBadRequest, "malformed-request")
		return
	}
	if body.Type != client.OrderTypeLimit || body.Price == nil || body.TimeInForce == nil ||
		*body.TimeInForce != client.TimeInForceGtc || body.PostOnly == nil || !*body.PostOnly {
		g.t.Errorf("place: not a limit gtc post-only order: %+v", body)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var in client.Instrument
	for _, listed := range g.instruments {
		if listed.Symbol == body.Symbol {
			in = listed
		}
	}
	if in.Status != client.InstrumentStatusTrading {
		// as the gateway refuses it, until the next listing tells the
		// market maker
		g.refusedHalted++
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"type":"urn:ordergate:problem:validation","title":"Validation failed","status":422,`+
			`"errors":[{"pointer":"/symbol","reason":"instrument %s is halted; it accepts no orders"}]}`, in.Symbol)
		return
	}
	// the band, as the gateway checks it: reference ± band%
	ref, band := decimal.MustParse(in.ReferencePrice), decimal.MustParse(in.PriceBandPercent)
	width, _ := ref.Mul(band)
	width, _ = width.Quo(decimal.MustNew(100, 0))
	low, _ := ref.Sub(width)
	high, _ := ref.Add(width)
	if price := decimal.MustParse(*body.Price); price.Cmp(low) < 0 || price.Cmp(high) > 0 {
		g.t.Errorf("place: %s %s at %s, outside the band [%s, %s]", body.Symbol, body.Side, price, low, high)
	}
	g.placed++
	g.placedOf[body.Symbol]++
	now := time.Now().UTC().Truncate(time.Millisecond)
	order := client.Order{ID: orders.NewOrderID(), AccountID: "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1", ClientOrderID: body.ClientOrderID,
		Symbol: body.Symbol, Side: body.Side, Type: body.Type, TimeInForce: body.TimeInForce, PostOnly: body.PostOnly,
		Quantity: body.Quantity, Price: body.Price, Status: client.OrderStatusPending, CreatedAt: now}
	w.Header().Set("Location", "/v1/orders/"+order.ID)
	writeJSON(w, http.StatusAccepted, order)
	switch {
	case g.placed%7 == 0:
		reason := client.OrderRejectReasonPostOnlyWouldTake
		zero := "0"
		rejected := order
		rejected.Status, rejected.RejectReason, rejected.FinishedAt = client.OrderStatusRejected, &reason, &now
		rejected.FilledQuantity, rejected.RemainingQuantity, rejected.Fees = &zero, &body.Quantity, &zero
		g.rejected = append(g.rejected, rejected)
	case g.placed%5 == 0: // traded
	default:
		g.resting[order.ID] = order
		n := 0
		for _, o := range g.resting {
			if o.Symbol == body.Symbol {
				n++
			}
		}
		g.most[body.Symbol] = max(g.most[body.Symbol], n)
	}
}

func (g *fakeGateway) cancelAll(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(r) {
		writeProblem(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	symbol := r.URL.Query().Get("symbol")
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cancelAlls[symbol]++
	list := client.OrderList{Orders: []client.Order{}}
	now := time.Now().UTC().Truncate(time.Millisecond)
	for id, order := range g.resting {
		if symbol != "" && order.Symbol != symbol {
			continue
		}
		delete(g.resting, id)
		order.Status, order.CanceledAt, order.FinishedAt = client.OrderStatusCanceled, &now, &now
		list.Orders = append(list.Orders, order)
	}
	writeJSON(w, http.StatusOK, list)
}

func (g *fakeGateway) listRejected(w http.ResponseWriter, r *http.Request) {
	if !g.authorized(r) {
		writeProblem(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if got := r.URL.Query().Get("status"); got != "rejected" {
		g.t.Errorf("GET /v1/orders?status=%s: the market maker lists only rejected orders", got)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	list := client.OrderList{Orders: []client.Order{}}
	for i := len(g.rejected) - 1; i >= 0 && len(list.Orders) < 200; i-- {
		list.Orders = append(list.Orders, g.rejected[i])
	}
	writeJSON(w, http.StatusOK, list)
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

// waitFor polls cond (under the fake's lock) until it holds.
func (g *fakeGateway) waitFor(t *testing.T, what string, out *logbuffer.Buffer, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		ok := cond()
		g.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s, not yet: %s\n%s", what, out.String())
		}
	}
}

// TestMarketMakerQuotesAndCancelsOnShutdown runs the market maker against a
// fake gateway: it quotes every instrument listed, replaces each ladder with
// one cancel of the instrument's orders (never more than one ladder of a
// symbol rests at once), counts the post-only rejections, stops quoting an
// instrument once it is halted, follows a moved reference, and at shutdown
// cancels every order with one call.
func TestMarketMakerQuotesAndCancelsOnShutdown(t *testing.T) {
	g, server := newFakeGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuffer.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runWith(ctx, []string{"marketmaker", "-levels", "2"}, envOf(map[string]string{
			"GATEWAY_URL": server.URL, "MM_API_KEY": testKey, "MM_INTERVAL": "20ms", "MM_REFRESH": "50ms", "LOG_LEVEL": "debug",
		}), &out, apitest.Client(t, apitest.ValidateRequests()))
	}()
	const rounds = 5
	g.waitFor(t, fmt.Sprintf("%d rounds on each instrument", rounds), &out, func() bool {
		return g.placedOf["BTC-USD"] >= rounds*4 && g.placedOf["ETH-USD"] >= rounds*4 && g.placedOf["ETH-BTC"] >= rounds*4
	})

	// ETH-BTC halts: its quotes are canceled and no more are placed.
	g.set("ETH-BTC", func(in *client.Instrument) { in.Status = client.InstrumentStatusHalted })
	g.waitFor(t, "ETH-BTC's quotes canceled", &out, func() bool {
		for _, o := range g.resting {
			if o.Symbol == "ETH-BTC" {
				return false
			}
		}
		return g.cancelAlls["ETH-BTC"] > 0
	})
	// BTC-USD trades at 54,000: the quotes follow, inside half the band
	// around it (51,300 to 56,700).
	g.set("BTC-USD", func(in *client.Instrument) { in.ReferencePrice = "54000.00" })
	g.waitFor(t, "BTC-USD quoted around 54,000", &out, func() bool {
		n := 0
		for _, o := range g.resting {
			if o.Symbol == "BTC-USD" {
				if decimal.MustParse(*o.Price).Cmp(decimal.MustParse("51300")) < 0 {
					return false
				}
				n++
			}
		}
		return n > 0
	})
	g.mu.Lock()
	haltedPlaced := g.placedOf["ETH-BTC"]
	listed := g.listed
	g.mu.Unlock()
	g.waitFor(t, "two more listings", &out, func() bool { return g.listed >= listed+2 })

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
	if g.placedOf["ETH-BTC"] != haltedPlaced {
		t.Errorf("ETH-BTC: %d quotes placed while halted", g.placedOf["ETH-BTC"]-haltedPlaced)
	}
	if g.refusedHalted > 4 {
		t.Errorf("ETH-BTC: %d quotes sent while halted; the first refused ladder should make it read the instruments", g.refusedHalted)
	}
	for _, symbol := range []string{"BTC-USD", "ETH-USD", "ETH-BTC"} {
		if g.most[symbol] == 0 || g.most[symbol] > 4 {
			t.Errorf("%s: at most %d quotes rested at once, want 1 to 4 (2 levels a side)", symbol, g.most[symbol])
		}
		// one cancel per round, each round placing 4 quotes
		if rounds := g.placedOf[symbol] / 4; g.cancelAlls[symbol] < rounds-1 || g.cancelAlls[symbol] > rounds+2 {
			t.Errorf("%s: %d cancels for %d rounds", symbol, g.cancelAlls[symbol], rounds)
		}
	}
	if g.cancelAlls[""] < 1 {
		t.Errorf("the shutdown did not cancel everything (DELETE /v1/orders)")
	}
	stopped := lastLine(t, out.String(), "market maker stopped")
	counted, ok := stopped["post_only_rejected"].(float64)
	if !ok || counted < 1 || int(counted) > len(g.rejected) || int(counted) < len(g.rejected)-4 {
		t.Errorf("post_only_rejected = %v, %d rejected by the fake\n%v", stopped["post_only_rejected"], len(g.rejected), stopped)
	}
	if placed, _ := stopped["placed"].(float64); int(placed) != g.placed {
		t.Errorf("placed = %v, the fake took %d", stopped["placed"], g.placed)
	}
	if !strings.Contains(out.String(), `"msg":"not quoting","symbol":"ETH-BTC","why":"halted"`) {
		t.Errorf("the halt is not logged")
	}
	if strings.Contains(out.String(), testKey) {
		t.Errorf("the log holds the API key")
	}
}

// lastLine is the last JSON log line with the message msg.
func lastLine(t *testing.T, log, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	for line := range strings.SplitSeq(log, "\n") {
		var fields map[string]any
		if json.Unmarshal([]byte(line), &fields) == nil && fields["msg"] == msg {
			found = fields
		}
	}
	if found == nil {
		t.Fatalf("no %q line in the log\n%s", msg, log)
	}
	return found
}

func TestMarketMakerQuotesOnlyTheSymbolsAsked(t *testing.T) {
	g, server := newFakeGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuffer.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runWith(ctx, []string{"marketmaker", "-symbols", "eth-usd"}, envOf(map[string]string{
			"GATEWAY_URL": server.URL, "MM_API_KEY": testKey, "MM_INTERVAL": "20ms",
		}), &out, apitest.Client(t, apitest.ValidateRequests()))
	}()
	g.waitFor(t, "ETH-USD quoted", &out, func() bool { return g.placedOf["ETH-USD"] >= 12 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.placedOf["BTC-USD"]+g.placedOf["ETH-BTC"] != 0 || len(g.resting) != 0 {
		t.Errorf("placed %v, %d left resting", g.placedOf, len(g.resting))
	}
}

func TestMarketMakerRefusesBadConfiguration(t *testing.T) {
	_, server := newFakeGateway(t)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"no key", nil, map[string]string{}, "MM_API_KEY"},
		{"unknown symbol", []string{"-symbols", "BTC-USD,DOGE-USD"}, map[string]string{"MM_API_KEY": testKey, "GATEWAY_URL": server.URL}, "DOGE-USD"},
		{"not a symbol", []string{"-symbols", "DOGE"}, map[string]string{"MM_API_KEY": "k"}, "DOGE"},
		{"bad interval", nil, map[string]string{"MM_API_KEY": "k", "MM_INTERVAL": "soon"}, "MM_INTERVAL"},
		{"no refresh", []string{"-refresh", "0s"}, map[string]string{"MM_API_KEY": "k"}, "refresh"},
		{"no levels", []string{"-levels", "0"}, map[string]string{"MM_API_KEY": "k"}, "levels"},
		{"no size", []string{"-size", "0"}, map[string]string{"MM_API_KEY": "k"}, "size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runWith(context.Background(), append([]string{"marketmaker"}, tt.args...), envOf(tt.env), &out,
				apitest.Client(t, apitest.ValidateRequests()))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}
