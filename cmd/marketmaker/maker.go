package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/ordergate/ordergate/api/client"
)

// maker keeps the quotes of every instrument.
type maker struct {
	api   client.ClientWithResponsesInterface
	log   *slog.Logger
	every time.Duration
	rng   *rand.Rand
	walks []*walk
	// live are the ids of the quotes placed and not yet canceled, per
	// instrument.
	live map[string][]string
	// run tells this process's client order ids apart from an earlier
	// run's; seq numbers them within it.
	run string
	seq int
}

func newMaker(c config, instruments []instrument, doer client.HttpRequestDoer, log *slog.Logger) (*maker, error) {
	key := c.apiKey
	api, err := client.NewClientWithResponses(c.gatewayURL, client.WithHTTPClient(doer),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+key)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	m := &maker{api: api, log: log, every: c.interval, rng: rand.New(rand.NewPCG(c.seed, 0x3a4e)),
		live: map[string][]string{}, run: fmt.Sprintf("%x", time.Now().UnixNano())}
	for _, in := range instruments {
		w, err := newWalk(in, c.levels)
		if err != nil {
			return nil, err
		}
		m.walks = append(m.walks, w)
	}
	return m, nil
}

// quoteUntil replaces the quotes at once and then every interval, until ctx
// ends.
func (m *maker) quoteUntil(ctx context.Context) {
	ticker := time.NewTicker(m.every)
	defer ticker.Stop()
	for {
		m.requote(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// requote walks each instrument's reference one step, cancels its previous
// quotes and places the new ladder. A stop signal (ctx) ends the round
// between two requests, never inside one: a request cut off after the
// gateway took the order would leave a quote nobody knows to cancel.
func (m *maker) requote(ctx context.Context) {
	requests := context.WithoutCancel(ctx)
	for _, w := range m.walks {
		if ctx.Err() != nil {
			return
		}
		w.step(m.rng)
		m.cancel(requests, w.in.symbol)
		quotes, err := w.ladder()
		if err != nil {
			m.log.Error("ladder", "symbol", w.in.symbol, "error", err)
			continue
		}
		placed := 0
		for _, q := range quotes {
			if ctx.Err() != nil {
				return
			}
			if id, ok := m.place(requests, w.in.symbol, q); ok {
				m.live[w.in.symbol] = append(m.live[w.in.symbol], id)
				placed++
			}
		}
		mid, _ := w.price(w.mid)
		m.log.Debug("quoted", "symbol", w.in.symbol, "mid", mid.String(), "placed", placed)
	}
}

// place sends one quote; ok when the gateway accepted it.
func (m *maker) place(ctx context.Context, symbol string, q quote) (string, bool) {
	m.seq++
	price := q.price.String()
	body := client.PlaceOrderRequest{
		ClientOrderID: fmt.Sprintf("mm-%s-%d", m.run, m.seq),
		Symbol:        symbol,
		Side:          client.Side(q.side),
		Type:          client.OrderTypeLimit,
		Quantity:      q.quantity.String(),
		Price:         &price,
	}
	// A request that failed in transit may still have placed the order:
	// the same client_order_id and body again is idempotent, and a replay
	// answers 200 with the order, so its id is not lost.
	var res *client.PlaceOrderResponse
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		if res, err = m.api.PlaceOrderWithResponse(ctx, nil, body); err == nil {
			break
		}
		m.log.Warn("place", "symbol", symbol, "side", q.side, "price", price, "attempt", attempt, "error", err)
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	if err != nil {
		return "", false
	}
	order := res.JSON202
	if order == nil {
		order = res.JSON200
	}
	if order == nil {
		m.log.Warn("place refused", "symbol", symbol, "side", q.side, "price", price,
			"status", res.StatusCode(), "body", string(res.Body))
		return "", false
	}
	return order.ID, true
}

// cancel cancels the live quotes of symbol. A quote that filled meanwhile
// (409 not cancelable) or is unknown (404) is gone as well; one whose cancel
// failed otherwise stays live, to be tried again.
func (m *maker) cancel(ctx context.Context, symbol string) {
	var kept []string
	for _, id := range m.live[symbol] {
		res, err := m.api.CancelOrderWithResponse(ctx, id, nil)
		switch {
		case err != nil:
			m.log.Warn("cancel", "order_id", id, "error", err)
			kept = append(kept, id)
		case res.StatusCode() == http.StatusOK, res.StatusCode() == http.StatusNotFound, res.StatusCode() == http.StatusConflict:
		default:
			m.log.Warn("cancel refused", "order_id", id, "status", res.StatusCode(), "body", string(res.Body))
			kept = append(kept, id)
		}
	}
	m.live[symbol] = kept
}

// cancelAll cancels every live quote and returns how many are left.
func (m *maker) cancelAll(ctx context.Context) int {
	left := 0
	for _, w := range m.walks {
		m.cancel(ctx, w.in.symbol)
		left += len(m.live[w.in.symbol])
	}
	return left
}
