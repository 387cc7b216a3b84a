package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// owner is a new settler on m's database that owns symbol at epoch, until
// the test ends.
func owner(t testing.TB, m *market, symbol string, epoch int64) *postgres.Settler {
	t.Helper()
	s := postgres.NewSettler(m.db, nil, slog.New(slog.DiscardHandler))
	if err := s.TakeOver(context.Background(), symbol, epoch); err != nil {
		t.Fatalf("take %s over at %d: %v", symbol, epoch, err)
	}
	t.Cleanup(func() { s.GiveUp(symbol) })
	return s
}

func mustFenced(t testing.TB, err error, symbol string, epoch int64) {
	t.Helper()
	var fenced *postgres.FencedError
	if !errors.Is(err, postgres.ErrFenced) || !errors.As(err, &fenced) {
		t.Fatalf("got %v, want a *FencedError", err)
	}
	if fenced.Symbol != symbol || fenced.Epoch != epoch {
		t.Errorf("fenced by %s at %d, want %s at %d", fenced.Symbol, fenced.Epoch, symbol, epoch)
	}
}

// TestTakeOverRefusesAnEpochNotAbove: PostgreSQL keeps the highest epoch
// and names it to a settler taking over at or below it.
func TestTakeOverRefusesAnEpochNotAbove(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	owner(t, m, "BTC-USD", 5)
	for _, tc := range []struct {
		name  string
		epoch int64
	}{{"the same epoch", 5}, {"a lower epoch", 3}, {"epoch zero", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := postgres.NewSettler(m.db, nil, slog.New(slog.DiscardHandler))
			mustFenced(t, s.TakeOver(ctx, "BTC-USD", tc.epoch), "BTC-USD", 5)
		})
	}
	s := postgres.NewSettler(m.db, nil, slog.New(slog.DiscardHandler))
	if err := s.TakeOver(ctx, "NOPE-USD", 1); err == nil || errors.Is(err, postgres.ErrFenced) {
		t.Errorf("taking an unknown instrument over: %v", err)
	}
	var epoch int64
	if err := m.db.QueryRow(ctx, `SELECT owner_epoch FROM instruments WHERE symbol = 'BTC-USD'`).Scan(&epoch); err != nil || epoch != 5 {
		t.Errorf("owner_epoch %d, %v; want 5", epoch, err)
	}
}

// TestAStaleOwnerIsFencedByPostgres: A owns BTC-USD at epoch 1, B takes it
// over at 2 (A's lease lost, A not told). A's next write is refused by
// PostgreSQL's fence, writes nothing, and fails with ErrFenced naming B's
// epoch, as do A's calls after it; B matches on the book A left.
func TestAStaleOwnerIsFencedByPostgres(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	a := owner(t, m, "BTC-USD", 1)
	ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000")
	if err := a.Settle(ctx, ask, 1); err != nil {
		t.Fatal(err)
	}
	b := owner(t, m, "BTC-USD", 2)
	before := balances(t, m.db)
	outboxBefore := lastOutboxID(t, m.db)

	bid := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")
	mustFenced(t, a.Settle(ctx, bid, 1), "BTC-USD", 2)
	if _, found := readOrder(t, m.db, bid.ID); found {
		t.Errorf("the stale owner wrote %s", bid.ID)
	}
	if row := mustOrder(t, m.db, ask.ID); row.status != "open" {
		t.Errorf("the stale owner changed the ask: %s", row.state())
	}
	if got := balances(t, m.db); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("balances moved: %v, were %v", got, before)
	}
	if got := outboxAfter(t, m.db, outboxBefore); len(got) > 0 {
		t.Errorf("the stale owner wrote outbox rows %v", got)
	}
	// Fenced for good: the next call fails at once.
	mustFenced(t, a.Settle(ctx, newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000"), 1), "BTC-USD", 2)

	if err := b.Settle(ctx, bid, 2); err != nil {
		t.Fatal(err)
	}
	if row := mustOrder(t, m.db, bid.ID); row.status != "filled" {
		t.Errorf("the bid on the new owner: %s", row.state())
	}
	// Given up, A settles under the instrument's lock again.
	a.GiveUp("BTC-USD")
	b.GiveUp("BTC-USD")
	late := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "49000")
	if err := a.Settle(ctx, late, 1); err != nil {
		t.Fatal(err)
	}
	if row := mustOrder(t, m.db, late.ID); row.status != "open" {
		t.Errorf("after giving up: %s", row.state())
	}
	mustAudit(t, m.db)
}

