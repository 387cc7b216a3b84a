package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// batchStats reads orders_settlement_batch_orders: how many transactions
// settled orders, how many orders they took, and how many took several.
type batchStats struct{ transactions, orders, batched uint64 }

func readBatchStats(t testing.TB, registry *prometheus.Registry) batchStats {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if family.GetName() != "orders_settlement_batch_orders" {
			continue
		}
		h := family.GetMetric()[0].GetHistogram()
		stats := batchStats{transactions: h.GetSampleCount(), orders: uint64(h.GetSampleSum())}
		for _, bucket := range h.GetBucket() {
			if bucket.GetUpperBound() == 1 {
				stats.batched = stats.transactions - bucket.GetCumulativeCount()
			}
		}
		return stats
	}
	t.Fatal("no orders_settlement_batch_orders series")
	return batchStats{}
}

// meteredSettler is a settler on m's database with its own metrics and m's
// recording relay.
func meteredSettler(t testing.TB, m *market) (*postgres.Settler, *prometheus.Registry) {
	t.Helper()
	registry := prometheus.NewRegistry()
	settler := postgres.NewSettler(m.db, m.relay, slog.New(slog.DiscardHandler)).WithMetrics(postgres.NewSettlementMetrics(registry))
	return settler, registry
}

// settleConcurrently hands the claims to eight handlers at once, taking
// turns among the settlers (each one a worker process), and fails on any
// error.
func settleConcurrently(t testing.TB, settlers []*postgres.Settler, claims []emq.Claim) {
	t.Helper()
	work := make(chan emq.Claim)
	var wg sync.WaitGroup
	for i := range 8 {
		settler := settlers[i%len(settlers)]
		wg.Go(func() {
			for claim := range work {
				if err := settlement.Settle(settler)(context.Background(), claim); err != nil {
					t.Errorf("settle %s (token %d): %v", claim.ID, claim.Token, err)
				}
			}
		})
	}
	for _, claim := range claims {
		work <- claim
	}
	close(work)
	wg.Wait()
}

// randomOrders draws n BTC-USD orders of the accounts around 50000: limit
// orders of every time in force, post-only ones and market orders, so they
// cross, rest, fill in part and cancel.
func randomOrders(random *rand.Rand, accounts []string, n int) []orders.Order {
	placed := make([]orders.Order, n)
	for i := range placed {
		side := orders.Buy
		if random.IntN(2) == 0 {
			side = orders.Sell
		}
		quantity := fmt.Sprintf("0.%03d", 1+random.IntN(50))
		price := fmt.Sprintf("%d.%02d", 49800+random.IntN(400), random.IntN(100))
		kind := random.IntN(20)
		if kind == 0 {
			price = ""
		}
		order := newOrder(accounts[random.IntN(len(accounts))], "BTC-USD", side, quantity, price)
		switch {
		case kind == 1:
			order.TimeInForce = orders.IOC
		case kind == 2:
			order.TimeInForce = orders.FOK
		case kind == 3:
			order.PostOnly = true
		}
		placed[i] = order
	}
	return placed
}

// TestTwoSettlersRaceOnOneBook: two settlers (two worker processes), eight
// handlers, 400 crossing orders on one instrument, every one settled twice
// (a redelivery racing the first delivery). The books must come out sound:
// every balance the sum of its entries per part, held the sum of the
// resting holds, the book not crossed, every filled quantity its trades.
func TestTwoSettlersRaceOnOneBook(t *testing.T) {
	m := newMarket(t)
	accounts := []string{m.alice, m.bob}
	for range 4 {
		accounts = append(accounts, m.newCustomer(t))
	}
	n := 400
	if testing.Short() {
		n = 100
	}
	placed := randomOrders(rand.New(rand.NewPCG(7, 11)), accounts, n)
	var claims []emq.Claim
	for _, order := range placed {
		claims = append(claims, claimOf(t, order, 1))
	}
	for i := 0; i < len(placed); i += 5 {
		claims = append(claims, claimOf(t, placed[i], 2))
	}
	first, registry := meteredSettler(t, m)
	second, _ := meteredSettler(t, m)
	settleConcurrently(t, []*postgres.Settler{first, second}, claims)

	statuses := map[string]int{}
	for _, order := range placed {
		statuses[mustOrder(t, m.db, order.ID).status]++
	}
	t.Logf("statuses %v, batches %+v", statuses, readBatchStats(t, registry))
	var trades int
	if err := m.db.QueryRow(context.Background(), `SELECT count(*) FROM trades`).Scan(&trades); err != nil {
		t.Fatal(err)
	}
	if trades == 0 || statuses["filled"] == 0 || statuses["open"]+statuses["partially_filled"] == 0 {
		t.Errorf("%d trades, statuses %v: want trades, fills and resting orders", trades, statuses)
	}
	mustAudit(t, m.db)
}

