package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ordergate/ordergate/api/client"
)

// maker keeps the quotes of every instrument it follows.
type maker struct {
	api          client.ClientWithResponsesInterface
	logger       *slog.Logger
	every        time.Duration
	rng          *rand.Rand
	levels       int
	sizeMultiple int64
	// symbols is the -symbols filter; empty quotes every instrument listed.
	symbols []string
	// walks are the instruments quoted, by symbol; quoting says which are
	// trading as of the last listing (a halted one keeps its walk, to
	// resume where it was).
	walks   map[string]*walk
	quoting map[string]bool
	// listed are the symbols of the last listing.
	listed map[string]bool
	// placed are the ids of each symbol's last ladder: those its next
	// cancel does not answer went away by themselves (traded, or rejected
	// at settlement).
	placed map[string][]string
	// run tells this process's client order ids apart from an earlier
	// run's; seq numbers them within it.
	run string
	seq int
	// stale: the gateway refused a quote as invalid (422), which a halt or
	// a moved band since the last listing explains; the next round reads
	// the instruments first.
	stale bool
	stats stats
}

// stats count what happened to the quotes.
type stats struct {
	// placed: admitted by the gateway; refused: answered anything else.
	placed, refused int
	// canceled by the next round; gone: not there to cancel, and not
	// rejected (traded, or still with a worker).
	canceled, gone int
	// postOnly: rejected at settlement because it would have traded
	// (post_only_would_take); rejected: for any other reason.
	postOnly, rejected int
}

func (s stats) attrs() []any {
	return []any{"placed", s.placed, "refused", s.refused, "canceled", s.canceled, "gone", s.gone,
		"post_only_rejected", s.postOnly, "rejected", s.rejected}
}

func newMaker(c config, symbols []string, doer client.HttpRequestDoer, logger *slog.Logger) (*maker, error) {
	key := c.apiKey
	api, err := client.NewClientWithResponses(c.gatewayURL, client.WithHTTPClient(doer),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+key)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	return &maker{api: api, logger: logger, every: c.interval, rng: rand.New(rand.NewPCG(c.seed, 0x3a4e)),
		levels: c.levels, sizeMultiple: c.sizeMultiple, symbols: symbols,
		walks: map[string]*walk{}, quoting: map[string]bool{}, placed: map[string][]string{},
		run: fmt.Sprintf("%x", time.Now().UnixNano())}, nil
}

// refresh reads GET /v1/instruments and follows it: a new instrument gets a
// walk, a known one's walk follows its reference and band, and a halted one
// (or one no longer listed) is not quoted until it trades again: its quotes
// are canceled. An error leaves everything as it was.
func (m *maker) refresh(ctx context.Context) error {
	res, err := m.api.ListInstrumentsWithResponse(ctx, nil)
	if err != nil {
		return fmt.Errorf("GET /v1/instruments: %w", err)
	}
	if res.JSON200 == nil {
		return fmt.Errorf("GET /v1/instruments: %d %s", res.StatusCode(), strings.TrimSpace(string(res.Body)))
	}
	listed := map[string]client.Instrument{}
	m.listed = map[string]bool{}
	for _, in := range res.JSON200.Instruments {
		listed[in.Symbol] = in
		m.listed[in.Symbol] = true
	}
	wanted := m.symbols
	if len(wanted) == 0 {
		wanted = slices.Sorted(maps.Keys(listed))
	}
	for _, symbol := range wanted {
		was, seen := m.quoting[symbol]
		why := m.follow(symbol, listed)
		now := why == ""
		m.quoting[symbol] = now
		switch {
		case now && !was:
			w := m.walks[symbol]
			m.logger.Info("quoting", "symbol", symbol, "reference", w.in.reference.String(),
				"band_percent", w.in.bandPercent.String(), "size", w.size.String(), "levels", m.levels)
		case !now && (was || !seen):
			m.logger.Warn("not quoting", "symbol", symbol, "why", why)
		}
		if was && !now {
			m.cancel(context.WithoutCancel(ctx), symbol)
		}
	}
	return nil
}