// settleJoining returns settle: it settles an order on s in a goroutine
// of wg, failing t if that fails, and returns once the order joined the
// owner's queue, so each order joins after the one settled before it.
// joined hears of every other call that joins (a Command's).
func settleJoining(t testing.TB, ctx context.Context, s *postgres.Settler, wg *sync.WaitGroup) (settle func(orders.Order), joined <-chan struct{}) {
	t.Helper()
	joins := make(chan struct{}, 8)
	postgres.SetOwnedJoined(t, func() {
		select {
		case joins <- struct{}{}:
		default:
		}
	})
	return func(order orders.Order) {
		wg.Go(func() {
			if err := s.Settle(ctx, order, 1); err != nil {
				t.Errorf("settle %s: %v", order.ID, err)
			}
		})
		<-joins
	}, joins
}

// waitOverlap waits, 10 s at most, until s's owner has decided a batch
// while another was written.
func waitOverlap(s *postgres.Settler) {
	deadline := time.Now().Add(10 * time.Second)
	for postgres.OwnedOverlaps(s) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}

// settleInOrder settles the orders on s each in its own goroutine, each
// call joining the owner's queue only after the one before joined, so the
// owner decides them in this order, in batches of whatever waited.
func settleInOrder(t testing.TB, s *postgres.Settler, placed []orders.Order) []error {
	t.Helper()
	joined := make(chan struct{}, 1)
	postgres.SetOwnedJoined(t, func() { joined <- struct{}{} })
	// Pauses now and then, so that batches of every size form.
	pauses := rand.New(rand.NewPCG(uint64(len(placed)), 7))
	errs := make([]error, len(placed))
	var wg sync.WaitGroup
	for i, order := range placed {
		wg.Go(func() { errs[i] = s.Settle(context.Background(), order, 1) })
		select {
		case <-joined:
		case <-time.After(10 * time.Second):
			t.Fatalf("order %d never joined the owner's queue", i)
		}
		time.Sleep(time.Duration(pauses.IntN(1500)) * time.Microsecond)
	}
	wg.Wait()
	return errs
}