// TestCancelRacesMatching: alice's asks rest; bob's bids take them while
// alice cancels them all. Each ask's quantity is either filled or released,
// never both: trades + released = quantity exactly.
func TestCancelRacesMatching(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	var asks []orders.Order
	for i := range 40 {
		asks = append(asks, m.place(t, m.alice, orders.Sell, "0.02", fmt.Sprintf("%d", 50000+10*(i%5))))
	}
	var bids []emq.Claim
	for range 30 {
		bids = append(bids, claimOf(t, withTIF(newOrder(m.bob, "BTC-USD", orders.Buy, "0.03", "50050"), orders.IOC), 1))
	}
	var wg sync.WaitGroup
	wg.Go(func() { settleConcurrently(t, []*postgres.Settler{m.settler}, bids) })
	wg.Go(func() {
		for _, ask := range asks {
			_, err := m.settler.CancelResting(ctx, m.alice, ask.ID)
			if err != nil && !errors.Is(err, orders.ErrNotCancelable) {
				t.Errorf("cancel %s: %v", ask.ID, err)
			}
		}
	})
	wg.Wait()
	var canceled, filled int
	for _, ask := range asks {
		row := mustOrder(t, m.db, ask.ID)
		switch row.status {
		case "canceled":
			canceled++
		case "filled":
			filled++
		default:
			t.Errorf("ask %s is %s after the cancels", ask.ID, row.state())
		}
		// A sell holds its quantity: what did not trade was released, on
		// the balance row (no ledger transaction since 0014), and the ask
		// holds nothing more; alice's held below is the sum.
		var quantity, traded, filled, hold string
		if err := m.db.QueryRow(ctx, `SELECT trim_scale(o.quantity)::text,
				coalesce((SELECT trim_scale(sum(quantity)) FROM trades WHERE maker_order_id = o.id), 0)::text,
				trim_scale(o.filled_quantity)::text, trim_scale(o.hold)::text
			FROM orders o WHERE o.id = $1`, ask.ID).Scan(&quantity, &traded, &filled, &hold); err != nil {
			t.Fatal(err)
		}
		if mustRat(t, traded) != mustRat(t, filled) || hold != "0" || mustRat(t, filled) > mustRat(t, quantity) {
			t.Errorf("ask %s (%s): traded %s, filled %s of %s, still holds %s", ask.ID, row.status, traded, filled, quantity, hold)
		}
	}
	t.Logf("%d asks canceled, %d filled", canceled, filled)
	if got := balanceOf(t, m.db, m.alice, "BTC"); got.held != "0" {
		t.Errorf("alice still holds %s BTC", got.held)
	}
	mustAudit(t, m.db)
}

// mustRat reads a small decimal as a count of 1e-8 units, exact for the
// amounts these tests use.
func mustRat(t testing.TB, text string) int64 {
	t.Helper()
	var whole, frac int64
	var fracText string
	if _, err := fmt.Sscanf(text+".", "%d.", &whole); err != nil {
		t.Fatalf("amount %q: %v", text, err)
	}
	for i := range text {
		if text[i] == '.' {
			fracText = text[i+1:]
		}
	}
	for len(fracText) < 8 {
		fracText += "0"
	}
	if _, err := fmt.Sscanf(fracText, "%d", &frac); err != nil {
		t.Fatalf("amount %q: %v", text, err)
	}
	return whole*100000000 + frac
}

