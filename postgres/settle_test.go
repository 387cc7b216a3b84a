package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
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

// market is a database with a funded venue and one funded customer, and a
// settler on it.
type market struct {
	db      *pgxpool.Pool
	settler *postgres.Settler
	relay   *recordingRelay
	account string
}

var (
	venueFunds    = map[string]string{"USD": "10000000.00", "BTC": "200", "ETH": "3000"}
	customerFunds = map[string]string{"USD": "100000.00", "BTC": "2", "ETH": "20"}
)

func newMarket(t testing.TB) *market {
	t.Helper()
	db := migratedPool(t)
	relay := &recordingRelay{db: db}
	m := &market{db: db, relay: relay, settler: postgres.NewSettler(db, relay, slog.New(slog.DiscardHandler))}
	for asset, amount := range venueFunds {
		deposit(t, db, orders.VenueAccount, asset, amount)
	}
	m.account = m.newCustomer(t)
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

// newOrder is an admitted order as the gateway writes it into the job; an
// empty price makes a market order.
func newOrder(account, symbol string, side orders.Side, quantity, price string) orders.Order {
	id := orders.NewOrderID()
	created, _ := orders.ParseOrderID(id)
	order := orders.Order{
		ID: id, ClientOrderID: "c-" + id[len(id)-8:], Account: account, Symbol: symbol, Side: side,
		Type: orders.Market, Quantity: decimal.MustParse(quantity), Status: orders.StatusPending, CreatedAt: created,
	}
	if price != "" {
		limit := decimal.MustParse(price)
		order.Type, order.Price = orders.Limit, &limit
	}
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

type balance struct {
	available string // trimmed: "99500", not "99500.000000000000000000"
	version   int64
}

// balances reads every balance by its outbox name.
func balances(t testing.TB, db *pgxpool.Pool) map[string]balance {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT account_id, asset, trim_scale(available)::text, version FROM balances`)
	if err != nil {
		t.Fatal(err)
	}
	all := make(map[string]balance)
	for rows.Next() {
		var account, asset string
		var b balance
		if err := rows.Scan(&account, &asset, &b.available, &b.version); err != nil {
			t.Fatal(err)
		}
		all[orders.BalanceName(account, asset)] = b
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

type orderRow struct {
	status, reason                    *string
	fillPrice, fillQuantity, notional *string
	transaction, token                *int64
	createdAt                         time.Time
	clientOrderID, symbol, side, kind string
	quantity                          string
	price                             *string
}

func readOrder(t testing.TB, db *pgxpool.Pool, id string) (orderRow, bool) {
	t.Helper()
	var o orderRow
	err := db.QueryRow(context.Background(), `SELECT status, reject_reason, trim_scale(fill_price)::text,
			trim_scale(fill_quantity)::text, trim_scale(fill_notional)::text, ledger_transaction_id, settled_by_token,
			created_at, client_order_id, symbol, side, type, trim_scale(quantity)::text, trim_scale(price)::text
		FROM orders WHERE id = $1`, id).Scan(&o.status, &o.reason, &o.fillPrice, &o.fillQuantity, &o.notional,
		&o.transaction, &o.token, &o.createdAt, &o.clientOrderID, &o.symbol, &o.side, &o.kind, &o.quantity, &o.price)
	if errors.Is(err, pgx.ErrNoRows) {
		return orderRow{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return o, true
}

type entry struct{ account, asset, amount string }

// settlementEntries returns the entries of every settlement transaction of
// the order, by transaction id.
func settlementEntries(t testing.TB, db *pgxpool.Pool, orderID string) map[int64][]entry {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT t.id, e.account_id, e.asset, trim_scale(e.amount)::text
		FROM ledger_transactions t LEFT JOIN ledger_entries e ON e.transaction_id = t.id
		WHERE t.order_id = $1 ORDER BY e.account_id, e.asset`, orderID)
	if err != nil {
		t.Fatal(err)
	}
	found := make(map[int64][]entry)
	for rows.Next() {
		var id int64
		var e entry
		if err := rows.Scan(&id, &e.account, &e.asset, &e.amount); err != nil {
			t.Fatal(err)
		}
		found[id] = append(found[id], e)
	}
	if err := rows.Err(); err != nil {
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
}

func TestSettleMovesMoneyAtTheFillPrice(t *testing.T) {
	const venue = orders.VenueAccount
	tests := []struct {
		name                    string
		symbol                  string
		side                    orders.Side
		quantity, price         string
		wantPrice, wantNotional string
		// the customer's and the venue's base and quote balances after the fill
		wantMine, wantVenue [2]string
	}{
		{
			name: "limit buy", symbol: "BTC-USD", side: orders.Buy, quantity: "0.01000", price: "50000.00",
			wantPrice: "50000", wantNotional: "500",
			wantMine: [2]string{"2.01", "99500"}, wantVenue: [2]string{"199.99", "10000500"},
		},
		{
			name: "limit sell with an exact odd notional", symbol: "ETH-USD", side: orders.Sell, quantity: "0.333", price: "3100.05",
			wantPrice: "3100.05", wantNotional: "1032.31665",
			wantMine: [2]string{"19.667", "101032.31665"}, wantVenue: [2]string{"3000.333", "9998967.68335"},
		},
		{
			name: "market buy at the reference price", symbol: "ETH-BTC", side: orders.Buy, quantity: "0.005",
			wantPrice: "0.06", wantNotional: "0.0003",
			wantMine: [2]string{"20.005", "1.9997"}, wantVenue: [2]string{"2999.995", "200.0003"},
		},
		{
			name: "market sell at the reference price", symbol: "BTC-USD", side: orders.Sell, quantity: "0.00123",
			wantPrice: "50000", wantNotional: "61.5",
			wantMine: [2]string{"1.99877", "100061.5"}, wantVenue: [2]string{"200.00123", "9999938.5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newMarket(t)
			base, quote := tt.symbol[:3], tt.symbol[4:]
			before := balances(t, m.db)
			outboxStart := lastOutboxID(t, m.db)
			order := newOrder(m.account, tt.symbol, tt.side, tt.quantity, tt.price)
			m.settle(t, order, 3)

			row, found := readOrder(t, m.db, order.ID)
			if !found {
				t.Fatal("no orders row")
			}
			if *row.status != "settled" || row.reason != nil || *row.fillPrice != tt.wantPrice || *row.fillQuantity != decimal.MustParse(tt.quantity).Trim(0).String() ||
				*row.notional != tt.wantNotional || row.token == nil || *row.token != 3 || !row.createdAt.Equal(order.CreatedAt) ||
				row.clientOrderID != order.ClientOrderID || row.symbol != tt.symbol || row.side != string(tt.side) || row.transaction == nil {
				t.Errorf("orders row: status %v reason %v fill %v × %v = %v, txn %v, token %v, created %v (want %v)",
					deref(row.status), deref(row.reason), deref(row.fillPrice), deref(row.fillQuantity), deref(row.notional),
					deref(row.transaction), deref(row.token), row.createdAt, order.CreatedAt)
			}
			if (row.price == nil) != (tt.price == "") || row.kind != string(order.Type) {
				t.Errorf("orders row: type %s price %v for order type %s", row.kind, deref(row.price), order.Type)
			}

			transactions := settlementEntries(t, m.db, order.ID)
			if len(transactions) != 1 || transactions[*row.transaction] == nil {
				t.Fatalf("settlement transactions %v, want exactly txn %d", transactions, *row.transaction)
			}
			q, n := decimal.MustParse(tt.quantity).Trim(0).String(), tt.wantNotional
			want := []entry{{m.account, base, q}, {m.account, quote, "-" + n}, {venue, base, "-" + q}, {venue, quote, n}}
			if tt.side == orders.Sell {
				want = []entry{{m.account, base, "-" + q}, {m.account, quote, n}, {venue, base, q}, {venue, quote, "-" + n}}
			}
			slices.SortFunc(want, func(a, b entry) int { return compareEntries(a, b) })
			if got := transactions[*row.transaction]; !slices.Equal(got, want) {
				t.Errorf("entries\n got %v\nwant %v", got, want)
			}

			after := balances(t, m.db)
			wantBalances := map[string]string{
				orders.BalanceName(m.account, base): tt.wantMine[0], orders.BalanceName(m.account, quote): tt.wantMine[1],
				orders.BalanceName(venue, base): tt.wantVenue[0], orders.BalanceName(venue, quote): tt.wantVenue[1],
			}
			for name, b := range after {
				wantAvailable, moved := wantBalances[name]
				wantVersion := before[name].version + 1
				if !moved {
					wantAvailable, wantVersion = before[name].available, before[name].version
				}
				if b.available != wantAvailable || b.version != wantVersion {
					t.Errorf("%s = %s v%d, want %s v%d", name, b.available, b.version, wantAvailable, wantVersion)
				}
			}
			if len(after) != len(before) {
				t.Errorf("%d balances after, %d before", len(after), len(before))
			}

			outbox := outboxAfter(t, m.db, outboxStart)
			var wantOutbox []string
			for name := range wantBalances {
				wantOutbox = append(wantOutbox, fmt.Sprintf("%s@%d", name, after[name].version))
			}
			var gotOutbox []string
			for _, j := range outbox {
				gotOutbox = append(gotOutbox, j.Payload)
				if j.Payload != fmt.Sprintf("%s@%d", j.Name, j.Version) {
					t.Errorf("outbox row %+v: payload is not name@version", j)
				}
			}
			slices.Sort(wantOutbox)
			slices.Sort(gotOutbox)
			if !slices.Equal(gotOutbox, wantOutbox) {
				t.Errorf("outbox\n got %v\nwant %v", gotOutbox, wantOutbox)
			}

			calls, committed := m.relay.Calls()
			if len(calls) != 1 {
				t.Fatalf("relay called %d times, want once", len(calls))
			}
			relayed := slices.Clone(calls[0])
			slices.SortFunc(relayed, func(a, b orders.OutboxEntry) int { return int(a.ID - b.ID) })
			if !slices.Equal(relayed, outbox) {
				t.Errorf("relayed\n %+v\nwant the outbox rows\n %+v", relayed, outbox)
			}
			if !committed[0] {
				t.Error("Relay ran before the outbox rows were committed")
			}
			mustAudit(t, m.db)
		})
	}
}

func compareEntries(a, b entry) int {
	if a.account != b.account {
		if a.account < b.account {
			return -1
		}
		return 1
	}
	if a.asset < b.asset {
		return -1
	}
	if a.asset > b.asset {
		return 1
	}
	return 0
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestSettleRejectsWithoutMovingMoney(t *testing.T) {
	tests := []struct {
		name       string
		symbol     string
		side       orders.Side
		quantity   string
		price      string
		halt       bool
		wantReason string
	}{
		{name: "buy beyond the quote balance", symbol: "BTC-USD", side: orders.Buy, quantity: "2.00001", price: "50000.00",
			wantReason: orders.ReasonInsufficientFunds},
		{name: "buy a cent beyond the quote balance", symbol: "BTC-USD", side: orders.Buy, quantity: "1", price: "100000.01",
			wantReason: orders.ReasonInsufficientFunds},
		{name: "sell more than held", symbol: "ETH-USD", side: orders.Sell, quantity: "20.001", wantReason: orders.ReasonInsufficientFunds},
		{name: "buy more than the venue holds", symbol: "BTC-USD", side: orders.Buy, quantity: "200.00001", price: "0.01",
			wantReason: orders.ReasonInsufficientLiquidity},
		{name: "sell for more than the venue holds", symbol: "ETH-USD", side: orders.Sell, quantity: "10", price: "1000000.05",
			wantReason: orders.ReasonInsufficientLiquidity},
		{name: "halted instrument", symbol: "ETH-BTC", side: orders.Buy, quantity: "0.005", halt: true,
			wantReason: orders.ReasonInstrumentHalted},
		{name: "halted beats insufficient funds", symbol: "BTC-USD", side: orders.Buy, quantity: "1000", halt: true,
			wantReason: orders.ReasonInstrumentHalted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := newMarket(t)
			ctx := context.Background()
			if tt.halt {
				if _, err := m.db.Exec(ctx, `UPDATE instruments SET status = 'halted' WHERE symbol = $1`, tt.symbol); err != nil {
					t.Fatal(err)
				}
			}
			before := balances(t, m.db)
			outboxStart := lastOutboxID(t, m.db)
			order := newOrder(m.account, tt.symbol, tt.side, tt.quantity, tt.price)
			m.settle(t, order, 1)

			row, found := readOrder(t, m.db, order.ID)
			if !found || *row.status != "rejected" || deref(row.reason) != tt.wantReason || row.fillPrice != nil ||
				row.notional != nil || row.transaction != nil || deref(row.token) != int64(1) {
				t.Errorf("orders row (found %v): status %v reason %v fill %v notional %v txn %v token %v; want rejected with %s",
					found, deref(row.status), deref(row.reason), deref(row.fillPrice), deref(row.notional),
					deref(row.transaction), deref(row.token), tt.wantReason)
			}
			if txns := settlementEntries(t, m.db, order.ID); len(txns) != 0 {
				t.Errorf("ledger transactions %v for a rejected order", txns)
			}
			after := balances(t, m.db)
			for name, b := range after {
				// A rejection may open an empty balance row; it moves none.
				if b != before[name] && b != (balance{available: "0", version: 0}) {
					t.Errorf("%s moved: %+v → %+v", name, before[name], b)
				}
			}
			if outbox := outboxAfter(t, m.db, outboxStart); len(outbox) != 0 {
				t.Errorf("outbox rows %v for a rejected order", outbox)
			}
			if calls, _ := m.relay.Calls(); len(calls) != 0 {
				t.Errorf("relay called with %v for a rejected order", calls)
			}
			mustAudit(t, m.db)
		})
	}
}

func TestSettleRefusesPayloadsThatCanNeverSettle(t *testing.T) {
	m := newMarket(t)
	valid := func() orders.Order { return newOrder(m.account, "BTC-USD", orders.Buy, "0.01", "50000") }
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
		{"the venue itself", claimWith(func(o *orders.Order) { o.Account = orders.VenueAccount }), orders.ErrMalformedOrder},
		{"unknown instrument", claimWith(func(o *orders.Order) { o.Symbol = "DOGE-USD" }), orders.ErrUnknownInstrument},
		{"no side", claimWith(func(o *orders.Order) { o.Side = "hold" }), orders.ErrMalformedOrder},
		{"market order with a price", claimWith(func(o *orders.Order) { o.Type = orders.Market }), orders.ErrMalformedOrder},
		{"limit order without a price", claimWith(func(o *orders.Order) { o.Price = nil }), orders.ErrMalformedOrder},
		{"zero quantity", claimWith(func(o *orders.Order) { o.Quantity = decimal.Zero }), orders.ErrMalformedOrder},
		{"client order id the schema refuses", claimWith(func(o *orders.Order) { o.ClientOrderID = "no spaces" }), orders.ErrMalformedOrder},
		{"notional beyond the ledger's decimals", claimWith(func(o *orders.Order) {
			o.Quantity, o.Price = decimal.MustParse("0.0000000001"), ptr(decimal.MustParse("0.000000001"))
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
			if after := balances(t, m.db); !mapsEqual(before, after) {
				t.Error("balances changed")
			}
		})
	}
	mustAudit(t, m.db)
}

func ptr[T any](v T) *T { return &v }

func mapsEqual(a, b map[string]balance) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestSettleTwiceChangesNothing is a redelivery: the worker crashed after
// the commit and before completing the job, so the order runs again.
func TestSettleTwiceChangesNothing(t *testing.T) {
	for _, order := range []struct {
		name            string
		quantity, price string
	}{{"settled", "0.01", "50000"}, {"rejected", "1000", "50000"}} {
		t.Run(order.name, func(t *testing.T) {
			m := newMarket(t)
			placed := newOrder(m.account, "BTC-USD", orders.Buy, order.quantity, order.price)
			m.settle(t, placed, 1)
			first, _ := readOrder(t, m.db, placed.ID)
			balancesAfterFirst, outboxAfterFirst := balances(t, m.db), outboxAfter(t, m.db, 0)

			m.settle(t, placed, 2)
			second, _ := readOrder(t, m.db, placed.ID)
			if deref(second.token) != int64(1) || deref(second.status) != deref(first.status) || deref(second.transaction) != deref(first.transaction) {
				t.Errorf("the second settlement rewrote the order: %v/%v/%v → %v/%v/%v", deref(first.status), deref(first.token),
					deref(first.transaction), deref(second.status), deref(second.token), deref(second.transaction))
			}
			if !mapsEqual(balancesAfterFirst, balances(t, m.db)) {
				t.Error("the second settlement moved balances")
			}
			if got := outboxAfter(t, m.db, 0); !slices.Equal(got, outboxAfterFirst) {
				t.Errorf("outbox grew: %d rows → %d", len(outboxAfterFirst), len(got))
			}
			if txns := settlementEntries(t, m.db, placed.ID); len(txns) > 1 {
				t.Errorf("%d ledger transactions", len(txns))
			}
			if calls, _ := m.relay.Calls(); order.name == "settled" && len(calls) != 1 {
				t.Errorf("relay called %d times, want once", len(calls))
			}
			mustAudit(t, m.db)
		})
	}
}

// TestStaleWorkerSettlesOnce hands each claimed order to two handlers at
// once, as when a worker's lease expired and another worker claimed the job
// while the first still ran: tokens 1 and 2 race, and only one may settle.
// The handlers are two workers' settlers, so the two settlements race in
// PostgreSQL, not in one settler's queue.
func TestStaleWorkerSettlesOnce(t *testing.T) {
	m := newMarket(t)
	settlers := []*postgres.Settler{m.settler, postgres.NewSettler(m.db, m.relay, slog.New(slog.DiscardHandler))}
	const rounds = 60
	placed := make([]orders.Order, rounds)
	for i := range placed {
		side, quantity := orders.Buy, "0.01"
		if i%2 == 1 {
			side, quantity = orders.Sell, "0.005"
		}
		placed[i] = newOrder(m.account, "BTC-USD", side, quantity, "")
	}
	for _, order := range placed {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for token := range int64(2) {
			wg.Go(func() {
				<-start
				errs[token] = settlement.Settle(settlers[token])(context.Background(), claimOf(t, order, token+1))
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("order %s: %v", order.ID, err)
		}
		txns := settlementEntries(t, m.db, order.ID)
		row, found := readOrder(t, m.db, order.ID)
		if len(txns) != 1 || !found || deref(row.status) != "settled" || txns[deref(row.transaction).(int64)] == nil {
			t.Fatalf("order %s: %d ledger transactions, row found %v status %v", order.ID, len(txns), found, deref(row.status))
		}
	}
	// 30 buys of 0.01 at 50000 and 30 sells of 0.005: each moved exactly once.
	b := balances(t, m.db)
	if got := b[orders.BalanceName(m.account, "BTC")]; got.available != "2.15" || got.version != 1+rounds {
		t.Errorf("BTC %+v, want 2.15 at version %d", got, 1+rounds)
	}
	if got := b[orders.BalanceName(m.account, "USD")]; got.available != "92500" || got.version != 1+rounds {
		t.Errorf("USD %+v, want 92500 at version %d", got, 1+rounds)
	}
	if calls, _ := m.relay.Calls(); len(calls) != rounds {
		t.Errorf("relay called %d times for %d settlements", len(calls), rounds)
	}
	// Each token winning some rounds shows the two handlers really raced.
	var ones, twos int
	if err := m.db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE settled_by_token = 1),
		count(*) FILTER (WHERE settled_by_token = 2) FROM orders`).Scan(&ones, &twos); err != nil {
		t.Fatal(err)
	}
	if ones == 0 || twos == 0 || ones+twos != rounds {
		t.Errorf("token 1 settled %d orders, token 2 %d; want both some, %d in all", ones, twos, rounds)
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
	placed := newOrder(m.account, "BTC-USD", orders.Buy, "0.01", "50000")
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
	if deref(row.status) != "settled" || deref(row.token) != int64(attempts) {
		t.Errorf("order %v by token %v, want settled by token %d", deref(row.status), deref(row.token), attempts)
	}
	mustAudit(t, m.db)
}

// BenchmarkSettle settles orders from 50 accounts on 8 goroutines, as one
// worker at its default concurrency would; every order touches the venue's
// rows, the contended part. It reports settlements per second.
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

func TestSettlementMetricsCountOutcomes(t *testing.T) {
	m := newMarket(t)
	registry := prometheus.NewRegistry()
	m.settler.WithMetrics(postgres.NewSettlementMetrics(registry))
	filled := newOrder(m.account, "BTC-USD", orders.Buy, "0.01000", "50000.00")
	m.settle(t, filled, 1)
	m.settle(t, filled, 2) // a redelivery
	m.settle(t, newOrder(m.account, "BTC-USD", orders.Buy, "100.00000", ""), 1)

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
		"outcome=settled reason= ":                    1,
		"outcome=duplicate reason= ":                  1,
		"outcome=rejected reason=insufficient_funds ": 1,
		"observations":                                3,
	}
	if !maps.Equal(counts, want) {
		t.Errorf("settlement metrics %v, want %v", counts, want)
	}
}