// TestOwnerDecidesAsTheLockedPath: the same 600 orders (every time in
// force, post-only and market orders, reused client order ids,
// redeliveries) settled one by one under the instrument's lock on one
// database, and by an owner on another, in pipelined batches and across a
// reload of the book halfway, leave the same orders, trades and balances,
// and both audits clean.
func TestOwnerDecidesAsTheLockedPath(t *testing.T) {
	const customers, n = 6, 600
	locked, owned := newMarket(t), newMarket(t)
	names := make([]string, customers)
	lockedAccounts, ownedAccounts := make(map[string]string), make(map[string]string)
	for i := range names {
		names[i] = fmt.Sprintf("#%d", i)
		// Funds that run short, so that funds checks refuse orders.
		funds := map[string]string{"USD": "20000", "BTC": "0.4"}
		lockedAccounts[names[i]], ownedAccounts[names[i]] = locked.newCustomerWith(t, funds), owned.newCustomerWith(t, funds)
	}
	lockedAccounts["alice"], lockedAccounts["bob"] = locked.alice, locked.bob
	ownedAccounts["alice"], ownedAccounts["bob"] = owned.alice, owned.bob
	random := rand.New(rand.NewPCG(24, 15))
	placed := randomOrders(random, names, n)
	for i := range placed {
		switch {
		case i > 0 && i%37 == 0:
			// a client order id an earlier order of the account holds
			for j := i - 1; j >= 0; j-- {
				if placed[j].Account == placed[i].Account {
					placed[i].ClientOrderID = placed[j].ClientOrderID
					break
				}
			}
		case i > 0 && i%53 == 0:
			placed[i] = placed[i-1-random.IntN(min(i, 5))] // a redelivery
		}
	}
	on := func(accounts map[string]string, list []orders.Order) []orders.Order {
		out := slices.Clone(list)
		for i := range out {
			out[i].Account = accounts[out[i].Account]
		}
		return out
	}

	ctx := context.Background()
	for _, order := range on(lockedAccounts, placed) {
		if err := locked.settler.Settle(ctx, order, 1); err != nil {
			t.Fatalf("locked: %v", err)
		}
	}
	s := owner(t, owned, "BTC-USD", 1)
	// Slow writes: each batch is decided while the one before is written.
	postgres.SetBeforeOwnedWrite(t, func() { time.Sleep(time.Millisecond) })
	ownedOrders := on(ownedAccounts, placed)
	errs := settleInOrder(t, s, ownedOrders[:n/2])
	// A reload: the book from PostgreSQL as the first half left it.
	s.GiveUp("BTC-USD")
	if err := s.TakeOver(ctx, "BTC-USD", 2); err != nil {
		t.Fatal(err)
	}
	errs = append(errs, settleInOrder(t, s, ownedOrders[n/2:])...)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("owned: %v", err)
	}
	t.Logf("%d of the owner's batches decided while the one before was being written", postgres.OwnedOverlaps(s))

	lockedState := marketState(t, locked.db, lockedAccounts)
	ownedState := marketState(t, owned.db, ownedAccounts)
	for _, part := range []string{"orders", "trades", "balances"} {
		if got, want := ownedState[part], lockedState[part]; !slices.Equal(got, want) {
			for i := range max(len(got), len(want)) {
				g, w := "", ""
				if i < len(got) {
					g = got[i]
				}
				if i < len(want) {
					w = want[i]
				}
				if g != w {
					t.Errorf("%s: first difference at %d:\n owned  %s\n locked %s", part, i, g, w)
					break
				}
			}
		}
	}
	if len(lockedState["trades"]) < 50 {
		t.Errorf("only %d trades: the orders should cross", len(lockedState["trades"]))
	}
	var short int
	for _, line := range lockedState["orders"] {
		if strings.Contains(line, string(orders.ReasonInsufficientFunds)) {
			short++
		}
	}
	t.Logf("%d trades, %d orders refused for funds", len(lockedState["trades"]), short)
	if short == 0 {
		t.Error("no order was refused for funds")
	}
	mustAudit(t, locked.db)
	mustAudit(t, owned.db)
}

// marketState is every order, trade and balance row in a text that names
// accounts as the test does, so two databases compare.
func marketState(t testing.TB, db *pgxpool.Pool, accounts map[string]string) map[string][]string {
	t.Helper()
	replacer := make([]string, 0, 2*len(accounts))
	for name, id := range accounts {
		replacer = append(replacer, id, name)
	}
	names := strings.NewReplacer(replacer...)
	state := make(map[string][]string)
	for part, query := range map[string]string{
		"orders": `SELECT concat_ws(' ', id, account_id, client_order_id, side, type, time_in_force, status, reject_reason,
				cancel_reason, trim_scale(filled_quantity), trim_scale(filled_notional), trim_scale(fees), trim_scale(hold),
				sequence IS NOT NULL, duplicate_of, trim_scale(protection_price))
			FROM orders ORDER BY id`,
		"trades": `SELECT concat_ws(' ', maker_order_id, taker_order_id, maker_account_id, taker_account_id, taker_side,
				trim_scale(price), trim_scale(quantity), trim_scale(maker_fee), trim_scale(taker_fee))
			FROM trades ORDER BY id`,
		"balances": `SELECT concat_ws(' ', account_id, asset, trim_scale(available), trim_scale(held), version)
			FROM balances WHERE version > 0 ORDER BY account_id, asset`,
	} {
		rows, err := db.Query(context.Background(), query)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for i := range lines {
			lines[i] = names.Replace(lines[i])
		}
		slices.Sort(lines)
		state[part] = lines
	}
	return state
}