// TestSettleInstrumentsThatShareAccounts: three instruments whose traders
// share accounts (USD, BTC, ETH) settle side by side on two settlers with
// tight funds, while deposits and withdrawals move the same balances: every
// order gets one outcome and the audit stays clean.
func TestSettleInstrumentsThatShareAccounts(t *testing.T) {
	m := newMarket(t)
	var accounts []string
	for range 6 {
		accounts = append(accounts, m.newCustomerWith(t, map[string]string{"USD": "3000", "BTC": "0.1", "ETH": "1"}))
	}
	random := rand.New(rand.NewPCG(3, 5))
	var claims []emq.Claim
	for range 900 {
		side := orders.Buy
		if random.IntN(2) == 0 {
			side = orders.Sell
		}
		acc := accounts[random.IntN(len(accounts))]
		var o orders.Order
		switch random.IntN(3) {
		case 0:
			o = newOrder(acc, "BTC-USD", side, fmt.Sprintf("0.%03d", 1+random.IntN(40)), fmt.Sprintf("%d.%02d", 49800+random.IntN(400), random.IntN(100)))
		case 1:
			o = newOrder(acc, "ETH-USD", side, fmt.Sprintf("0.%03d", 1+random.IntN(400)), fmt.Sprintf("%d.%02d", 2980+random.IntN(40), 5*random.IntN(20)))
		default:
			o = newOrder(acc, "ETH-BTC", side, fmt.Sprintf("0.%03d", 5*(1+random.IntN(60))), fmt.Sprintf("0.0%d", 5950+random.IntN(100)))
		}
		if random.IntN(10) == 0 {
			o = withTIF(o, orders.IOC)
		}
		claims = append(claims, claimOf(t, o, 1))
	}
	first, _ := meteredSettler(t, m)
	second, _ := meteredSettler(t, m)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	ledger := postgres.NewLedger(m.db)
	wg.Go(func() {
		r := rand.New(rand.NewPCG(9, 9))
		for ctx.Err() == nil {
			acc := accounts[r.IntN(len(accounts))]
			if r.IntN(2) == 0 {
				_ = ledger.Withdraw(context.Background(), acc, "USD", "100")
			} else {
				_ = ledger.Deposit(context.Background(), acc, "USD", "100")
			}
		}
	})
	work := make(chan emq.Claim)
	var handlers sync.WaitGroup
	var retried atomic.Int64
	for i := range 16 {
		settler := []*postgres.Settler{first, second}[i%2]
		handlers.Go(func() {
			for claim := range work {
				// As the queue does: a failure that may pass (PostgreSQL
				// chose the settlement as a deadlock's victim, which batches
				// on shared accounts can meet while deposits and withdrawals
				// race them) is tried again; one that cannot fails.
				for attempt := 1; ; attempt++ {
					err := settlement.Settle(settler)(context.Background(), claim)
					if err == nil {
						break
					}
					if errors.Is(err, emq.ErrPermanent) || attempt == 5 {
						t.Errorf("settle %s, attempt %d: %v", claim.ID, attempt, err)
						break
					}
					retried.Add(1)
				}
			}
		})
	}
	for _, c := range claims {
		work <- c
	}
	close(work)
	handlers.Wait()
	stop()
	wg.Wait()
	for _, claim := range claims {
		mustOrder(t, m.db, claim.ID)
	}
	mustAudit(t, m.db)
	t.Logf("%d settlements tried again", retried.Load())
}

// TestSettleQueueForgetsIdleInstruments: once every order settled, no
// instrument is left in the settler's queue.
func TestSettleQueueForgetsIdleInstruments(t *testing.T) {
	m := newMarket(t)
	settler, _ := meteredSettler(t, m)
	var claims []emq.Claim
	for i := range 200 {
		sym := []string{"BTC-USD", "ETH-USD", "ETH-BTC"}[i%3]
		price := map[string]string{"BTC-USD": "49000", "ETH-USD": "2900", "ETH-BTC": "0.059"}[sym]
		qty := map[string]string{"BTC-USD": "0.001", "ETH-USD": "0.01", "ETH-BTC": "0.01"}[sym]
		claims = append(claims, claimOf(t, newOrder(m.alice, sym, orders.Buy, qty, price), 1))
	}
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			if err := settlement.Settle(settler)(context.Background(), c); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// The last batch's runner hands on after its handler returned.
	deadline := time.Now().Add(5 * time.Second)
	for postgres.SettleQueueInstruments(settler) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := postgres.SettleQueueInstruments(settler); n != 0 {
		t.Errorf("%d instruments left in the queue", n)
	}
}