// follow brings symbol's walk up to its listing; it answers why the
// instrument cannot be quoted now, or "" when it can.
func (m *maker) follow(symbol string, listed map[string]client.Instrument) (why string) {
	listing, ok := listed[symbol]
	if !ok {
		return "the gateway does not list it"
	}
	in, err := instrumentOf(listing)
	if err != nil {
		return err.Error()
	}
	if in.halted {
		return "halted"
	}
	if w := m.walks[symbol]; w != nil {
		err = w.follow(in)
	} else if w, err = newWalk(in, m.levels, m.sizeMultiple); err == nil {
		m.walks[symbol] = w
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// quoteUntil replaces the quotes at once and then every interval, reading
// the instruments again every refreshEvery, until ctx ends.
func (m *maker) quoteUntil(ctx context.Context, refreshEvery time.Duration) {
	ticker := time.NewTicker(m.every)
	defer ticker.Stop()
	refresh := time.NewTicker(refreshEvery)
	defer refresh.Stop()
	for {
		if m.stale {
			m.stale = false
			if err := m.refresh(ctx); err != nil {
				m.logger.Warn("refresh: quoting on the last listing", "error", err)
			}
		}
		m.requote(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-refresh.C:
			if err := m.refresh(ctx); err != nil {
				m.logger.Warn("refresh: quoting on the last listing", "error", err)
			}
			m.logger.Info("quotes", m.stats.attrs()...)
		}
	}
}

// requote walks each quoted instrument's mid one step, cancels its quotes
// (one DELETE /v1/orders?symbol=) and places the new ladder. A stop signal
// (ctx) ends the round between two instruments, never inside a request: a
// request cut off after the gateway took the order would leave a quote
// behind (the shutdown's cancel of everything takes it anyway).
func (m *maker) requote(ctx context.Context) {
	requests := context.WithoutCancel(ctx)
	var gone []string
	for _, symbol := range slices.Sorted(maps.Keys(m.quoting)) {
		if ctx.Err() != nil {
			break
		}
		if !m.quoting[symbol] {
			continue
		}
		w := m.walks[symbol]
		w.step(m.rng)
		missing, ok := m.cancel(requests, symbol)
		gone = append(gone, missing...)
		if !ok {
			// Placing a ladder beside one not canceled would stack them.
			continue
		}
		quotes, err := w.ladder()
		if err != nil {
			m.logger.Error("ladder", "symbol", symbol, "error", err)
			continue
		}
		m.placeLadder(requests, symbol, quotes)
		mid, _ := w.price(w.mid)
		m.logger.Debug("quoted", "symbol", symbol, "mid", mid.String(), "placed", len(m.placed[symbol]))
	}
	if len(gone) > 0 {
		m.classify(requests, gone)
	}
}

// placeLadder places the quotes all at once: between the cancel and the
// new quotes the instrument's side of the book is empty, and an order
// arriving then (a market order most of all) finds nothing to trade with,
// so that gap is kept as short as the requests allow. A 422 makes the
// instruments stale: the next round reads them again first.
func (m *maker) placeLadder(ctx context.Context, symbol string, quotes []quote) {
	ids := make([]string, len(quotes))
	statuses := make([]int, len(quotes))
	var wg sync.WaitGroup
	for i, q := range quotes {
		m.seq++
		clientOrderID := fmt.Sprintf("mm-%s-%d", m.run, m.seq)
		wg.Go(func() { ids[i], statuses[i] = m.place(ctx, symbol, q, clientOrderID) })
	}
	wg.Wait()
	for i, id := range ids {
		if id == "" {
			m.stats.refused++
			m.stale = m.stale || statuses[i] == http.StatusUnprocessableEntity
			continue
		}
		m.stats.placed++
		m.placed[symbol] = append(m.placed[symbol], id)
	}
}

// place sends one quote, limit gtc post-only, and answers the order's id
// when the gateway admitted it, or "" and the status it answered (0: no
// answer).
func (m *maker) place(ctx context.Context, symbol string, q quote, clientOrderID string) (string, int) {
	price := q.price.String()
	gtc, postOnly := client.TimeInForceGtc, true
	body := client.PlaceOrderRequest{
		ClientOrderID: clientOrderID,
		Symbol:        symbol,
		Side:          client.Side(q.side),
		Type:          client.OrderTypeLimit,
		Quantity:      q.quantity.String(),
		Price:         &price,
		TimeInForce:   &gtc,
		PostOnly:      &postOnly,
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
		m.logger.Warn("place", "symbol", symbol, "side", q.side, "price", price, "attempt", attempt, "error", err)
		time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
	}
	if err != nil {
		return "", 0
	}
	order := res.JSON202
	if order == nil {
		order = res.JSON200
	}
	if order == nil {
		m.logger.Warn("place refused", "symbol", symbol, "side", q.side, "price", price,
			"status", res.StatusCode(), "body", string(res.Body))
		return "", res.StatusCode()
	}
	return order.ID, 0
}

// cancel cancels every order of symbol with one DELETE /v1/orders?symbol=:
// the last ladder, and any quote a worker still held at the previous cancel
// and that came to rest since. ok when the gateway answered; missing are
// the last ladder's orders it did not cancel, which went away by
// themselves.
func (m *maker) cancel(ctx context.Context, symbol string) (missing []string, ok bool) {
	res, err := m.api.CancelAllOrdersWithResponse(ctx, &client.CancelAllOrdersParams{Symbol: &symbol})
	if err != nil {
		m.logger.Warn("cancel", "symbol", symbol, "error", err)
		return nil, false
	}
	// 202: some cancels are queued, not decided yet; the ones still
	// resting are canceled by their queued cancel (or fill meanwhile).
	list := res.JSON200
	if list == nil {
		list = res.JSON202
	}
	if list == nil {
		m.logger.Warn("cancel refused", "symbol", symbol, "status", res.StatusCode(), "body", string(res.Body))
		return nil, false
	}
	canceled := map[string]bool{}
	for _, o := range list.Orders {
		canceled[o.ID] = true
	}
	for _, id := range m.placed[symbol] {
		if !canceled[id] {
			missing = append(missing, id)
		}
	}
	m.stats.canceled += len(m.placed[symbol]) - len(missing)
	m.placed[symbol] = nil
	return missing, true
}

// classify tells the quotes that went away by themselves apart: rejected
// at settlement (post-only ones that would have traded, mostly: logged and
// counted, the next round quotes again) or gone otherwise (traded). One
// listing of the newest rejected orders answers for all of them.
func (m *maker) classify(ctx context.Context, ids []string) {
	rejected := map[string]client.Order{}
	limit, status := 200, client.ListOrdersParamsStatusRejected
	res, err := m.api.ListOrdersWithResponse(ctx, &client.ListOrdersParams{Limit: &limit, Status: &status})
	switch {
	case err != nil:
		m.logger.Warn("list rejected orders", "error", err)
	case res.JSON200 == nil:
		m.logger.Warn("list rejected orders", "status", res.StatusCode(), "body", string(res.Body))
	default:
		for _, o := range res.JSON200.Orders {
			rejected[o.ID] = o
		}
	}
	for _, id := range ids {
		o, ok := rejected[id]
		if !ok {
			m.stats.gone++
			continue
		}
		reason := ""
		if o.RejectReason != nil {
			reason = string(*o.RejectReason)
		}
		price := ""
		if o.Price != nil {
			price = *o.Price
		}
		if reason == string(client.OrderRejectReasonPostOnlyWouldTake) {
			m.stats.postOnly++
			m.logger.Info("quote rejected: it would have traded", "order_id", id, "symbol", o.Symbol, "side", string(o.Side),
				"price", price, "reject_reason", reason, "post_only_rejected", m.stats.postOnly)
			continue
		}
		m.stats.rejected++
		m.logger.Warn("quote rejected", "order_id", id, "symbol", o.Symbol, "side", string(o.Side),
			"price", price, "reject_reason", reason)
	}
}

// cancelEverything cancels every order of the account (DELETE /v1/orders),
// again until a call finds nothing left: an order a worker held during one
// call is not canceled by it, and comes to rest for the next. It gives up
// when ctx ends.
func (m *maker) cancelEverything(ctx context.Context) error {
	for {
		res, err := m.api.CancelAllOrdersWithResponse(ctx, nil)
		switch {
		case err != nil:
			return fmt.Errorf("DELETE /v1/orders: %w", err)
		case res.JSON202 != nil:
			// Queued cancels not decided yet: the next call finds them
			// canceled, or cancels what is left.
			m.logger.Info("cancels queued", "orders", len(res.JSON202.Orders))
		case res.JSON200 == nil:
			return fmt.Errorf("DELETE /v1/orders: %d %s", res.StatusCode(), strings.TrimSpace(string(res.Body)))
		case len(res.JSON200.Orders) == 0:
			return nil
		default:
			m.logger.Info("canceled", "orders", len(res.JSON200.Orders))
		}
		m.placed = map[string][]string{}
		select {
		case <-ctx.Done():
			return errors.Join(errors.New("orders may be left: a worker held some at the last cancel"), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