// TestOwnerLoadsAgainAfterACancelBehindItsBack: an order rests in the
// owner's book; its client cancels it in PostgreSQL directly (DELETE
// /v1/orders/{id}). The owner's next order that would fill it, or whose
// outcome rests on it (a post-only order rejected for it, a self-trade
// prevention stopping at it), must not be decided on it: the makers' guard
// refuses the write, the owner loads the book again, and the order is
// decided on the book without it.
func TestOwnerLoadsAgainAfterACancelBehindItsBack(t *testing.T) {
	m := newMarket(t)
	postOnly := func(o orders.Order) orders.Order { o.PostOnly = true; return o }
	for _, tc := range []struct {
		name     string
		behind   func(m *market) orders.Order // rests behind the canceled order, if set
		resting  func(m *market) orders.Order
		next     func(m *market) orders.Order
		wantNext string
	}{{
		name:     "a fill",
		resting:  func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000") },
		next:     func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000") },
		wantNext: "open(<nil>) filled 0 notional 0 fees 0 hold 5010",
	}, {
		name:     "a post-only order rejected for it",
		resting:  func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000") },
		next:     func(m *market) orders.Order { return postOnly(newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")) },
		wantNext: "open(<nil>) filled 0 notional 0 fees 0 hold 5010",
	}, {
		name:    "self-trade prevention stopping at it",
		resting: func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000") },
		next: func(m *market) orders.Order {
			return withTIF(newOrder(m.bob, "BTC-USD", orders.Sell, "0.1", "50000"), orders.IOC)
		},
		wantNext: "canceled(unfilled_ioc) filled 0 notional 0 fees 0 hold 0",
	}, {
		// 0.0002 × 45,000 is 9 USD, under the minimum of 10; × 55,000, 11.
		name:     "a market order priced below the minimum notional at it",
		behind:   func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.01", "55000") },
		resting:  func(m *market) orders.Order { return newOrder(m.alice, "BTC-USD", orders.Sell, "0.01", "45000") },
		next:     func(m *market) orders.Order { return newOrder(m.bob, "BTC-USD", orders.Buy, "0.0002", "") },
		wantNext: "filled(<nil>) filled 0.0002 notional 11 fees 0.022 hold 0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			// A book of its own: the instrument's orders of earlier cases
			// are canceled first.
			if _, err := m.settler.CancelAllResting(ctx, m.alice, "BTC-USD"); err != nil {
				t.Fatal(err)
			}
			if _, err := m.settler.CancelAllResting(ctx, m.bob, "BTC-USD"); err != nil {
				t.Fatal(err)
			}
			s := owner(t, m, "BTC-USD", time.Now().UnixNano())
			if tc.behind != nil {
				if err := s.Settle(ctx, tc.behind(m), 1); err != nil {
					t.Fatal(err)
				}
			}
			resting := tc.resting(m)
			if err := s.Settle(ctx, resting, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := m.settler.CancelResting(ctx, resting.Account, resting.ID); err != nil {
				t.Fatal(err)
			}
			next := tc.next(m)
			if err := s.Settle(ctx, next, 1); err != nil {
				t.Fatal(err)
			}
			if loads := postgres.OwnedLoads(s); loads != 2 {
				t.Errorf("the owner loaded its book %d times, want 2 (taking over, then after the refused write)", loads)
			}
			if row := mustOrder(t, m.db, resting.ID); row.status != "canceled" || row.filled != "0" {
				t.Errorf("the canceled order: %s", row.state())
			}
			if row := mustOrder(t, m.db, next.ID); row.state() != tc.wantNext {
				t.Errorf("the next order: %s, want %s", row.state(), tc.wantNext)
			}
			mustAudit(t, m.db)
		})
	}
}

// TestOwnerRacesCancels: as TestCancelRacesMatching, with an owner
// matching while the cancels change its book behind its back: each ask is
// filled or released, never both, and the audit is clean.
func TestOwnerRacesCancels(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	s := owner(t, m, "BTC-USD", 1)
	var asks []orders.Order
	for i := range 40 {
		ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.02", fmt.Sprintf("%d", 50000+10*(i%5)))
		if err := s.Settle(ctx, ask, 1); err != nil {
			t.Fatal(err)
		}
		asks = append(asks, ask)
	}
	var wg sync.WaitGroup
	for range 30 {
		bid := withTIF(newOrder(m.bob, "BTC-USD", orders.Buy, "0.03", "50050"), orders.IOC)
		wg.Go(func() {
			// A single order that keeps finding its makers canceled is
			// refused as stale and runs again, as the worker's retry does.
			var err error
			for attempt := int64(1); attempt <= 5; attempt++ {
				if err = s.Settle(ctx, bid, attempt); err == nil || !staleRefusal(err) {
					break
				}
			}
			if err != nil {
				t.Errorf("settle %s: %v", bid.ID, err)
			}
		})
	}
	wg.Go(func() {
		for _, ask := range asks {
			_, err := m.settler.CancelResting(ctx, m.alice, ask.ID)
			if err != nil && !errors.Is(err, orders.ErrNotCancelable) {
				t.Errorf("cancel %s: %v", ask.ID, err)
			}
		}
	})
	wg.Wait()
	for _, ask := range asks {
		row := mustOrder(t, m.db, ask.ID)
		if row.status != "canceled" && row.status != "filled" {
			t.Errorf("ask %s is %s after the cancels", ask.ID, row.state())
		}
	}
	if got := balanceOf(t, m.db, m.alice, "BTC"); got.held != "0" {
		t.Errorf("alice still holds %s BTC", got.held)
	}
	t.Logf("the owner loaded its book %d times", postgres.OwnedLoads(s))
	mustAudit(t, m.db)
}

// TestOwnerDecidesTheNextBatchWhileOneIsWritten: while the first order's
// write is held back, the second is decided on the book the first left
// (it fills the first, which rests, uncommitted), and neither Settle
// returns before its own batch committed.
func TestOwnerDecidesTheNextBatchWhileOneIsWritten(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	s := owner(t, m, "BTC-USD", 1)
	entered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	postgres.SetBeforeOwnedWrite(t, func() {
		once.Do(func() { close(entered); <-hold }) // the first write waits for the test
	})
	ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000")
	bid := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")
	done := make(chan string, 2)
	var settling sync.WaitGroup
	settle := func(order orders.Order) {
		settling.Go(func() {
			if err := s.Settle(ctx, order, 1); err != nil {
				t.Errorf("settle %s: %v", order.ID, err)
			}
			done <- order.ID
		})
	}
	settle(ask)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the ask's write never started")
	}
	settle(bid)
	waitOverlap(s)
	if got := postgres.OwnedOverlaps(s); got != 1 {
		close(hold)
		t.Fatalf("%d batches decided while one was written, want 1", got)
	}
	select {
	case id := <-done:
		t.Errorf("%s settled before the first write committed", id)
	case <-time.After(50 * time.Millisecond):
	}
	if _, found := readOrder(t, m.db, ask.ID); found {
		t.Error("the held write committed")
	}
	close(hold)
	settling.Wait()
	if row := mustOrder(t, m.db, bid.ID); row.status != "filled" {
		t.Errorf("the bid: %s", row.state())
	}
	if row := mustOrder(t, m.db, ask.ID); row.status != "filled" {
		t.Errorf("the ask: %s", row.state())
	}
	mustAudit(t, m.db)
}

// BenchmarkSettleOwnership settles the same orders under the instrument's
// lock and by an owner of each instrument, on one hot instrument and over
// three: 50 accounts, buys and sells at one price per instrument (most
// trade), from 512 goroutines per instrument (a worker's handlers at its
// default concurrency: a backlog on each) on a pool of 40 connections (a
// worker's: SettlerConnections and those beside). It reports orders
// settled per second, orders per batch and, for the owner, the share of
// batches decided while the one before was written. The test server runs
// with fsync off, so a commit costs far less than in production and the
// cycle is bound by CPU, not by the write's latency that pipelining hides;
// ORDERGATE_BENCH_POSTGRES_URL names a PostgreSQL with production settings
// to run on instead (a database is created on it per variant). Compare
// the variants of one run only.
func BenchmarkSettleOwnership(b *testing.B) {
	type book struct {
		symbol, quantity, price string
	}
	hot := []book{{"BTC-USD", "0.00100", "50000.00"}}
	three := []book{{"BTC-USD", "0.00100", "50000.00"}, {"ETH-USD", "0.010", "3000.00"}, {"ETH-BTC", "0.005", "0.06000"}}
	for _, run := range []struct {
		name    string
		markets []book
	}{{"hot", hot}, {"three", three}} {
		for _, owned := range []bool{false, true} {
			name := run.name + "/locked"
			if owned {
				name = run.name + "/owned"
			}
			b.Run(name, func(b *testing.B) {
				db, accounts := benchCustomers(b, "&pool_max_conns=40", 50)
				registry := prometheus.NewRegistry()
				settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler)).
					WithMetrics(postgres.NewSettlementMetrics(registry))
				if owned {
					for epoch, market := range run.markets {
						if err := settler.TakeOver(context.Background(), market.symbol, int64(epoch)+1); err != nil {
							b.Fatal(err)
						}
						b.Cleanup(func() { settler.GiveUp(market.symbol) })
					}
				}
				placed := make([]orders.Order, b.N)
				for i := range placed {
					market := run.markets[i%len(run.markets)]
					side := orders.Buy
					if i/len(run.markets)%2 == 1 {
						side = orders.Sell
					}
					placed[i] = newOrder(accounts[i%len(accounts)], market.symbol, side, market.quantity, market.price)
				}
				work := make(chan orders.Order, len(placed))
				for _, order := range placed {
					work <- order
				}
				close(work)
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range 512 * len(run.markets) {
					wg.Go(func() {
						for order := range work {
							if err := settler.Settle(context.Background(), order, 1); err != nil {
								b.Error(err)
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "orders/s")
				b.StopTimer()
				stats := readBatchStats(b, registry)
				b.ReportMetric(float64(stats.orders)/float64(stats.transactions), "orders/batch")
				if owned {
					b.ReportMetric(float64(postgres.OwnedOverlaps(settler))/float64(stats.transactions), "overlapped/batch")
					// Beyond the take-overs: a write failed and the book was loaded again.
					b.ReportMetric(float64(postgres.OwnedLoads(settler)-int64(len(run.markets))), "reloads")
				}
				mustAudit(b, db)
			})
		}
	}
}

// TestOwnerSeesAHaltBehindItsBack: the instrument is halted in PostgreSQL
// while owned; the fence finds its terms changed, the owner loads the
// instrument again and rejects the order as halted.
func TestOwnerSeesAHaltBehindItsBack(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	s := owner(t, m, "BTC-USD", 1)
	if _, err := m.db.Exec(ctx, `UPDATE instruments SET status = 'halted' WHERE symbol = 'BTC-USD'`); err != nil {
		t.Fatal(err)
	}
	bid := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")
	if err := s.Settle(ctx, bid, 1); err != nil {
		t.Fatal(err)
	}
	if row := mustOrder(t, m.db, bid.ID); row.status != "rejected" || deref(row.reason) != string(orders.ReasonInstrumentHalted) {
		t.Errorf("the bid on a halted instrument: %s", row.state())
	}
	mustAudit(t, m.db)
}

// TestGiveUpWaitsForTheWritesInFlight: GiveUp returns only once the batches
// the owner decided are written; the settler then settles the instrument
// under its lock, loading no book.
func TestGiveUpWaitsForTheWritesInFlight(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	s := owner(t, m, "BTC-USD", 1)
	entered, hold := make(chan struct{}), make(chan struct{})
	var once sync.Once
	postgres.SetBeforeOwnedWrite(t, func() {
		once.Do(func() { close(entered); <-hold })
	})
	ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000")
	var settling sync.WaitGroup
	settling.Go(func() {
		if err := s.Settle(ctx, ask, 1); err != nil {
			t.Errorf("settle the ask: %v", err)
		}
	})
	<-entered
	gaveUp := make(chan struct{})
	go func() {
		s.GiveUp("BTC-USD")
		close(gaveUp)
	}()
	select {
	case <-gaveUp:
		t.Fatal("GiveUp returned with a write in flight")
	case <-time.After(50 * time.Millisecond):
	}
	close(hold)
	<-gaveUp
	if row := mustOrder(t, m.db, ask.ID); row.status != "open" {
		t.Errorf("the ask: %s", row.state())
	}
	settling.Wait()
	bid := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")
	if err := s.Settle(ctx, bid, 1); err != nil {
		t.Fatal(err)
	}
	if row := mustOrder(t, m.db, bid.ID); row.status != "filled" {
		t.Errorf("the bid after giving up: %s", row.state())
	}
	if loads := postgres.OwnedLoads(s); loads != 1 {
		t.Errorf("%d loads, want the take-over's only", loads)
	}
	mustAudit(t, m.db)
}

// benchCustomers opens a pool on the benchmarks' database, with query
// ("&pool_max_conns=N" or "") after its URL, made as the workers make
// theirs (postgres.NewPool), and makes n customers there.
func benchCustomers(b *testing.B, query string, n int) (*pgxpool.Pool, []string) {
	b.Helper()
	db, err := postgres.NewPool(context.Background(), benchDatabaseURL(b)+query)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(db.Close)
	m := &market{db: db}
	accounts := make([]string, n)
	for i := range accounts {
		accounts[i] = m.newCustomer(b)
	}
	return db, accounts
}

// benchDatabaseURL is a migrated database for a benchmark: on the server
// ORDERGATE_BENCH_POSTGRES_URL names (dropped when the benchmark ends), or
// the test server's.
func benchDatabaseURL(b *testing.B) string {
	b.Helper()
	admin := os.Getenv("ORDERGATE_BENCH_POSTGRES_URL")
	if admin == "" {
		return testserver.MigratedPostgres(b).URL
	}
	ctx := context.Background()
	name := fmt.Sprintf("bench_%s_%d", strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(b.Name())), time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			b.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			b.Error(err)
		}
	})
	target, err := url.Parse(admin)
	if err != nil {
		b.Fatal(err)
	}
	target.Path = "/" + name
	if err := migrations.Up(target.String()); err != nil {
		b.Fatal(err)
	}
	return target.String()
}