// TestSettlementLeavesConnectionsBesideIt: with a worker's pool and 300
// orders in flight, among them orders PostgreSQL refuses (whose batches then
// settle order by order, one connection each), settlement never holds more
// than postgres.SettlerConnections, so what runs beside it (the coherence
// consumer, the outbox sweep) finds a connection.
func TestSettlementLeavesConnectionsBesideIt(t *testing.T) {
	m := newMarket(t)
	config := m.db.Config().Copy()
	config.MaxConns = postgres.SettlerConnections + 4
	held := &heldConnections{}
	config.ConnConfig.Tracer = held
	db, err := pgxpool.NewWithConfig(context.Background(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler))
	var accounts []string
	for range 8 {
		accounts = append(accounts, m.newCustomer(t))
	}
	var placed []orders.Order
	for i := range 300 {
		o := newOrder(accounts[i%len(accounts)], "BTC-USD", orders.Buy, "0.001", "49000")
		if i%50 == 25 {
			o.ClientOrderID = "not a valid id" // refused by the orders CHECK: the batch settles one by one
		}
		placed = append(placed, o)
	}
	var handlers sync.WaitGroup
	for _, o := range placed {
		handlers.Go(func() { _ = settlement.Settle(settler)(context.Background(), claimOf(t, o, 1)) })
	}
	handlers.Wait()
	peak := held.peak.Load()
	t.Logf("settlement held at most %d connections", peak)
	if peak > postgres.SettlerConnections {
		t.Errorf("settlement held %d connections, more than postgres.SettlerConnections (%d)", peak, postgres.SettlerConnections)
	}
	if peak < postgres.SettlerConnections/2 {
		t.Errorf("settlement held at most %d connections: too few for the test to mean anything", peak)
	}
}

// heldConnections counts a pool's connections from their acquire to their
// release, exactly. The pool's AcquiredConns, sampled, can miss a short
// peak, and goes on counting a broken connection that its holder released
// while the pool closes it in the background.
type heldConnections struct {
	held, peak atomic.Int32
}

func (h *heldConnections) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	return ctx
}

func (h *heldConnections) TraceAcquireEnd(_ context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if data.Err != nil {
		return
	}
	held := h.held.Add(1)
	for peak := h.peak.Load(); held > peak && !h.peak.CompareAndSwap(peak, held); peak = h.peak.Load() {
	}
}

func (h *heldConnections) TraceRelease(*pgxpool.Pool, pgxpool.TraceReleaseData) { h.held.Add(-1) }

// TraceQueryStart and TraceQueryEnd make it a pgx.QueryTracer, the type
// of the field the pool finds its acquire and release tracers in.
func (h *heldConnections) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (h *heldConnections) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestSettleRefusesASecondOrderOfOneClientOrderID: a client's retry that
// the queue admitted again under a new order id (Redis lost its dedup
// window) is rejected duplicate_client_order_id, names the first order,
// and moves no money, whether it settles after the first or in its batch.
func TestSettleRefusesASecondOrderOfOneClientOrderID(t *testing.T) {
	for _, tc := range []struct {
		name     string
		together bool
	}{
		{name: "after the first settled"},
		{name: "in the first's batch", together: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMarket(t)
			first := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "49000")
			retry := first
			retry.ID = orders.NewOrderID()
			if tc.together {
				errs, err := postgres.SettleTogether(context.Background(), m.settler, []orders.Order{first, retry})
				if err != nil || errors.Join(errs...) != nil {
					t.Fatalf("settle together: %v %v", err, errs)
				}
			} else {
				m.settle(t, first, 1)
				m.settle(t, retry, 1)
			}
			if got := mustOrder(t, m.db, first.ID).status; got != "open" {
				t.Errorf("the first is %s, want open", got)
			}
			if got := mustOrder(t, m.db, retry.ID).state(); got != "rejected(duplicate_client_order_id) filled 0 notional 0 fees 0 hold 0" {
				t.Errorf("the retry is %s", got)
			}
			var duplicateOf *string
			if err := m.db.QueryRow(context.Background(), `SELECT duplicate_of FROM orders WHERE id = $1`, retry.ID).Scan(&duplicateOf); err != nil || duplicateOf == nil || *duplicateOf != first.ID {
				t.Errorf("the retry is a duplicate of %v (%v), want %s", deref(duplicateOf), err, first.ID)
			}
			if entries := entriesOf(t, m.db, retry.ID); len(entries) != 0 {
				t.Errorf("the retry moved money: %v", entries)
			}
			// Only the first order's hold: 0.1 × 49000 + 20 bps.
			if got := balanceOf(t, m.db, m.alice, "USD").held; got != "4909.8" {
				t.Errorf("alice holds %s USD, want 4909.8", got)
			}
			mustAudit(t, m.db)
		})
	}
}
