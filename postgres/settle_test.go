package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// recordingRelay keeps what the settler relays, and whether each relayed
// outbox row was committed when Relay ran: Relay must come after the commit.
type recordingRelay struct {
	db *pgxpool.Pool

	mu        sync.Mutex
	calls     [][]orders.OutboxEntry
	committed []bool
}

func (r *recordingRelay) Relay(ctx context.Context, entries []orders.OutboxEntry) {
	ids := make([]int64, len(entries))
	for i, entry := range entries {
		ids[i] = entry.ID
	}
	var visible int
	// Another connection sees the rows only once the settlement committed.
	err := r.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = ANY($1)`, ids).Scan(&visible)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, slices.Clone(entries))
	r.committed = append(r.committed, err == nil && visible == len(entries))
}

func (r *recordingRelay) Calls() ([][]orders.OutboxEntry, []bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), slices.Clone(r.committed)
}

// market is a database with two funded customers, alice and bob, and a
// settler on it. BTC-USD's fees are the schema's defaults: maker 10 bps,
// taker 20 bps; its band 10% around 50000.
type market struct {
	db         *pgxpool.Pool
	settler    *postgres.Settler
	relay      *recordingRelay
	alice, bob string
}

var customerFunds = map[string]string{"USD": "100000.00", "BTC": "2", "ETH": "20"}

func newMarket(t testing.TB) *market {
	t.Helper()
	db := migratedPool(t)
	relay := &recordingRelay{db: db}
	m := &market{db: db, relay: relay, settler: postgres.NewSettler(db, relay, slog.New(slog.DiscardHandler))}
	m.alice, m.bob = m.newCustomer(t), m.newCustomer(t)
	return m
}

func (m *market) newCustomer(t testing.TB) string {
	t.Helper()
	return m.newCustomerWith(t, customerFunds)
}

// newCustomerWith opens balances only for the assets funds names.
func (m *market) newCustomerWith(t testing.TB, funds map[string]string) string {
	t.Helper()
	account, err := postgres.NewAccounts(m.db).Create(context.Background(), "trader")
	if err != nil {
		t.Fatal(err)
	}
	for asset, amount := range funds {
		deposit(t, m.db, account, asset, amount)
	}
	return account
}

func deposit(t testing.TB, db *pgxpool.Pool, account, asset, amount string) {
	t.Helper()
	if err := postgres.NewLedger(db).Deposit(context.Background(), account, asset, amount); err != nil {
		t.Fatalf("deposit %s %s to %s: %v", amount, asset, account, err)
	}
}

// newOrder is an admitted GTC order as the gateway writes it into the job;
// an empty price makes a market order (IOC).
func newOrder(account, symbol string, side orders.Side, quantity, price string) orders.Order {
	id := orders.NewOrderID()
	created, _ := orders.ParseOrderID(id)
	order := orders.Order{
		ID: id, ClientOrderID: "c-" + id[len(id)-8:], Account: account, Symbol: symbol, Side: side,
		Type: orders.Market, TimeInForce: orders.IOC, Quantity: decimal.MustParse(quantity),
		Status: orders.StatusPending, CreatedAt: created,
	}
	if price != "" {
		limit := decimal.MustParse(price)
		order.Type, order.Price, order.TimeInForce = orders.Limit, &limit, orders.GTC
	}
	return order
}

func withTIF(order orders.Order, tif orders.TimeInForce) orders.Order {
	order.TimeInForce = tif
	return order
}

func claimOf(t testing.TB, order orders.Order, token int64) emq.Claim {
	t.Helper()
	payload, err := json.Marshal(order)
	if err != nil {
		t.Fatal(err)
	}
	return emq.Claim{ID: order.ID, Kind: orders.KindPlace, Group: order.Account, Payload: payload, Token: token,
		Deadline: time.Now().Add(time.Minute)}
}

func (m *market) settle(t testing.TB, order orders.Order, token int64) {
	t.Helper()
	if err := settlement.Settle(m.settler)(context.Background(), claimOf(t, order, token)); err != nil {
		t.Fatalf("settle %s: %v", order.ID, err)
	}
}

// place settles a new GTC limit order (or a market one, price "") with
// token 1 and returns it.
func (m *market) place(t testing.TB, account string, side orders.Side, quantity, price string) orders.Order {
	t.Helper()
	order := newOrder(account, "BTC-USD", side, quantity, price)
	m.settle(t, order, 1)
	return order
}

type balance struct {
	available, held string // trimmed: "99500", not "99500.000000000000000000"
	version         int64
}

// balances reads every balance that ever moved by its outbox name.
func balances(t testing.TB, db *pgxpool.Pool) map[string]balance {
	t.Helper()
	rows, err := db.Query(context.Background(),
		`SELECT account_id, asset, trim_scale(available)::text, trim_scale(held)::text, version FROM balances`)
	if err != nil {
		t.Fatal(err)
	}
	all := make(map[string]balance)
	for rows.Next() {
		var account, asset string
		var b balance
		if err := rows.Scan(&account, &asset, &b.available, &b.held, &b.version); err != nil {
			t.Fatal(err)
		}
		if b.version > 0 { // a row at version 0 never moved: no balance
			all[orders.BalanceName(account, asset)] = b
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

func balanceOf(t testing.TB, db *pgxpool.Pool, account, asset string) balance {
	t.Helper()
	return balances(t, db)[orders.BalanceName(account, asset)]
}

type orderRow struct {
	status                            string
	reason, cancelReason              *string
	filled, notional, fees, hold      string
	sequence, token                   *int64
	createdAt                         time.Time
	clientOrderID, symbol, side, kind string
	quantity, timeInForce             string
	price                             *string
}

func readOrder(t testing.TB, db *pgxpool.Pool, id string) (orderRow, bool) {
	t.Helper()
	var o orderRow
	err := db.QueryRow(context.Background(), `SELECT status, reject_reason, cancel_reason,
			trim_scale(filled_quantity)::text, trim_scale(filled_notional)::text, trim_scale(fees)::text,
			trim_scale(hold)::text, sequence, settled_by_token, created_at, client_order_id, symbol, side, type,
			trim_scale(quantity)::text, time_in_force, trim_scale(price)::text
		FROM orders WHERE id = $1`, id).Scan(&o.status, &o.reason, &o.cancelReason, &o.filled, &o.notional, &o.fees,
		&o.hold, &o.sequence, &o.token, &o.createdAt, &o.clientOrderID, &o.symbol, &o.side, &o.kind, &o.quantity,
		&o.timeInForce, &o.price)
	if errors.Is(err, pgx.ErrNoRows) {
		return orderRow{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return o, true
}

func mustOrder(t testing.TB, db *pgxpool.Pool, id string) orderRow {
	t.Helper()
	row, found := readOrder(t, db, id)
	if !found {
		t.Fatalf("order %s has no row", id)
	}
	return row
}

// same reports whether two reads of an order row are the same.
func (o orderRow) same(other orderRow) bool {
	return fmt.Sprint(o.state(), deref(o.sequence), deref(o.token), deref(o.price), o.createdAt) ==
		fmt.Sprint(other.state(), deref(other.sequence), deref(other.token), deref(other.price), other.createdAt)
}

// state is an order row's status, reasons and amounts in one string, for
// comparing against what a test expects.
func (o orderRow) state() string {
	reason := deref(o.reason)
	if o.cancelReason != nil {
		reason = *o.cancelReason
	}
	return fmt.Sprintf("%s(%v) filled %s notional %s fees %s hold %s", o.status, reason, o.filled, o.notional, o.fees, o.hold)
}

type entry struct{ kind, account, asset, part, amount string }

// entriesOf returns the entries of every ledger transaction of the order
// (its holds, releases and the trades it took), in transaction order.
func entriesOf(t testing.TB, db *pgxpool.Pool, orderID string) []entry {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT t.kind, e.account_id, e.asset, e.part, trim_scale(e.amount)::text
		FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
		WHERE t.order_id = $1 ORDER BY t.id, e.id`, orderID)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (entry, error) {
		var e entry
		return e, row.Scan(&e.kind, &e.account, &e.asset, &e.part, &e.amount)
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func outboxAfter(t testing.TB, db *pgxpool.Pool, after int64) []orders.OutboxEntry {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT id, name, version, payload FROM outbox WHERE id > $1 ORDER BY id`, after)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func lastOutboxID(t testing.TB, db *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	if err := db.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

func mustAudit(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	violations, err := postgres.Audit(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("audit: %s", v)
	}
	checkMarket(t, db)
}

// checkMarket checks what the market keeps beyond the ledger audit: each
// account's held is the sum of its resting orders' holds, no book is
// crossed at rest, and every order's filled quantity is the sum of its
// trades, within its quantity.
func checkMarket(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	for name, query := range map[string]string{
		"held is the resting holds": `SELECT b.account_id || ' ' || b.asset || ': held ' || trim_scale(b.held) || ', holds ' || coalesce(trim_scale(h.total), 0)
			FROM balances b LEFT JOIN (
				SELECT o.account_id, CASE o.side WHEN 'buy' THEN i.quote ELSE i.base END AS asset, sum(o.hold) AS total
				FROM orders o JOIN instruments i ON i.symbol = o.symbol
				WHERE o.status IN ('open', 'partially_filled') GROUP BY 1, 2
			) h ON h.account_id = b.account_id AND h.asset = b.asset
			WHERE b.held <> coalesce(h.total, 0)`,
		"book not crossed": `SELECT symbol || ': best bid ' || max(price) FILTER (WHERE side = 'buy') || ' >= best ask ' || min(price) FILTER (WHERE side = 'sell')
			FROM orders WHERE status IN ('open', 'partially_filled') GROUP BY symbol
			HAVING max(price) FILTER (WHERE side = 'buy') >= min(price) FILTER (WHERE side = 'sell')`,
		"filled is the trades": `SELECT o.id || ': filled ' || trim_scale(o.filled_quantity) || ' of ' || trim_scale(o.quantity) || ', trades ' || coalesce(trim_scale(t.total), 0)
			FROM orders o LEFT JOIN (
				SELECT id, sum(quantity) AS total, sum(notional) AS notional FROM (
					SELECT maker_order_id AS id, quantity, quantity * price AS notional FROM trades
					UNION ALL SELECT taker_order_id, quantity, quantity * price FROM trades) x GROUP BY id
			) t ON t.id = o.id
			WHERE o.ledger_transaction_id IS NULL AND (o.filled_quantity <> coalesce(t.total, 0)
				OR o.filled_notional <> coalesce(t.notional, 0) OR o.filled_quantity > o.quantity)`,
		"resting orders rest": `SELECT id || ' is ' || status || ' with remaining ' || trim_scale(quantity - filled_quantity)
			FROM orders WHERE status IN ('open', 'partially_filled') AND filled_quantity >= quantity
			   OR status = 'open' AND filled_quantity > 0 OR status = 'partially_filled' AND filled_quantity = 0`,
	} {
		rows, err := db.Query(ctx, query)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		problems, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, problem := range problems {
			t.Errorf("%s: %s", name, problem)
		}
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestCrossingOrdersTradeAtTheMakersPrice: alice's ask rests, bob's higher
// bid takes part of it at alice's price, fees exact, each balance's parts as
// docs/market.md step 6 says.
func TestCrossingOrdersTradeAtTheMakersPrice(t *testing.T) {
	m := newMarket(t)
	ask := m.place(t, m.alice, orders.Sell, "0.5", "50000")
	if got := mustOrder(t, m.db, ask.ID); got.state() != "open(<nil>) filled 0 notional 0 fees 0 hold 0.5" || got.sequence == nil {
		t.Fatalf("the ask is %s, sequence %v; want open holding 0.5", got.state(), deref(got.sequence))
	}
	if got := balanceOf(t, m.db, m.alice, "BTC"); got.available != "1.5" || got.held != "0.5" {
		t.Fatalf("alice's BTC after the ask: %+v", got)
	}
	outboxBefore := lastOutboxID(t, m.db)
	before := balances(t, m.db)

	bid := m.place(t, m.bob, orders.Buy, "0.3", "50100")

	// 0.3 at 50000 = 15000; taker fee 20 bps = 30, maker fee 10 bps = 15.
	// bob held 0.3 × 50100 × 1.002 = 15060.06 and released the 30.06 unused.
	if got := mustOrder(t, m.db, bid.ID); got.state() != "filled(<nil>) filled 0.3 notional 15000 fees 30 hold 0" || got.sequence != nil {
		t.Errorf("bob's bid is %s", got.state())
	}
	if got := mustOrder(t, m.db, ask.ID); got.state() != "partially_filled(<nil>) filled 0.3 notional 15000 fees 15 hold 0.2" {
		t.Errorf("alice's ask is %s", got.state())
	}
	after := balances(t, m.db)
	name := orders.BalanceName
	want := map[string]balance{
		name(m.bob, "USD"):               {"84970", "0", before[name(m.bob, "USD")].version + 3}, // hold, trade entry, release
		name(m.bob, "BTC"):               {"2.3", "0", before[name(m.bob, "BTC")].version + 1},
		name(m.alice, "BTC"):             {"1.5", "0.2", before[name(m.alice, "BTC")].version + 1},
		name(m.alice, "USD"):             {"114985", "0", before[name(m.alice, "USD")].version + 1},
		name(orders.VenueAccount, "USD"): {"45", "0", 1},
	}
	for key, w := range want {
		if after[key] != w {
			t.Errorf("%s = %+v, want %+v", key, after[key], w)
		}
	}
	// The hold (15060.06) and the release (30.06) move between bob's
	// parts of USD on the balance row: only the trade changes totals.
	wantEntries := []entry{
		{"trade", m.bob, "USD", "held", "-15030"}, {"trade", m.bob, "BTC", "available", "0.3"},
		{"trade", m.alice, "BTC", "held", "-0.3"}, {"trade", m.alice, "USD", "available", "14985"},
		{"trade", orders.VenueAccount, "USD", "available", "45"},
	}
	if got := entriesOf(t, m.db, bid.ID); !slices.Equal(got, wantEntries) {
		t.Errorf("bob's ledger entries\n %v\nwant\n %v", got, wantEntries)
	}
	var trade string
	if err := m.db.QueryRow(context.Background(), `SELECT format('%s %s %s %s %s %s %s', maker_order_id = $1, taker_order_id = $2,
			taker_side, trim_scale(price), trim_scale(quantity), trim_scale(maker_fee), trim_scale(taker_fee)) FROM trades`,
		ask.ID, bid.ID).Scan(&trade); err != nil {
		t.Fatal(err)
	}
	if trade != "t t buy 50000 0.3 15 30" {
		t.Errorf("trade row %q", trade)
	}
	var last string
	if err := m.db.QueryRow(context.Background(), `SELECT trim_scale(last_price)::text FROM instruments WHERE symbol = 'BTC-USD'`).Scan(&last); err != nil || last != "50000" {
		t.Errorf("last price %q, %v", last, err)
	}
	// One outbox row for the write, listing every moved balance at its
	// final version, relayed after the commit, and one of events per
	// account: the taker's order.accepted (its row is new), its fill,
	// then its order's new state.
	all := outboxAfter(t, m.db, outboxBefore)
	outbox, events := splitEvents(t, all)
	if len(outbox) != 1 || outbox[0].Name != orders.BalancesWriteName || outbox[0].Version != outbox[0].ID {
		t.Errorf("balances' outbox rows %v, want one %s at its id", outbox, orders.BalancesWriteName)
	}
	versions := announced(t, outbox)
	if want := map[string][]string{
		orders.EventsName(m.alice, "BTC-USD"): {"fill " + ask.ID, "order.partially_filled " + ask.ID},
		orders.EventsName(m.bob, "BTC-USD"):   {"order.accepted " + bid.ID, "fill " + bid.ID, "order.filled " + bid.ID},
	}; !maps.EqualFunc(events, want, slices.Equal) {
		t.Errorf("events %v, want %v", events, want)
	}
	if len(versions) != len(want) {
		t.Errorf("%d balances announced, want %d: %v", len(versions), len(want), versions)
	}
	for key, w := range want {
		if versions[key] != w.version {
			t.Errorf("outbox %s at %d, want %d", key, versions[key], w.version)
		}
	}
	calls, committed := m.relay.Calls()
	if len(calls) != 2 || !slices.Equal(calls[1], all) || !committed[1] {
		t.Errorf("relayed %v (committed %v), want the last call to be %v after its commit", calls, committed, all)
	}
	// The history reads the resting order with its fill.
	shown, err := postgres.NewHistory(m.db).Order(context.Background(), m.alice, ask.ID)
	if err != nil {
		t.Fatal(err)
	}
	if shown.Status != orders.StatusPartiallyFilled || shown.FilledQuantity.String() != "0.30000" ||
		shown.RemainingQuantity.String() != "0.20000" || shown.AverageFillPrice.String() != "50000.00" ||
		shown.Fees.String() != "15.00" || shown.FinishedAt != nil {
		t.Errorf("history shows %+v", shown)
	}
	mustAudit(t, m.db)
}

// TestSellTakerTradesWithRestingBids: the mirror, a sell taker across two
// bids, best price first, with the maker buy's fee difference released when
// it fills.
func TestSellTakerTradesWithRestingBids(t *testing.T) {
	m := newMarket(t)
	low := m.place(t, m.alice, orders.Buy, "0.1", "49000")
	high := m.place(t, m.alice, orders.Buy, "0.1", "50000")
	sell := m.place(t, m.bob, orders.Sell, "0.15", "48000")
	// 0.1 at 50000 (5000) then 0.05 at 49000 (2450): notional 7450, taker fee 14.9.
	if got := mustOrder(t, m.db, sell.ID); got.state() != "filled(<nil>) filled 0.15 notional 7450 fees 14.9 hold 0" {
		t.Errorf("bob's sell is %s", got.state())
	}
	// high held 5010 (5000 + 20 bps), paid 5000 + 5: 5 released as it filled.
	if got := mustOrder(t, m.db, high.ID); got.state() != "filled(<nil>) filled 0.1 notional 5000 fees 5 hold 0" {
		t.Errorf("the high bid is %s", got.state())
	}
	// low held 4909.8, gave up 2450 + 2.45.
	if got := mustOrder(t, m.db, low.ID); got.state() != "partially_filled(<nil>) filled 0.05 notional 2450 fees 2.45 hold 2457.35" {
		t.Errorf("the low bid is %s", got.state())
	}
	if got := balanceOf(t, m.db, m.alice, "USD"); got.available != "90085.2" || got.held != "2457.35" {
		// 100000 − 5010 − 4909.8 + 5 released
		t.Errorf("alice's USD %+v", got)
	}
	if got := balanceOf(t, m.db, m.bob, "USD"); got.available != "107435.1" || got.held != "0" {
		t.Errorf("bob's USD %+v", got)
	}
	mustAudit(t, m.db)
}

// TestPartialFillThenCancelReleasesTheRemainder: a bid partly filled, then
// canceled by its client: exactly what it still holds goes back.
func TestPartialFillThenCancelReleasesTheRemainder(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	bid := m.place(t, m.alice, orders.Buy, "1", "50000") // holds 50100
	m.place(t, m.bob, orders.Sell, "0.4", "49000")       // fills 0.4 at 50000
	row := mustOrder(t, m.db, bid.ID)
	if row.state() != "partially_filled(<nil>) filled 0.4 notional 20000 fees 20 hold 30080" {
		t.Fatalf("the bid is %s", row.state())
	}
	before := balanceOf(t, m.db, m.alice, "USD")
	if before.available != "49900" || before.held != "30080" {
		t.Fatalf("alice's USD before the cancel %+v", before)
	}

	if _, err := m.settler.CancelResting(ctx, m.bob, bid.ID); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("bob cancels alice's order: %v, want ErrNotFound", err)
	}
	canceled, err := m.settler.CancelResting(ctx, m.alice, bid.ID)
	if err != nil {
		t.Fatal(err)
	}
	if canceled.Status != orders.StatusCanceled || canceled.CancelReason != "" || canceled.CanceledAt == nil ||
		canceled.FilledQuantity.String() != "0.40000" || canceled.RemainingQuantity.String() != "0.60000" {
		t.Errorf("CancelResting returned %+v", canceled)
	}
	if got := mustOrder(t, m.db, bid.ID); got.state() != "canceled(<nil>) filled 0.4 notional 20000 fees 20 hold 0" || got.sequence != nil {
		t.Errorf("the bid is %s", got.state())
	}
	after := balanceOf(t, m.db, m.alice, "USD")
	if after.available != "79980" || after.held != "0" || after.version != before.version+1 {
		t.Errorf("alice's USD after the cancel %+v (before %+v)", after, before)
	}
	// The release is no ledger transaction: the bid's are its trades'.
	for _, e := range entriesOf(t, m.db, bid.ID) {
		if e.kind != "trade" {
			t.Errorf("the bid has a %s entry %+v", e.kind, e)
		}
	}
	calls, _ := m.relay.Calls()
	last, events := splitEvents(t, calls[len(calls)-1])
	if got, want := announced(t, last), map[string]int64{orders.BalanceName(m.alice, "USD"): after.version}; len(last) != 1 || !maps.Equal(got, want) {
		t.Errorf("the cancel relayed %v, want one row announcing %v", last, want)
	}
	if want := map[string][]string{orders.EventsName(m.alice, "BTC-USD"): {"order.canceled " + bid.ID}}; !maps.EqualFunc(events, want, slices.Equal) {
		t.Errorf("the cancel's events %v, want %v", events, want)
	}
	var notCancelable *orders.NotCancelableError
	if _, err := m.settler.CancelResting(ctx, m.alice, bid.ID); !errors.As(err, &notCancelable) ||
		notCancelable.Status != orders.StatusCanceled || !errors.Is(err, orders.ErrNotCancelable) {
		t.Errorf("a second cancel: %v, want not cancelable (canceled)", err)
	}
	mustAudit(t, m.db)
}

func TestCancelAllResting(t *testing.T) {
	ctx := context.Background()
	m := newMarket(t)
	a := m.place(t, m.alice, orders.Buy, "0.1", "49000")
	b := m.place(t, m.alice, orders.Sell, "0.1", "51000")
	eth := newOrder(m.alice, "ETH-USD", orders.Buy, "1", "2900")
	m.settle(t, eth, 1)
	m.place(t, m.bob, orders.Sell, "0.1", "52000")
	canceled, err := m.settler.CancelAllResting(ctx, m.alice, "BTC-USD")
	if err != nil {
		t.Fatal(err)
	}
	if ids := []string{canceled[0].ID, canceled[1].ID}; len(canceled) != 2 || !slices.Contains(ids, a.ID) || !slices.Contains(ids, b.ID) {
		t.Errorf("canceled %v", canceled)
	}
	if got := mustOrder(t, m.db, eth.ID); got.status != "open" {
		t.Errorf("the ETH order is %s", got.status)
	}
	if canceled, err = m.settler.CancelAllResting(ctx, m.alice, ""); err != nil || len(canceled) != 1 || canceled[0].ID != eth.ID {
		t.Errorf("cancel all: %v, %v", canceled, err)
	}
	if got := balanceOf(t, m.db, m.alice, "USD"); got.available != "100000" || got.held != "0" {
		t.Errorf("alice's USD %+v", got)
	}
	mustAudit(t, m.db)
}

// TestTimeInForceAndPostOnly: what each rule makes of a taker, and what it
// leaves of the balances.
func TestTimeInForceAndPostOnly(t *testing.T) {
	tests := []struct {
		name  string
		taker func(m *market) orders.Order
		want  string
		// unchanged: the taker's balances must not move at all
		unchanged bool
		bobUSD    string // bob's USD available after, when it moves
	}{
		{"FOK that cannot fill", func(m *market) orders.Order {
			return withTIF(newOrder(m.bob, "BTC-USD", orders.Buy, "0.5", "50000"), orders.FOK)
		}, "canceled(fok_unfillable) filled 0 notional 0 fees 0 hold 0", true, ""},
		{"FOK that fills", func(m *market) orders.Order {
			return withTIF(newOrder(m.bob, "BTC-USD", orders.Buy, "0.2", "50000"), orders.FOK)
		}, "filled(<nil>) filled 0.2 notional 10000 fees 20 hold 0", false, "89980"},
		{"IOC remainder", func(m *market) orders.Order {
			return withTIF(newOrder(m.bob, "BTC-USD", orders.Buy, "0.5", "50500"), orders.IOC)
		}, "canceled(unfilled_ioc) filled 0.2 notional 10000 fees 20 hold 0", false, "89980"},
		{"market remainder", func(m *market) orders.Order {
			return newOrder(m.bob, "BTC-USD", orders.Buy, "0.5", "")
		}, "canceled(unfilled_market) filled 0.2 notional 10000 fees 20 hold 0", false, "89980"},
		{"post-only that would take", func(m *market) orders.Order {
			o := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "50000")
			o.PostOnly = true
			return o
		}, "rejected(post_only_would_take) filled 0 notional 0 fees 0 hold 0", true, ""},
		{"post-only that rests", func(m *market) orders.Order {
			o := newOrder(m.bob, "BTC-USD", orders.Buy, "0.1", "49990")
			o.PostOnly = true
			return o
		}, "open(<nil>) filled 0 notional 0 fees 0 hold 5008.998", false, "94991.002"},
		{"self-trade prevented", func(m *market) orders.Order {
			return newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "50000")
		}, "canceled(self_trade_prevented) filled 0 notional 0 fees 0 hold 0", true, ""},
		{"insufficient funds", func(m *market) orders.Order {
			poor := m.newCustomerWith(t, map[string]string{"USD": "100"})
			return newOrder(poor, "BTC-USD", orders.Buy, "0.01", "50000") // needs 501
		}, "rejected(insufficient_funds) filled 0 notional 0 fees 0 hold 0", true, ""},
		{"price out of band", func(m *market) orders.Order {
			return newOrder(m.bob, "BTC-USD", orders.Buy, "0.01", "55000.01")
		}, "rejected(price_out_of_band) filled 0 notional 0 fees 0 hold 0", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMarket(t)
			ask := m.place(t, m.alice, orders.Sell, "0.2", "50000")
			askBefore := mustOrder(t, m.db, ask.ID)
			taker := tt.taker(m)
			before := balances(t, m.db)
			m.settle(t, taker, 1)
			if got := mustOrder(t, m.db, taker.ID); got.state() != tt.want {
				t.Errorf("the taker is %s, want %s", got.state(), tt.want)
			}
			after := balances(t, m.db)
			if tt.unchanged {
				if !maps.Equal(before, after) {
					t.Errorf("balances moved:\n %v\n %v", before, after)
				}
				if got := mustOrder(t, m.db, ask.ID); !got.same(askBefore) {
					t.Errorf("the resting ask changed: %s", got.state())
				}
				if entries := entriesOf(t, m.db, taker.ID); len(entries) != 0 {
					t.Errorf("the taker has ledger entries %v", entries)
				}
			}
			if tt.bobUSD != "" {
				if got := after[orders.BalanceName(m.bob, "USD")]; got.available != tt.bobUSD {
					t.Errorf("bob's USD %+v, want available %s", got, tt.bobUSD)
				}
			}
			mustAudit(t, m.db)
		})
	}
}

func TestHaltedInstrumentRejects(t *testing.T) {
	m := newMarket(t)
	if err := postgres.NewInstruments(m.db).SetHalted(context.Background(), "BTC-USD", true); err != nil {
		t.Fatal(err)
	}
	before := balances(t, m.db)
	order := m.place(t, m.bob, orders.Buy, "0.01", "50000")
	if got := mustOrder(t, m.db, order.ID); got.state() != "rejected(instrument_halted) filled 0 notional 0 fees 0 hold 0" {
		t.Errorf("the order is %s", got.state())
	}
	if after := balances(t, m.db); !maps.Equal(before, after) {
		t.Error("balances moved")
	}
}

// TestSettleTwiceChangesNothing is a redelivery: the worker crashed after
// the commit and before completing the job, so the order runs again.
func TestSettleTwiceChangesNothing(t *testing.T) {
	for _, tt := range []struct {
		name            string
		quantity, price string
	}{{"trades", "0.1", "50000"}, {"rests", "0.1", "49000"}, {"rejected", "1000", "50000"}} {
		t.Run(tt.name, func(t *testing.T) {
			m := newMarket(t)
			m.place(t, m.alice, orders.Sell, "0.5", "50000")
			placed := newOrder(m.bob, "BTC-USD", orders.Buy, tt.quantity, tt.price)
			m.settle(t, placed, 1)
			first := mustOrder(t, m.db, placed.ID)
			balancesAfterFirst, outboxAfterFirst := balances(t, m.db), outboxAfter(t, m.db, 0)

			m.settle(t, placed, 2)
			if second := mustOrder(t, m.db, placed.ID); !second.same(first) || deref(second.token) != int64(1) {
				t.Errorf("the row changed: %+v, then %+v", first, second)
			}
			if !maps.Equal(balancesAfterFirst, balances(t, m.db)) {
				t.Error("balances changed")
			}
			if got := outboxAfter(t, m.db, 0); !slices.Equal(got, outboxAfterFirst) {
				t.Error("the outbox changed")
			}
			mustAudit(t, m.db)
		})
	}
}

func TestSettlementMetricsCountOutcomes(t *testing.T) {
	m := newMarket(t)
	registry := prometheus.NewRegistry()
	m.settler.WithMetrics(postgres.NewSettlementMetrics(registry))
	ask := newOrder(m.alice, "BTC-USD", orders.Sell, "0.01000", "50000.00")
	m.settle(t, ask, 1)
	m.settle(t, ask, 2) // a redelivery
	m.settle(t, newOrder(m.bob, "BTC-USD", orders.Buy, "0.01000", "50000.00"), 1)
	m.settle(t, newOrder(m.bob, "BTC-USD", orders.Buy, "100.00000", ""), 1)
	m.settle(t, newOrder(m.bob, "BTC-USD", orders.Buy, "0.5", ""), 1)

	counts := map[string]float64{}
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		for _, metric := range family.GetMetric() {
			switch family.GetName() {
			case "orders_settlement_total":
				labels := ""
				for _, label := range metric.GetLabel() {
					labels += label.GetName() + "=" + label.GetValue() + " "
				}
				counts[labels] = metric.GetCounter().GetValue()
			case "orders_settlement_seconds":
				counts["observations"] = float64(metric.GetHistogram().GetSampleCount())
			}
		}
	}
	want := map[string]float64{
		"outcome=open reason= ":                       1,
		"outcome=duplicate reason= ":                  1,
		"outcome=filled reason= ":                     1,
		"outcome=rejected reason=insufficient_funds ": 1,
		"outcome=canceled reason=unfilled_market ":    1,
		"observations":                                5,
	}
	if !maps.Equal(counts, want) {
		t.Errorf("settlement metrics %v, want %v", counts, want)
	}
}

func TestSettleRefusesPayloadsThatCanNeverSettle(t *testing.T) {
	m := newMarket(t)
	valid := func() orders.Order { return newOrder(m.alice, "BTC-USD", orders.Buy, "0.01", "50000") }
	claimWith := func(change func(*orders.Order)) func(t *testing.T) emq.Claim {
		return func(t *testing.T) emq.Claim {
			order := valid()
			change(&order)
			return claimOf(t, order, 1)
		}
	}
	tests := []struct {
		name    string
		claim   func(t *testing.T) emq.Claim
		wantErr error
	}{
		{"not json", func(t *testing.T) emq.Claim {
			c := claimOf(t, valid(), 1)
			c.Payload = []byte("{not json")
			return c
		}, orders.ErrMalformedOrder},
		{"another job kind", func(t *testing.T) emq.Claim {
			c := claimOf(t, valid(), 1)
			c.Kind = "order.cancel"
			return c
		}, orders.ErrMalformedOrder},
		{"payload of another job", func(t *testing.T) emq.Claim {
			c := claimOf(t, valid(), 1)
			c.ID = orders.NewOrderID()
			return c
		}, orders.ErrMalformedOrder},
		{"unknown account", claimWith(func(o *orders.Order) { o.Account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1" }), orders.ErrNoAccount},
		{"unknown instrument", claimWith(func(o *orders.Order) { o.Symbol = "DOGE-USD" }), orders.ErrUnknownInstrument},
		{"no side", claimWith(func(o *orders.Order) { o.Side = "hold" }), orders.ErrMalformedOrder},
		{"market order with a price", claimWith(func(o *orders.Order) { o.Type = orders.Market }), orders.ErrMalformedOrder},
		{"limit order without a price", claimWith(func(o *orders.Order) { o.Price = nil }), orders.ErrMalformedOrder},
		{"zero quantity", claimWith(func(o *orders.Order) { o.Quantity = decimal.Zero }), orders.ErrMalformedOrder},
		{"client order id the schema refuses", claimWith(func(o *orders.Order) { o.ClientOrderID = "no spaces" }), orders.ErrMalformedOrder},
		{"post-only market order", claimWith(func(o *orders.Order) {
			o.Type, o.Price, o.TimeInForce, o.PostOnly = orders.Market, nil, orders.IOC, true
		}), orders.ErrMalformedOrder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := balances(t, m.db)
			claim := tt.claim(t)
			err := settlement.Settle(m.settler)(context.Background(), claim)
			if !errors.Is(err, emq.ErrPermanent) || !errors.Is(err, tt.wantErr) {
				t.Fatalf("Settle = %v, want a permanent %v", err, tt.wantErr)
			}
			if _, found := readOrder(t, m.db, claim.ID); found {
				t.Error("an orders row was written")
			}
			if after := balances(t, m.db); !maps.Equal(before, after) {
				t.Error("balances changed")
			}
		})
	}
	mustAudit(t, m.db)
}

// TestSettleWaitsOutPostgresOutage stops the shared server, so it must not
// run in parallel with the package's other tests: it is not parallel itself,
// and the parallel subtests elsewhere end before their sequential parents do.
func TestSettleWaitsOutPostgresOutage(t *testing.T) {
	server := testserver.PostgresServer(t)
	m := newMarket(t)
	// Runs before the database's own cleanup, which needs the server up.
	t.Cleanup(func() { server.Start(t) })
	placed := newOrder(m.alice, "BTC-USD", orders.Buy, "0.01", "50000")
	server.Stop(t)
	started := time.Now()
	err := settlement.Settle(m.settler)(context.Background(), claimOf(t, placed, 1))
	if err == nil || errors.Is(err, emq.ErrPermanent) {
		t.Fatalf("Settle with PostgreSQL down = %v, want an error the queue retries", err)
	}
	if took := time.Since(started); took > 11*time.Second {
		t.Errorf("Settle took %s to fail", took)
	}
	server.Start(t)
	// The pool's old connections died with the server; the queue retries
	// until a fresh one answers, and so does this loop.
	var attempts int
	for attempts = 2; ; attempts++ {
		err = settlement.Settle(m.settler)(context.Background(), claimOf(t, placed, int64(attempts)))
		if err == nil {
			break
		}
		if errors.Is(err, emq.ErrPermanent) || attempts == 10 {
			t.Fatalf("attempt %d after the restart: %v", attempts, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	row, _ := readOrder(t, m.db, placed.ID)
	if row.status != "open" || deref(row.token) != int64(attempts) {
		t.Errorf("order %v by token %v, want open by token %d", row.status, deref(row.token), attempts)
	}
	mustAudit(t, m.db)
}

// BenchmarkSettle settles orders from 50 accounts on 8 goroutines, as one
// worker at its default concurrency would: buys and sells at one price on
// one instrument, so every order takes its lock and most trade. It reports
// settlements per second.
func BenchmarkSettle(b *testing.B) {
	m := newMarket(b)
	// The recording relay reads the database; a worker's relay does not.
	settler := postgres.NewSettler(m.db, nil, slog.New(slog.DiscardHandler))
	accounts := make([]string, 50)
	for i := range accounts {
		accounts[i] = m.newCustomer(b)
	}
	claims := make([]emq.Claim, b.N)
	for i := range claims {
		side, quantity := orders.Buy, "0.00100"
		if i%2 == 1 {
			side = orders.Sell
		}
		claims[i] = claimOf(b, newOrder(accounts[i%len(accounts)], "BTC-USD", side, quantity, "50000.00"), 1)
	}
	work := make(chan emq.Claim, len(claims))
	for _, claim := range claims {
		work <- claim
	}
	close(work)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for claim := range work {
				if err := settlement.Settle(settler)(context.Background(), claim); err != nil {
					b.Error(err)
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "settlements/s")
}

// A resting buy held its fee at the taker rate of its moment; the schema
// refuses a fee change while the instrument's book has resting orders, and
// an instrument whose holds or fees would need more than the ledger's 18
// decimals, or whose fee would exceed the notional.
func TestInstrumentRatesGuardTheHolds(t *testing.T) {
	m := newMarket(t)
	ctx := context.Background()
	bid := newOrder(m.alice, "BTC-USD", orders.Buy, "0.1", "50000")
	m.settle(t, bid, 1)
	for _, tt := range []struct {
		name, statement string
	}{
		{"fee raised under a resting buy", `UPDATE instruments SET maker_fee_bps = 20, taker_fee_bps = 30 WHERE symbol = 'BTC-USD'`},
		{"fee above the notional", `UPDATE instruments SET taker_fee_bps = 10001 WHERE symbol = 'ETH-USD'`},
		{"holds past 18 decimals", `UPDATE instruments SET tick_size = 0.000001, lot_size = 0.00000001, maker_fee_bps = 2.5, taker_fee_bps = 2.5
			WHERE symbol = 'ETH-USD'`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := m.db.Exec(ctx, tt.statement); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	// With the book empty the rates may change.
	if _, err := m.db.Exec(ctx, `UPDATE instruments SET maker_fee_bps = 5 WHERE symbol = 'ETH-USD'`); err != nil {
		t.Fatalf("fee change on an empty book: %v", err)
	}
}

// announced are the balances the outbox rows of balances announce, by name,
// each at its version; a balance announced twice fails the test.
func announced(t testing.TB, rows []orders.OutboxEntry) map[string]int64 {
	t.Helper()
	versions := map[string]int64{}
	for _, row := range rows {
		for _, entry := range orders.BalanceEntries(row) {
			if _, twice := versions[entry.Name]; twice || entry.Version <= 0 {
				t.Errorf("%s announced twice or at no version: %v", entry.Name, rows)
			}
			versions[entry.Name] = entry.Version
		}
	}
	return versions
}

// splitEvents splits outbox rows into the balances' rows and the events,
// rendered, by row name, each "<type> <order id>".
func splitEvents(t testing.TB, entries []orders.OutboxEntry) ([]orders.OutboxEntry, map[string][]string) {
	t.Helper()
	var rest []orders.OutboxEntry
	events := map[string][]string{}
	for _, entry := range entries {
		if !strings.HasPrefix(entry.Name, orders.EventsTable+":") {
			rest = append(rest, entry)
			continue
		}
		drafts, err := postgres.RenderEvents(entry)
		if err != nil {
			t.Fatal(err)
		}
		for _, draft := range drafts {
			var resource struct {
				ID      string `json:"id"`
				OrderID string `json:"order_id"`
			}
			if err := json.Unmarshal(draft.Data, &resource); err != nil {
				t.Fatal(err)
			}
			subject := resource.ID
			if draft.Type == orders.EventFill {
				subject = resource.OrderID
			}
			events[entry.Name] = append(events[entry.Name], string(draft.Type)+" "+subject)
		}
	}
	return rest, events
}