// staleRefusal: the error a settlement refused as stale (SETTLESTALE)
// returns; the order's job runs again.
func staleRefusal(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && strings.HasPrefix(pgErr.Message, "SETTLESTALE")
}

// heldRelay holds its first call until released, and records the order
// in which calls start and end.
type heldRelay struct {
	first   sync.Once
	started chan struct{}
	release chan struct{}

	mu     sync.Mutex
	events []string
}

func (r *heldRelay) Relay(ctx context.Context, entries []orders.OutboxEntry) {
	held := false
	r.first.Do(func() { held = true })
	r.record(fmt.Sprintf("start %d", len(r.eventsOf("start"))+1))
	if held {
		close(r.started)
		<-r.release
	}
	r.record(fmt.Sprintf("end %d", len(r.eventsOf("end"))+1))
}

func (r *heldRelay) record(event string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event)
}

func (r *heldRelay) eventsOf(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var of []string
	for _, e := range r.events {
		if strings.HasPrefix(e, prefix) {
			of = append(of, e)
		}
	}
	return of
}

// TestOwnerRelaysItsBatchesInCommitOrder: an owner's batch relays its
// outbox only once the batch before relayed its own, so an account's
// events rows reach its log in their source's order (a row relayed before
// the one before it would find a gap and fill it from the outbox).
func TestOwnerRelaysItsBatchesInCommitOrder(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	relay := &heldRelay{started: make(chan struct{}), release: make(chan struct{})}
	s := postgres.NewSettler(m.db, relay, slog.New(slog.DiscardHandler))
	if err := s.TakeOver(ctx, "BTC-USD", 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.GiveUp("BTC-USD") })

	var settling sync.WaitGroup
	settle := func(order orders.Order) {
		settling.Go(func() {
			if err := s.Settle(ctx, order, 1); err != nil {
				t.Errorf("settle %s: %v", order.ID, err)
			}
		})
	}
	settle(newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000"))
	select {
	case <-relay.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch never relayed")
	}
	// The first batch committed and its relay hangs; the second commits
	// meanwhile, and its relay waits.
	bid := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")
	settle(bid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, found := readOrder(t, m.db, bid.ID); found {
			break
		}
		if time.Now().After(deadline) {
			close(relay.release)
			t.Fatal("the second batch never committed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if started := relay.eventsOf("start"); len(started) != 1 {
		t.Errorf("relays started while the first hangs: %v, want the first alone", started)
	}
	close(relay.release)
	settling.Wait()
	relay.mu.Lock()
	defer relay.mu.Unlock()
	if want := []string{"start 1", "end 1", "start 2", "end 2"}; !slices.Equal(relay.events, want) {
		t.Errorf("relays: %v, want %v", relay.events, want)
	}
}

// turnRelay is a TurnRelayer that holds its first call once it is in
// line, until released, and records when calls start, take their place
// in line and end.
type turnRelay struct {
	heldRelay
	calls int
}

func (r *turnRelay) RelayInTurn(ctx context.Context, entries []orders.OutboxEntry, turn <-chan struct{}, inLine func()) {
	r.mu.Lock()
	r.calls++
	n := r.calls
	r.mu.Unlock()
	r.record(fmt.Sprintf("start %d", n))
	if turn != nil {
		<-turn
	}
	r.record(fmt.Sprintf("in line %d", n))
	inLine()
	if n == 1 {
		close(r.started)
		<-r.release
	}
	r.record(fmt.Sprintf("end %d", n))
}

// TestOwnerLetsTheNextBatchRelayOnceItsEventsAreInLine: with a relay that
// keeps the line itself, an owner's batch takes its turn once the batch
// before is in line, not once that one's relay returned: a relay that
// hangs after taking its place holds no later batch back, and the places
// are still taken in commit order.
func TestOwnerLetsTheNextBatchRelayOnceItsEventsAreInLine(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	relay := &turnRelay{heldRelay: heldRelay{started: make(chan struct{}), release: make(chan struct{})}}
	s := postgres.NewSettler(m.db, relay, slog.New(slog.DiscardHandler))
	if err := s.TakeOver(ctx, "BTC-USD", 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.GiveUp("BTC-USD") })

	var settling sync.WaitGroup
	settle := func(order orders.Order) {
		settling.Go(func() {
			if err := s.Settle(ctx, order, 1); err != nil {
				t.Errorf("settle %s: %v", order.ID, err)
			}
		})
	}
	settle(newOrder(m.alice, "BTC-USD", orders.Sell, "0.1", "50000"))
	select {
	case <-relay.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch never relayed")
	}
	// The first batch is in line and its relay hangs; the second commits
	// meanwhile and relays all the same.
	settle(newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000"))
	deadline := time.Now().Add(10 * time.Second)
	for len(relay.eventsOf("end")) == 0 {
		if time.Now().After(deadline) {
			close(relay.release)
			t.Fatalf("the second batch's relay waited for the first's to return: %v", relay.eventsOf(""))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(relay.release)
	settling.Wait()
	relay.mu.Lock()
	defer relay.mu.Unlock()
	if want := []string{"start 1", "in line 1", "start 2", "in line 2", "end 2", "end 1"}; !slices.Equal(relay.events, want) {
		t.Errorf("relays: %v, want %v", relay.events, want)
	}
}
