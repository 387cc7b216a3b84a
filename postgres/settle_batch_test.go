package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// settleConcurrently hands the claims to eight handlers at once, as one
// worker at its default concurrency runs them, and fails on any error.
func settleConcurrently(t testing.TB, settler *postgres.Settler, claims []emq.Claim) {
	t.Helper()
	work := make(chan emq.Claim)
	var wg sync.WaitGroup
	for range 8 {
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

func waitUntil(t testing.TB, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(8 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// lockWaits counts the backends of the test's database waiting for a lock.
func lockWaits(t testing.TB, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// holdBalances locks an account's balance rows in a transaction of its own
// until the returned release is called (or the test ends).
func holdBalances(t testing.TB, db *pgxpool.Pool, account string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM balances WHERE account_id = $1 ORDER BY asset FOR UPDATE`, account); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := tx.Commit(ctx); err != nil {
				t.Errorf("release the held balances: %v", err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// stallSettler makes the settler busy: it settles an order of a fresh
// account whose balance rows the test holds, so the orders settled next
// wait in the settler's queue until release. It returns the account, release
// and a wait for the stalled order's own Settle.
func stallSettler(t testing.TB, m *market, settler *postgres.Settler) (blocker string, release func(), wait func()) {
	t.Helper()
	blocker = m.newCustomer(t)
	release = holdBalances(t, m.db, blocker)
	var wg sync.WaitGroup
	wg.Go(func() {
		order := newOrder(blocker, "BTC-USD", orders.Buy, "0.01", "50000")
		if err := settlement.Settle(settler)(context.Background(), claimOf(t, order, 1)); err != nil {
			t.Errorf("settle the stalled order: %v", err)
		}
	})
	waitUntil(t, "the stalled order waiting for its locks", func() bool { return lockWaits(t, m.db) > 0 })
	return blocker, release, wg.Wait
}

// queueInOrder starts one Settle per claim, each only once the one before
// it waits in the settler's queue, so the batch takes them in this order.
// It returns a wait for their errors.
func queueInOrder(t testing.TB, settler *postgres.Settler, ctxs []context.Context, claims []emq.Claim) (wait func() []error) {
	t.Helper()
	errs := make([]error, len(claims))
	var wg sync.WaitGroup
	for i, claim := range claims {
		before := postgres.SettleQueueLength(settler)
		wg.Go(func() { errs[i] = settlement.Settle(settler)(ctxs[i], claim) })
		waitUntil(t, fmt.Sprintf("order %d in the queue", i), func() bool { return postgres.SettleQueueLength(settler) > before })
	}
	return func() []error {
		wg.Wait()
		return errs
	}
}

// slotBalances names each balance by the account's slot instead of its id,
// so two databases with their own account ids compare.
func slotBalances(t testing.TB, db *pgxpool.Pool, slots map[string]string) map[string]balance {
	t.Helper()
	named := map[string]balance{}
	for name, b := range balances(t, db) {
		for id, slot := range slots {
			name = strings.ReplaceAll(name, id, slot)
		}
		named[name] = b
	}
	return named
}

// slotEntries is each order's settlement entries, accounts named by slot.
func slotEntries(t testing.TB, db *pgxpool.Pool, ids []string, slots map[string]string) map[string][]entry {
	t.Helper()
	all := map[string][]entry{}
	for _, id := range ids {
		for _, entries := range settlementEntries(t, db, id) {
			for _, e := range entries {
				if slot, found := slots[e.account]; found {
					e.account = slot
				}
				all[id] = append(all[id], e)
			}
		}
	}
	return all
}

// orderOutcome is an orders row without what differs between two runs of
// the same orders (its ledger transaction's id, its timestamps).
type orderOutcome struct {
	found                                   bool
	status, reason, price, quantity, amount any
	token                                   any
}

func outcomeOf(t testing.TB, db *pgxpool.Pool, id string) orderOutcome {
	t.Helper()
	row, found := readOrder(t, db, id)
	return orderOutcome{found, deref(row.status), deref(row.reason), deref(row.fillPrice), deref(row.fillQuantity),
		deref(row.notional), deref(row.token)}
}

// outboxCoversFinalVersions checks what the coherence consumer relies on: the
// version every balance reached has its outbox row.
func outboxCoversFinalVersions(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT b.account_id, b.asset, b.version FROM balances b
		WHERE b.version > 0 AND NOT EXISTS (
			SELECT 1 FROM outbox j WHERE j.name = 'balances:' || b.account_id || ':' || b.asset AND j.version = b.version)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var account, asset string
		var version int64
		if err := rows.Scan(&account, &asset, &version); err != nil {
			t.Fatal(err)
		}
		t.Errorf("balance %s at version %d has no outbox row for it", orders.BalanceName(account, asset), version)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBatchedSettlementMatchesOneByOne settles the same orders twice, on two
// databases funded alike: one by one in a single goroutine, and by eight
// concurrent handlers whose orders the settler takes in batches. The orders
// are chosen so that whether each settles does not depend on the order they
// run in; the two runs must then end alike: the same final rows, the same
// balances and versions, the same ledger entries per order, and a clean audit.
func TestBatchedSettlementMatchesOneByOne(t *testing.T) {
	type spec struct {
		slot            int
		symbol          string
		side            orders.Side
		quantity, price string
	}
	alternating := func(accounts, each int, symbol, quantity, price string) []spec {
		var specs []spec
		for i := range accounts * each {
			side := orders.Buy
			if (i/accounts)%2 == 1 {
				side = orders.Sell
			}
			specs = append(specs, spec{i % accounts, symbol, side, quantity, price})
		}
		return specs
	}
	tests := []struct {
		name     string
		accounts int
		halt     string
		orders   []spec
		// whether some orders are rejected
		rejections bool
	}{
		{name: "buys and sells of many accounts", accounts: 16, orders: alternating(16, 10, "BTC-USD", "0.01", "50000.00")},
		{name: "one account's many orders", accounts: 1, orders: alternating(1, 60, "BTC-USD", "0.01", "")},
		{name: "three instruments, market and limit, one halted", accounts: 6, halt: "ETH-BTC", rejections: true, orders: slices.Concat(
			alternating(6, 4, "ETH-USD", "0.333", "3100.05"),
			alternating(6, 4, "BTC-USD", "0.00123", ""),
			alternating(6, 3, "ETH-BTC", "0.005", "0.06"),
			alternating(6, 3, "ETH-USD", "0.5", ""),
		)},
		{name: "orders no order of settling could fund", accounts: 8, rejections: true, orders: slices.Concat(
			alternating(8, 6, "BTC-USD", "0.01", "50000.00"),
			// 250,000 USD: more than a customer's 100,000 and what its sells bring
			[]spec{{0, "BTC-USD", orders.Buy, "5", "50000.00"}, {3, "BTC-USD", orders.Buy, "5", ""}},
			// more BTC than a customer's 2 and its buys
			[]spec{{1, "BTC-USD", orders.Sell, "3", "50000.00"}, {5, "BTC-USD", orders.Sell, "2.5", ""}},
			// more BTC than the venue's 200 and what the sells bring it
			[]spec{{2, "BTC-USD", orders.Buy, "250", "0.01"}, {4, "ETH-USD", orders.Buy, "3500", "0.05"}},
			alternating(8, 4, "ETH-USD", "0.333", "3100.05"),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			type run struct {
				m     *market
				slots map[string]string
				ids   []string
			}
			setUp := func() run {
				m := newMarket(t)
				if tt.halt != "" {
					if _, err := m.db.Exec(context.Background(), `UPDATE instruments SET status = 'halted' WHERE symbol = $1`, tt.halt); err != nil {
						t.Fatal(err)
					}
				}
				r := run{m: m, slots: map[string]string{m.account: "trader"}}
				for slot := range tt.accounts {
					r.slots[m.newCustomer(t)] = fmt.Sprintf("slot%d", slot)
				}
				return r
			}
			oneByOne, batched := setUp(), setUp()
			accountOf := func(r run, slot int) string {
				for id, name := range r.slots {
					if name == fmt.Sprintf("slot%d", slot) {
						return id
					}
				}
				t.Fatalf("no slot %d", slot)
				return ""
			}
			var sequential, concurrent []emq.Claim
			for _, s := range tt.orders {
				order := newOrder(accountOf(oneByOne, s.slot), s.symbol, s.side, s.quantity, s.price)
				sequential = append(sequential, claimOf(t, order, 1))
				order.Account = accountOf(batched, s.slot)
				concurrent = append(concurrent, claimOf(t, order, 1))
				oneByOne.ids = append(oneByOne.ids, order.ID)
			}

			for _, claim := range sequential {
				if err := settlement.Settle(oneByOne.m.settler)(context.Background(), claim); err != nil {
					t.Fatalf("one by one: settle %s: %v", claim.ID, err)
				}
			}
			settler, registry := meteredSettler(t, batched.m)
			settleConcurrently(t, settler, concurrent)

			stats := readBatchStats(t, registry)
			if stats.batched == 0 || stats.orders != uint64(len(tt.orders)) {
				t.Errorf("batches: %+v; want some of several orders, %d orders in all", stats, len(tt.orders))
			}
			t.Logf("%d orders in %d transactions, %d of them batches", stats.orders, stats.transactions, stats.batched)
			rejected := 0
			for _, id := range oneByOne.ids {
				want, got := outcomeOf(t, oneByOne.m.db, id), outcomeOf(t, batched.m.db, id)
				if got != want {
					t.Errorf("order %s: batched %+v, one by one %+v", id, got, want)
				}
				if want.status == "rejected" {
					rejected++
				}
			}
			if (rejected > 0) != tt.rejections {
				t.Errorf("%d orders rejected; the case means some: %v", rejected, tt.rejections)
			}
			if got, want := slotBalances(t, batched.m.db, batched.slots), slotBalances(t, oneByOne.m.db, oneByOne.slots); !maps.Equal(got, want) {
				t.Errorf("balances\n batched    %v\n one by one %v", got, want)
			}
			gotEntries, wantEntries := slotEntries(t, batched.m.db, oneByOne.ids, batched.slots), slotEntries(t, oneByOne.m.db, oneByOne.ids, oneByOne.slots)
			if !maps.EqualFunc(gotEntries, wantEntries, slices.Equal) {
				t.Errorf("ledger entries differ\n batched    %v\n one by one %v", gotEntries, wantEntries)
			}
			for _, r := range []run{oneByOne, batched} {
				mustAudit(t, r.m.db)
				outboxCoversFinalVersions(t, r.m.db)
			}
			// The batches outbox each balance once per transaction.
			if got, want := len(outboxAfter(t, batched.m.db, 0)), len(outboxAfter(t, oneByOne.m.db, 0)); got >= want {
				t.Errorf("batched settlement wrote %d outbox rows, one by one %d; want fewer", got, want)
			}
		})
	}
}

// TestBatchSettlesEachOrderOnItsOwn builds one batch of orders with every
// kind of trouble: a redelivered order, orders of one account that only some
// of its funds cover, an unknown account and instrument, a payload that is no
// order, an order queued twice by two leases, and (in the second case) an
// order the schema refuses, which makes
// PostgreSQL refuse the batch's writes. Each order must end as it would have
// alone, and one order's trouble must not fail another.
func TestBatchSettlesEachOrderOnItsOwn(t *testing.T) {
	type member struct {
		name  string
		claim func(m *market, p *people) emq.Claim
		// the error's sentinel and whether it is permanent; nil: Settle succeeds
		wantErr error
		// the final row: status and reason; "" means no row
		wantStatus, wantReason string
	}
	ok := func(name string, claim func(*market, *people) emq.Claim, status, reason string) member {
		return member{name: name, claim: claim, wantStatus: status, wantReason: reason}
	}
	refused := func(name string, claim func(*market, *people) emq.Claim, err error) member {
		return member{name: name, claim: claim, wantErr: err}
	}
	buy := func(quantity, price string, account func(*market, *people) string) func(*market, *people) emq.Claim {
		return func(m *market, p *people) emq.Claim {
			return claimOf(t, newOrder(account(m, p), "BTC-USD", orders.Buy, quantity, price), 1)
		}
	}
	sell := func(symbol, quantity string, account func(*market, *people) string) func(*market, *people) emq.Claim {
		return func(m *market, p *people) emq.Claim {
			return claimOf(t, newOrder(account(m, p), symbol, orders.Sell, quantity, ""), 1)
		}
	}
	trader := func(m *market, _ *people) string { return m.account }
	frugal := func(_ *market, p *people) string { return p.frugal }
	redelivered := func(_ *market, p *people) emq.Claim { return claimOf(t, p.settledBefore, 2) }
	changed := func(change func(*orders.Order)) func(*market, *people) emq.Claim {
		return func(m *market, _ *people) emq.Claim {
			order := newOrder(m.account, "ETH-USD", orders.Buy, "0.5", "3000")
			change(&order)
			return claimOf(t, order, 1)
		}
	}
	common := []member{
		ok("an order settled before, delivered again", redelivered, "settled", ""),
		ok("a buy of the trader", func(_ *market, p *people) emq.Claim { return claimOf(t, p.traderBuy, 1) }, "settled", ""),
		refused("an unknown account", changed(func(o *orders.Order) { o.Account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1" }), orders.ErrNoAccount),
		refused("an unknown instrument", changed(func(o *orders.Order) { o.Symbol = "DOGE-USD" }), orders.ErrUnknownInstrument),
		ok("a market sell of ETH", sell("ETH-USD", "1", trader), "settled", ""),
		refused("a payload of another kind", func(m *market, _ *people) emq.Claim {
			claim := claimOf(t, newOrder(m.account, "BTC-USD", orders.Buy, "0.01", ""), 1)
			claim.Kind = "order.cancel"
			return claim
		}, orders.ErrMalformedOrder),
	}
	tests := []struct {
		name    string
		members []member
		// whether the batch commits its orders in one transaction; false:
		// PostgreSQL refuses it and each order is settled alone
		together bool
	}{
		{
			name: "funds checked in the batch's order", together: true,
			members: slices.Concat(common, []member{
				// The frugal account holds 1,000 USD and no BTC.
				ok("a buy for 750 of its 1,000 USD", buy("0.015", "50000", frugal), "settled", ""),
				ok("a buy for 500 of the 250 left", buy("0.01", "50000", frugal), "rejected", orders.ReasonInsufficientFunds),
				ok("a buy for 200 of the 250 left", buy("0.004", "50000", frugal), "settled", ""),
				ok("a sell of BTC only the buys before brought", sell("BTC-USD", "0.019", frugal), "settled", ""),
				ok("a sell of BTC beyond what they brought", sell("BTC-USD", "0.001", frugal), "rejected", orders.ReasonInsufficientFunds),
				// Left for the next batch, which finds it settled under token 1.
				ok("the trader's buy again, from a second lease", func(_ *market, p *people) emq.Claim { return claimOf(t, p.traderBuy, 2) },
					"settled", ""),
			}),
		},
		{
			name: "an order the schema refuses", together: false,
			members: slices.Concat(common, []member{
				refused("a client order id the schema refuses", changed(func(o *orders.Order) { o.ClientOrderID = "no spaces" }), orders.ErrMalformedOrder),
				ok("a buy beyond the frugal account's funds", buy("0.03", "50000", frugal), "rejected", orders.ReasonInsufficientFunds),
				ok("a buy within them", buy("0.001", "", frugal), "settled", ""),
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newMarket(t)
			p := &people{frugal: m.newCustomerWith(t, map[string]string{"USD": "1000.00"})}
			p.settledBefore = newOrder(m.account, "BTC-USD", orders.Sell, "0.02", "50000")
			p.traderBuy = newOrder(m.account, "BTC-USD", orders.Buy, "0.01", "50000")
			m.settle(t, p.settledBefore, 1)
			before, _ := readOrder(t, m.db, p.settledBefore.ID)
			settler, registry := meteredSettler(t, m)
			callsBefore, _ := m.relay.Calls()
			blocker, release, stalled := stallSettler(t, m, settler)
			// The stalled order waits for its locks: nothing is settled yet.
			outboxStart := lastOutboxID(t, m.db)
			claims := make([]emq.Claim, len(tt.members))
			errs := make([]error, len(tt.members))
			var queued []int
			for i, member := range tt.members {
				claims[i] = member.claim(m, p)
				if claims[i].Kind != orders.KindPlace {
					// Refused before it could join a batch.
					errs[i] = settlement.Settle(settler)(context.Background(), claims[i])
					continue
				}
				queued = append(queued, i)
			}
			ctxs := make([]context.Context, len(queued))
			queuedClaims := make([]emq.Claim, len(queued))
			for j, i := range queued {
				ctxs[j], queuedClaims[j] = context.Background(), claims[i]
			}
			wait := queueInOrder(t, settler, ctxs, queuedClaims)
			release()
			stalled()
			for j, err := range wait() {
				errs[queued[j]] = err
			}

			// The stalled order went alone; the rest waited and went as one batch.
			if stats := readBatchStats(t, registry); stats.batched != 1 {
				t.Errorf("batches %+v; want the stalled order alone and one batch of the %d queued", stats, len(queued))
			}
			written := map[uint32]bool{}
			for i, member := range tt.members {
				err := errs[i]
				switch {
				case member.wantErr == nil && err != nil:
					t.Errorf("%s: Settle = %v", member.name, err)
				case member.wantErr != nil && (!errors.Is(err, member.wantErr) || !errors.Is(err, emq.ErrPermanent)):
					t.Errorf("%s: Settle = %v, want a permanent %v", member.name, err, member.wantErr)
				}
				row, found := readOrder(t, m.db, claims[i].ID)
				if found != (member.wantStatus != "") || found && (deref(row.status) != member.wantStatus || deref(row.reason) != nilIfEmpty(member.wantReason)) {
					t.Errorf("%s: row found %v, %v (%v); want %q %q", member.name, found, deref(row.status), deref(row.reason), member.wantStatus, member.wantReason)
				}
				if claims[i].ID == p.settledBefore.ID {
					if deref(row.token) != deref(before.token) || deref(row.transaction) != deref(before.transaction) {
						t.Errorf("%s: its row changed: token %v txn %v, was %v %v", member.name, deref(row.token), deref(row.transaction),
							deref(before.token), deref(before.transaction))
					}
					continue
				}
				if found {
					written[orderXmin(t, m.db, claims[i].ID)] = true
					if deref(row.token) != int64(1) {
						t.Errorf("%s: settled by token %v, want its own, 1", member.name, deref(row.token))
					}
					if txns := settlementEntries(t, m.db, claims[i].ID); len(txns) != map[bool]int{true: 1}[member.wantStatus == "settled"] {
						t.Errorf("%s: %d ledger transactions", member.name, len(txns))
					}
				}
			}
			if tt.together != (len(written) == 1) {
				t.Errorf("the batch's rows were written by %d transactions; want them together: %v", len(written), tt.together)
			}

			// Every outbox row written is relayed after its commit; the
			// batch's are relayed in one call, one row per balance it moved,
			// at the version the balance reached.
			calls, committed := m.relay.Calls()
			calls, committed = calls[len(callsBefore):], committed[len(callsBefore):]
			relayed := 0
			for k, call := range calls {
				relayed += len(call)
				if !committed[k] {
					t.Error("Relay ran before the outbox rows were committed")
				}
			}
			if want := len(outboxAfter(t, m.db, outboxStart)); relayed != want {
				t.Errorf("relayed %d outbox rows, want the %d written", relayed, want)
			}
			if tt.together {
				var batchCalls [][]orders.OutboxEntry
				for _, call := range calls {
					if !slices.ContainsFunc(call, func(e orders.OutboxEntry) bool { return strings.Contains(e.Name, blocker) }) {
						batchCalls = append(batchCalls, call)
					}
				}
				if len(batchCalls) != 1 {
					t.Fatalf("relay called %d times for the batch, want once", len(batchCalls))
				}
				now := balances(t, m.db)
				names := map[string]bool{}
				for _, j := range batchCalls[0] {
					if names[j.Name] || j.Version != now[j.Name].version {
						t.Errorf("batch outbox row %s: a second row of the name %v, balance at version %d", j.Payload, names[j.Name], now[j.Name].version)
					}
					names[j.Name] = true
				}
			}
			mustAudit(t, m.db)
			outboxCoversFinalVersions(t, m.db)
		})
	}
}

// people are the accounts of TestBatchSettlesEachOrderOnItsOwn beside the
// market's trader.
type people struct {
	frugal        string
	settledBefore orders.Order
	traderBuy     orders.Order
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// orderXmin is the transaction that wrote the order's row.
func orderXmin(t testing.TB, db *pgxpool.Pool, id string) uint32 {
	t.Helper()
	var xmin uint32
	if err := db.QueryRow(context.Background(), `SELECT xmin::text::bigint FROM orders WHERE id = $1`, id).Scan(&xmin); err != nil {
		t.Fatal(err)
	}
	return xmin
}

// TestTwoSettlersRaceOnTheSameOrders is two workers that both think they
// hold every order (each lease lost to the other): both settle all of them
// at once, in batches, with their own tokens. Each order must be settled
// exactly once.
func TestTwoSettlersRaceOnTheSameOrders(t *testing.T) {
	m := newMarket(t)
	accounts := make([]string, 12)
	for i := range accounts {
		accounts[i] = m.newCustomer(t)
	}
	const each = 10
	var placed []orders.Order
	for i := range len(accounts) * each {
		side := orders.Buy
		if (i/len(accounts))%2 == 1 {
			side = orders.Sell
		}
		placed = append(placed, newOrder(accounts[i%len(accounts)], "BTC-USD", side, "0.01", "50000.00"))
	}
	type worker struct {
		settler  *postgres.Settler
		registry *prometheus.Registry
		claims   []emq.Claim
	}
	workers := make([]worker, 2)
	for w := range workers {
		workers[w].settler, workers[w].registry = meteredSettler(t, m)
		for _, order := range placed {
			workers[w].claims = append(workers[w].claims, claimOf(t, order, int64(w+1)))
		}
		// The second worker takes the orders from the other end, so the two
		// meet in the middle and race over most of them.
		if w == 1 {
			slices.Reverse(workers[w].claims)
		}
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { settleConcurrently(t, w.settler, w.claims) })
	}
	wg.Wait()

	for _, order := range placed {
		row, found := readOrder(t, m.db, order.ID)
		txns := settlementEntries(t, m.db, order.ID)
		if !found || deref(row.status) != "settled" || len(txns) != 1 || txns[deref(row.transaction).(int64)] == nil {
			t.Errorf("order %s: row found %v status %v, %d ledger transactions", order.ID, found, deref(row.status), len(txns))
		}
	}
	// Per account five buys and five sells of 0.01 BTC at 50,000, each once.
	now := balances(t, m.db)
	for _, account := range accounts {
		for asset, want := range map[string]string{"BTC": "2", "USD": "100000"} {
			if got := now[orders.BalanceName(account, asset)]; got.available != want || got.version != 1+each {
				t.Errorf("%s %s = %+v, want %s at version %d", account, asset, got, want, 1+each)
			}
		}
	}
	var byToken [2]int
	if err := m.db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE settled_by_token = 1),
		count(*) FILTER (WHERE settled_by_token = 2) FROM orders`).Scan(&byToken[0], &byToken[1]); err != nil {
		t.Fatal(err)
	}
	if byToken[0] == 0 || byToken[1] == 0 || byToken[0]+byToken[1] != len(placed) {
		t.Errorf("token 1 settled %d orders, token 2 %d; want both some, %d in all", byToken[0], byToken[1], len(placed))
	}
	for w, worker := range workers {
		stats := readBatchStats(t, worker.registry)
		if stats.batched == 0 {
			t.Errorf("worker %d settled in no batch: %+v", w+1, stats)
		}
		t.Logf("worker %d: %+v", w+1, stats)
	}
	mustAudit(t, m.db)
	outboxCoversFinalVersions(t, m.db)
}

// TestBatchLeavesOutAnOrderWhoseLeaseEnded ends a queued order's handler
// context, as a lost lease does, either while the order waits for a batch or
// while its batch waits for locks: the order must not be settled under the
// token its worker no longer holds, and the order beside it must.
func TestBatchLeavesOutAnOrderWhoseLeaseEnded(t *testing.T) {
	tests := []struct {
		name string
		// inFlight: the lease ends once the batch has taken the order
		inFlight bool
	}{
		{name: "while it waits for a batch"},
		{name: "while its batch waits for locks", inFlight: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newMarket(t)
			settler, _ := meteredSettler(t, m)
			lost, kept := m.newCustomer(t), m.newCustomer(t)
			lostOrder := newOrder(lost, "BTC-USD", orders.Buy, "0.01", "50000")
			keptOrder := newOrder(kept, "BTC-USD", orders.Sell, "0.01", "50000")
			lease, endLease := context.WithCancelCause(context.Background())
			defer endLease(nil)

			_, release, stalled := stallSettler(t, m, settler)
			wait := queueInOrder(t, settler, []context.Context{lease, context.Background()},
				[]emq.Claim{claimOf(t, lostOrder, 1), claimOf(t, keptOrder, 1)})
			if tt.inFlight {
				releaseLost := holdBalances(t, m.db, lost)
				release()
				waitUntil(t, "the batch waiting for the lost order's balances", func() bool {
					return postgres.SettleQueueLength(settler) == 0 && lockWaits(t, m.db) > 0
				})
				endLease(emq.ErrLeaseLost)
				releaseLost()
			} else {
				endLease(emq.ErrLeaseLost)
				waitUntil(t, "the order leaving the queue", func() bool { return postgres.SettleQueueLength(settler) == 1 })
				release()
			}
			stalled()
			errs := wait()

			if !errors.Is(errs[0], emq.ErrLeaseLost) || errors.Is(errs[0], emq.ErrPermanent) {
				t.Errorf("the order whose lease ended: Settle = %v, want the lost lease, for no retry of this worker's", errs[0])
			}
			if _, found := readOrder(t, m.db, lostOrder.ID); found {
				t.Error("the order whose lease ended was written")
			}
			if errs[1] != nil {
				t.Errorf("the order beside it: Settle = %v", errs[1])
			}
			if row, _ := readOrder(t, m.db, keptOrder.ID); deref(row.status) != "settled" {
				t.Errorf("the order beside it is %v, want settled", deref(row.status))
			}
			// The worker that holds the order now settles it.
			m.settle(t, lostOrder, 2)
			if row, _ := readOrder(t, m.db, lostOrder.ID); deref(row.status) != "settled" || deref(row.token) != int64(2) {
				t.Errorf("redelivered: %v by token %v, want settled by 2", deref(row.status), deref(row.token))
			}
			mustAudit(t, m.db)
		})
	}
}
