package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// historyRow is an orders row as settlement or a cancel leaves it. Empty
// fields take the values of a BTC-USD limit buy of 0.01 at 50000.
type historyRow struct {
	ID, Account, Status                   string
	Symbol, Side, Type, Quantity, Price   string
	RejectReason                          string
	FillPrice, FillQuantity, FillNotional string
}

// insertHistoryRow writes the row directly, as settlement would: a filled
// row gets the ledger transaction its constraint demands.
func insertHistoryRow(t testing.TB, db *pgxpool.Pool, row historyRow) {
	t.Helper()
	ctx := context.Background()
	defaults := func(field *string, value string) {
		if *field == "" {
			*field = value
		}
	}
	defaults(&row.Symbol, "BTC-USD")
	defaults(&row.Side, "buy")
	defaults(&row.Type, "limit")
	defaults(&row.Quantity, "0.01")
	if row.Type == "limit" {
		defaults(&row.Price, "50000")
	}
	created, err := orders.ParseOrderID(row.ID)
	if err != nil {
		t.Fatal(err)
	}
	var price, reason, fillPrice, fillQuantity, fillNotional *string
	if row.Price != "" {
		price = &row.Price
	}
	var ledgerTx *int64
	switch row.Status {
	case "filled":
		// A row settled before the market: filled whole at one price,
		// with the venue's settlement transaction, as 0005 left it.
		defaults(&row.FillPrice, row.Price)
		defaults(&row.FillQuantity, row.Quantity)
		defaults(&row.FillNotional, "500")
		fillPrice, fillQuantity, fillNotional = &row.FillPrice, &row.FillQuantity, &row.FillNotional
		var id int64
		if err := db.QueryRow(ctx, `INSERT INTO ledger_transactions (kind, order_id) VALUES ('settlement', $1) RETURNING id`, row.ID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ledgerTx = &id
	case "rejected":
		defaults(&row.RejectReason, "insufficient_funds")
		reason = &row.RejectReason
	}
	tif := "gtc"
	if row.Type == "market" {
		tif = "ioc"
	}
	if _, err := db.Exec(ctx, `INSERT INTO orders (id, account_id, client_order_id, symbol, side, type, quantity, price,
		status, reject_reason, fill_price, fill_quantity, fill_notional, ledger_transaction_id, created_at, finished_at,
		time_in_force, filled_quantity, filled_notional)
		VALUES ($1, $2, $3, $4, $5, $6, $7::numeric, $8::numeric, $9, $10, $11::numeric, $12::numeric, $13::numeric, $14, $15, $16,
		$17, coalesce($12::numeric, 0), coalesce($13::numeric, 0))`,
		row.ID, row.Account, "c-"+row.ID[len(row.ID)-8:], row.Symbol, row.Side, row.Type, row.Quantity, price,
		row.Status, reason, fillPrice, fillQuantity, fillNotional, ledgerTx, created, created.Add(7*time.Millisecond), tif); err != nil {
		t.Fatalf("insert order row %+v: %v", row, err)
	}
}

// orderIDs mints n ids, newest first as a listing orders them.
func orderIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = orders.NewOrderID()
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids
}

func newAccount(t testing.TB, db *pgxpool.Pool) string {
	t.Helper()
	account, err := postgres.NewAccounts(db).Create(context.Background(), "trader")
	if err != nil {
		t.Fatal(err)
	}
	return account
}

func idsOf(list []orders.Order) []string {
	ids := make([]string, len(list))
	for i, order := range list {
		ids[i] = order.ID
	}
	return ids
}

func TestHistoryListsNewestFirstInPages(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	history := postgres.NewHistory(db)
	alice, bob := newAccount(t, db), newAccount(t, db)
	statuses := []string{"filled", "rejected", "canceled"}
	ids := orderIDs(130)
	var aliceIDs, bobIDs []string
	byStatus := map[orders.Status][]string{}
	// Inserted oldest first would hide an ORDER BY that is really insertion
	// order; interleave instead.
	for i, id := range ids {
		account, status := alice, statuses[i%len(statuses)]
		if i%13 == 0 {
			account = bob
		}
		insertHistoryRow(t, db, historyRow{ID: id, Account: account, Status: status})
		if account == bob {
			bobIDs = append(bobIDs, id)
			continue
		}
		aliceIDs = append(aliceIDs, id)
		byStatus[orders.Status(status)] = append(byStatus[orders.Status(status)], id)
	}

	// walk lists every page and returns the ids in order and the page sizes.
	walk := func(t *testing.T, account string, q orders.ListQuery) (ids []string, sizes []int) {
		t.Helper()
		for range 100 {
			page, err := history.List(ctx, account, q)
			if err != nil {
				t.Fatal(err)
			}
			ids, sizes = append(ids, idsOf(page.Orders)...), append(sizes, len(page.Orders))
			if page.Next == "" {
				return ids, sizes
			}
			if page.Next != page.Orders[len(page.Orders)-1].ID {
				t.Fatalf("Next = %s, want the page's last id %s", page.Next, page.Orders[len(page.Orders)-1].ID)
			}
			q.After = page.Next
		}
		t.Fatal("the listing never ends")
		return nil, nil
	}
	tests := []struct {
		name      string
		account   string
		query     orders.ListQuery
		wantIDs   []string
		wantSizes []int
	}{
		{"default limit", alice, orders.ListQuery{}, aliceIDs, []int{50, 50, 20}},
		{"limit 7, rejected", alice, orders.ListQuery{Limit: 7, Status: orders.StatusRejected}, byStatus[orders.StatusRejected], []int{7, 7, 7, 7, 7, 5}},
		{"exact multiple", alice, orders.ListQuery{Limit: 40, Status: orders.StatusCanceled}, byStatus[orders.StatusCanceled], []int{40}},
		{"the other account", bob, orders.ListQuery{Limit: orders.MaxListLimit}, bobIDs, []int{10}},
		{"no orders", newAccount(t, db), orders.ListQuery{}, nil, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gotIDs, gotSizes := walk(t, tt.account, tt.query)
			if !slices.Equal(gotIDs, tt.wantIDs) {
				t.Errorf("listed %d ids, want %d newest first:\n got %v\nwant %v", len(gotIDs), len(tt.wantIDs), gotIDs, tt.wantIDs)
			}
			if !slices.Equal(gotSizes, tt.wantSizes) {
				t.Errorf("page sizes %v, want %v", gotSizes, tt.wantSizes)
			}
		})
	}
	if len(aliceIDs) != 120 || len(byStatus[orders.StatusCanceled]) != 40 {
		t.Fatalf("fixture: %d orders of alice, %d canceled; want 120 and 40", len(aliceIDs), len(byStatus[orders.StatusCanceled]))
	}
}

func TestHistoryRefusesQueriesOutOfBounds(t *testing.T) {
	history := postgres.NewHistory(migratedPool(t))
	const account = "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"
	for _, q := range []orders.ListQuery{
		{Limit: -1}, {Limit: orders.MaxListLimit + 1},
		{Status: orders.StatusPending}, {Status: orders.StatusAccepted}, {Status: "SETTLED"},
		{After: "ORD_nope"},
	} {
		if _, err := history.List(context.Background(), account, q); !errors.Is(err, orders.ErrInvalidQuery) {
			t.Errorf("List(%+v) = %v, want ErrInvalidQuery", q, err)
		}
	}
}

// TestHistoryShowsFinalOrders: the fields of each final status, amounts on
// the instrument's grid and never rounded, and JSON as the API shows it.
func TestHistoryShowsFinalOrders(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	history := postgres.NewHistory(db)
	account := newAccount(t, db)
	ids := orderIDs(4)
	rows := []historyRow{
		{ID: ids[0], Account: account, Status: "filled", Quantity: "0.015", Price: "64250.5", FillPrice: "64250.5", FillQuantity: "0.015", FillNotional: "963.7575"},
		{ID: ids[1], Account: account, Status: "rejected", Symbol: "ETH-USD", Type: "market", Quantity: "1.25", RejectReason: "instrument_halted"},
		{ID: ids[2], Account: account, Status: "canceled", Symbol: "ETH-BTC", Side: "sell", Quantity: "0.5", Price: "0.06"},
		// Finer than the grid (an instrument's tick may shrink later): shown whole.
		{ID: ids[3], Account: account, Status: "filled", Quantity: "0.000001", Price: "50000.123", FillPrice: "50000.123", FillQuantity: "0.000001", FillNotional: "0.050000123"},
	}
	for _, row := range rows {
		insertHistoryRow(t, db, row)
	}
	created := func(id string) string {
		at, _ := orders.ParseOrderID(id)
		return at.Format(time.RFC3339Nano)
	}
	finished := func(id string) string {
		at, _ := orders.ParseOrderID(id)
		return at.Add(7 * time.Millisecond).Format(time.RFC3339Nano)
	}
	want := []map[string]any{
		{"id": ids[0], "client_order_id": "c-" + ids[0][22:], "account_id": account, "symbol": "BTC-USD", "side": "buy", "type": "limit",
			"time_in_force": "gtc", "quantity": "0.01500", "price": "64250.50", "status": "filled", "created_at": created(ids[0]),
			"filled_quantity": "0.01500", "remaining_quantity": "0.00000", "average_fill_price": "64250.50", "fees": "0.00",
			"finished_at": finished(ids[0])},
		{"id": ids[1], "client_order_id": "c-" + ids[1][22:], "account_id": account, "symbol": "ETH-USD", "side": "buy", "type": "market",
			"time_in_force": "ioc", "quantity": "1.250", "status": "rejected", "created_at": created(ids[1]),
			"reject_reason": "instrument_halted", "filled_quantity": "0.000", "remaining_quantity": "1.250", "fees": "0.00",
			"finished_at": finished(ids[1])},
		{"id": ids[2], "client_order_id": "c-" + ids[2][22:], "account_id": account, "symbol": "ETH-BTC", "side": "sell", "type": "limit",
			"time_in_force": "gtc", "quantity": "0.500", "price": "0.06000", "status": "canceled", "created_at": created(ids[2]),
			"filled_quantity": "0.000", "remaining_quantity": "0.500", "fees": "0.00000000",
			"canceled_at": finished(ids[2]), "finished_at": finished(ids[2])},
		{"id": ids[3], "client_order_id": "c-" + ids[3][22:], "account_id": account, "symbol": "BTC-USD", "side": "buy", "type": "limit",
			"time_in_force": "gtc", "quantity": "0.000001", "price": "50000.123", "status": "filled", "created_at": created(ids[3]),
			"filled_quantity": "0.000001", "remaining_quantity": "0.00000", "average_fill_price": "50000.123", "fees": "0.00",
			"finished_at": finished(ids[3])},
	}
	page, err := history.List(ctx, account, orders.ListQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Orders) != len(want) || page.Next != "" {
		t.Fatalf("listed %d orders (next %q), want %d", len(page.Orders), page.Next, len(want))
	}
	for i, listed := range page.Orders {
		t.Run(want[i]["status"].(string), func(t *testing.T) {
			one, err := history.Order(ctx, account, listed.ID)
			if err != nil {
				t.Fatal(err)
			}
			for name, order := range map[string]orders.Order{"List": listed, "Order": one} {
				if got := jsonOf(t, order); !reflect.DeepEqual(got, want[i]) {
					t.Errorf("%s shows\n %v\nwant\n %v", name, got, want[i])
				}
			}
		})
	}
	if _, err := history.Order(ctx, newAccount(t, db), ids[0]); !errors.Is(err, orders.ErrNotFound) {
		t.Errorf("another account's order: %v, want ErrNotFound", err)
	}
}

func jsonOf(t testing.TB, order orders.Order) map[string]any {
	t.Helper()
	data, err := json.Marshal(order)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(data, &decoded); err != nil {
		t.Fatal(err)
	}
	return decoded
}

// placerWithHistory is a Placer on a fresh Redis and a fresh database, with
// one account.
func placerWithHistory(t testing.TB) (*placement.Placer, *emq.Queue, *pgxpool.Pool, string) {
	t.Helper()
	db := migratedPool(t)
	client, err := emq.Connect(context.Background(), testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	queue := queues.For("BTC-USD")
	placer := placement.NewPlacer(queues, placement.WithHistory(postgres.NewOrders(postgres.NewHistory(db), postgres.NewSettler(db, nil, nil))))
	if err := placer.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return placer, queue, db, newAccount(t, db)
}

// TestPlacerReadsTheOrdersTableFirst plays settlement on a placed order: the
// row it writes wins over the queue's view at every step, and a final order
// is refused a cancel.
func TestPlacerReadsTheOrdersTableFirst(t *testing.T) {
	placer, queue, db, account := placerWithHistory(t)
	ctx := context.Background()
	tests := []struct {
		name string
		// settle plays the worker: the row, then the queue.
		settle func(t *testing.T, order orders.Order)
		want   orders.Status
	}{
		{"settled, job completed", func(t *testing.T, order orders.Order) {
			claims, err := queue.Claim(ctx, 1, time.Minute)
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %+v, %v", claims, err)
			}
			insertHistoryRow(t, db, historyRow{ID: order.ID, Account: account, Status: "filled", Quantity: "0.01000", Price: "50000.00"})
			if err := queue.Complete(ctx, order.ID, claims[0].Token); err != nil {
				t.Fatal(err)
			}
		}, orders.StatusFilled},
		{"rejected, job still active", func(t *testing.T, order orders.Order) {
			if _, err := queue.Claim(ctx, 1, time.Minute); err != nil {
				t.Fatal(err)
			}
			insertHistoryRow(t, db, historyRow{ID: order.ID, Account: account, Status: "rejected"})
		}, orders.StatusRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			placed := placeOrder(t, placer, account, strings.ReplaceAll(tt.name, " ", "-"))
			if read, err := placer.Order(ctx, account, placed.ID); err != nil || read.Status != orders.StatusPending {
				t.Fatalf("before settlement: %+v, %v; want it pending from the queue", read, err)
			}
			tt.settle(t, placed)
			read, err := placer.Order(ctx, account, placed.ID)
			if err != nil || read.Status != tt.want || read.FinishedAt == nil {
				t.Fatalf("after settlement: %+v, %v; want it %s from the orders table", read, err, tt.want)
			}
			var refusal *orders.NotCancelableError
			if _, err := placer.Cancel(ctx, account, placed.ID); !errors.As(err, &refusal) || refusal.Status != tt.want {
				t.Errorf("Cancel = %v, want a refusal naming %s", err, tt.want)
			}
			if _, err := placer.Order(ctx, newAccount(t, db), placed.ID); !errors.Is(err, orders.ErrNotFound) {
				t.Errorf("another account's read = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestCancelRecordsTheCanceledOrder(t *testing.T) {
	placer, _, db, account := placerWithHistory(t)
	ctx := context.Background()
	placed := placeOrder(t, placer, account, "to-cancel")
	canceled, err := placer.Cancel(ctx, account, placed.ID)
	if err != nil || canceled.Status != orders.StatusCanceled || canceled.CanceledAt == nil || canceled.FinishedAt == nil {
		t.Fatalf("Cancel = %+v, %v", canceled, err)
	}
	var status, quantity string
	var finished time.Time
	if err := db.QueryRow(ctx, `SELECT status, trim_scale(quantity)::text, finished_at FROM orders WHERE id = $1`, placed.ID).Scan(&status, &quantity, &finished); err != nil {
		t.Fatalf("the canceled order has no row: %v", err)
	}
	if status != "canceled" || quantity != "0.01" || !finished.Equal(*canceled.CanceledAt) {
		t.Errorf("row: %s %s finished %v; want canceled 0.01 finished at %v", status, quantity, finished, canceled.CanceledAt)
	}
	page, err := placer.List(ctx, account, orders.ListQuery{Status: orders.StatusCanceled})
	if err != nil || !slices.Equal(idsOf(page.Orders), []string{placed.ID}) {
		t.Errorf("canceled listing = %v, %v; want the order", idsOf(page.Orders), err)
	}
	var refusal *orders.NotCancelableError
	if _, err := placer.Cancel(ctx, account, placed.ID); !errors.As(err, &refusal) || refusal.Status != orders.StatusCanceled {
		t.Errorf("second Cancel = %v, want a refusal naming canceled", err)
	}
}

// TestCanceledRowIsWrittenByTheNextReadWhenTheCancelCouldNot: the queue's
// cancel stands when the row cannot be written, and the next read writes it.
func TestCanceledRowIsWrittenByTheNextReadWhenTheCancelCouldNot(t *testing.T) {
	placer, queue, db, account := placerWithHistory(t)
	ctx := context.Background()
	placed := placeOrder(t, placer, account, "unrecorded")
	failOrderWrites(t, db)

	_, err := placer.Cancel(ctx, account, placed.ID)
	var unrecorded *orders.CancelNotRecordedError
	if !errors.As(err, &unrecorded) || !errors.Is(err, orders.ErrCancelNotRecorded) {
		t.Fatalf("Cancel = %v, want a *CancelNotRecordedError", err)
	}
	if unrecorded.Order.ID != placed.ID || unrecorded.Order.Status != orders.StatusCanceled || unrecorded.Order.CanceledAt == nil {
		t.Errorf("the error carries %+v, want the canceled order", unrecorded.Order)
	}
	if job, err := queue.Job(ctx, placed.ID); err != nil || job.State != emq.StateCanceled {
		t.Fatalf("queue state %q, %v; want the cancel to stand", job.State, err)
	}
	// A read while writes still fail answers from the queue.
	if read, err := placer.Order(ctx, account, placed.ID); err != nil || read.Status != orders.StatusCanceled {
		t.Fatalf("read while writes fail: %+v, %v", read, err)
	}

	allowOrderWrites(t, db)
	if read, err := placer.Order(ctx, account, placed.ID); err != nil || read.Status != orders.StatusCanceled {
		t.Fatalf("read: %+v, %v", read, err)
	}
	recorded, err := postgres.NewHistory(db).Order(ctx, account, placed.ID)
	if err != nil || recorded.Status != orders.StatusCanceled || !recorded.CanceledAt.Equal(*unrecorded.Order.CanceledAt) {
		t.Errorf("row after the read: %+v, %v; want it canceled at %v", recorded, err, unrecorded.Order.CanceledAt)
	}
}

// TestRecordCanceledNeverOverwritesSettlement: a stale worker can settle an
// order the reaper returned to pending and the client then canceled; the
// row settlement wrote stands and the cancel learns of it.
func TestRecordCanceledNeverOverwritesSettlement(t *testing.T) {
	db := migratedPool(t)
	history := postgres.NewHistory(db)
	ctx := context.Background()
	account := newAccount(t, db)
	ids := orderIDs(2)
	insertHistoryRow(t, db, historyRow{ID: ids[0], Account: account, Status: "filled"})
	order := orders.Order{ID: ids[0], ClientOrderID: "x", Account: account, Symbol: "BTC-USD", Side: orders.Buy,
		Type: orders.Market, Quantity: decimal.MustParse("0.01"), Status: orders.StatusCanceled}
	if status, err := history.RecordCanceled(ctx, order); err != nil || status != orders.StatusFilled {
		t.Errorf("RecordCanceled over a settled row = %q, %v; want settled", status, err)
	}
	order.ID = ids[1]
	order.CreatedAt, _ = orders.ParseOrderID(ids[1])
	for range 2 {
		if status, err := history.RecordCanceled(ctx, order); err != nil || status != orders.StatusCanceled {
			t.Errorf("RecordCanceled = %q, %v; want canceled, twice", status, err)
		}
	}
	if got, err := history.Order(ctx, account, ids[0]); err != nil || got.Status != orders.StatusFilled {
		t.Errorf("the settled row became %+v, %v", got, err)
	}
	// One order.accepted and one order.canceled event, written with the
	// row the first time only.
	rows, err := postgres.NewOutbox(db).EventRows(ctx, orders.EventsName(account, "BTC-USD"), 0, 100)
	if err != nil || len(rows) != 1 {
		t.Fatalf("events rows %v, %v; want the cancel's one", rows, err)
	}
	drafts, err := postgres.RenderEvents(rows[0])
	if err != nil || len(drafts) != 2 || drafts[0].Type != orders.EventOrderAccepted || drafts[0].ID != orders.AcceptedEventID(ids[1]) ||
		drafts[1].Type != orders.EventOrderCanceled || !strings.HasPrefix(drafts[1].ID, ids[1]+":") {
		t.Errorf("the cancel's events %+v, %v; want order.accepted and order.canceled of %s", drafts, err, ids[1])
	}
}

// TestRecordCanceledOfARetryNamesTheFirst: a retry admitted again after
// Redis lost its dedup window and canceled on the queue is recorded as the
// first order's duplicate, so it does not take the client order id the
// first holds.
func TestRecordCanceledOfARetryNamesTheFirst(t *testing.T) {
	db := migratedPool(t)
	history := postgres.NewHistory(db)
	ctx := context.Background()
	account := newAccount(t, db)
	ids := orderIDs(2)
	insertHistoryRow(t, db, historyRow{ID: ids[0], Account: account, Status: "filled"})
	retry := orders.Order{ID: ids[1], ClientOrderID: "c-" + ids[0][len(ids[0])-8:], Account: account, Symbol: "BTC-USD",
		Side: orders.Buy, Type: orders.Market, Quantity: decimal.MustParse("0.01"), Status: orders.StatusCanceled}
	retry.CreatedAt, _ = orders.ParseOrderID(ids[1])
	if status, err := history.RecordCanceled(ctx, retry); err != nil || status != orders.StatusCanceled {
		t.Fatalf("RecordCanceled = %q, %v; want canceled", status, err)
	}
	var duplicateOf *string
	if err := db.QueryRow(ctx, `SELECT duplicate_of FROM orders WHERE id = $1`, ids[1]).Scan(&duplicateOf); err != nil || duplicateOf == nil || *duplicateOf != ids[0] {
		t.Errorf("the canceled retry is a duplicate of %v (%v), want %s", duplicateOf, err, ids[0])
	}
}

// failOrderWrites makes every write to the orders table fail while reads
// work, as a PostgreSQL that stops taking writes mid-request would.
func failOrderWrites(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `
		CREATE FUNCTION refuse_order_writes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'orders table unwritable (test)'; END $$;
		CREATE TRIGGER refuse_order_writes BEFORE INSERT ON orders
			FOR EACH ROW EXECUTE FUNCTION refuse_order_writes();`); err != nil {
		t.Fatal(err)
	}
}

func allowOrderWrites(t testing.TB, db *pgxpool.Pool) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `DROP TRIGGER refuse_order_writes ON orders`); err != nil {
		t.Fatal(err)
	}
}

// refuseOrders makes PostgreSQL refuse every insert of the orders ids;
// other orders still go in.
func refuseOrders(t testing.TB, db *pgxpool.Pool, ids ...string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `
		CREATE FUNCTION refuse_some_orders() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.id = ANY('{`+strings.Join(ids, ",")+`}'::text[]) THEN RAISE EXCEPTION 'refused (test)'; END IF;
		RETURN NEW; END $$;
		CREATE TRIGGER refuse_some_orders BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION refuse_some_orders();`); err != nil {
		t.Fatal(err)
	}
}

// placeOrder admits a BTC-USD limit buy of the account through placer.
func placeOrder(t testing.TB, placer *placement.Placer, account, clientOrderID string) orders.Order {
	t.Helper()
	placed, err := placer.Place(context.Background(), orders.PlaceCommand{
		Account: account, ClientOrderID: clientOrderID, Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit,
		Quantity: decimal.MustParse("0.01"), Price: decimal.MustParse("50000"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return placed.Order
}

// TestCancelsLeftUnrecordedAreRecordedWithoutARead: an order canceled on
// the queue while its row could not be written (by id or with the rest of
// its account's) gets its row from RecordUnconfirmedCancels once writes
// work again, with no read of it, at the queue's cancel time; one order
// PostgreSQL goes on refusing stays unconfirmed and holds back no other; a
// cancel recorded at once leaves nothing for it, and a cancel younger than
// asked for is left to its caller.
func TestCancelsLeftUnrecordedAreRecordedWithoutARead(t *testing.T) {
	placer, queue, db, account := placerWithHistory(t)
	ctx := context.Background()
	recordedAtOnce := placeOrder(t, placer, account, "at-once")
	if _, err := placer.Cancel(ctx, account, recordedAtOnce.ID); err != nil {
		t.Fatal(err)
	}
	byID := placeOrder(t, placer, account, "by-id")
	withTheRest := placeOrder(t, placer, account, "with-the-rest")
	refused := placeOrder(t, placer, account, "refused")
	failOrderWrites(t, db)
	if _, err := placer.Cancel(ctx, account, byID.ID); !errors.Is(err, orders.ErrCancelNotRecorded) {
		t.Fatalf("Cancel while writes fail = %v; want it not recorded", err)
	}
	if _, err := placer.CancelAll(ctx, account, ""); err == nil {
		t.Fatal("CancelAll while writes fail succeeded")
	}
	allowOrderWrites(t, db)
	// One order PostgreSQL goes on refusing holds back none of the others.
	refuseOrders(t, db, refused.ID)

	left, err := queue.Unconfirmed(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	canceledAt := map[string]time.Time{}
	for _, job := range left {
		ids = append(ids, job.ID)
		canceledAt[job.ID] = job.Finished
	}
	slices.Sort(ids)
	all := []string{byID.ID, withTheRest.ID, refused.ID}
	slices.Sort(all)
	if !slices.Equal(ids, all) {
		t.Fatalf("unconfirmed cancels %v; want %v", ids, all)
	}
	if n, err := placer.RecordUnconfirmedCancels(ctx, time.Hour); err != nil || n != 0 {
		t.Errorf("recording the cancels older than an hour: %d, %v; want none", n, err)
	}
	if n, err := placer.RecordUnconfirmedCancels(ctx, 0); err == nil || n != 2 {
		t.Fatalf("RecordUnconfirmedCancels = %d, %v; want 2 and the refusal", n, err)
	}
	want := []string{byID.ID, withTheRest.ID}
	history := postgres.NewHistory(db)
	for _, id := range want {
		row, err := history.Order(ctx, account, id)
		if err != nil || row.Status != orders.StatusCanceled || row.CanceledAt == nil || !row.CanceledAt.Equal(canceledAt[id]) {
			t.Errorf("%s: %+v, %v; want it canceled at %v", id, row, err, canceledAt[id])
		}
	}
	if left, err := queue.Unconfirmed(ctx, 0, 10); err != nil || len(left) != 1 || left[0].ID != refused.ID {
		t.Errorf("unconfirmed after the pass: %v, %v; want the refused order's only", left, err)
	}
}

// TestRefusedCancelsHoldBackNoOtherForGood: three orders PostgreSQL goes on
// refusing end a pass's one-by-one writes when they come first, but each
// pass writes them in an order of its own, so the fourth is recorded
// within a few passes.
func TestRefusedCancelsHoldBackNoOtherForGood(t *testing.T) {
	placer, queue, db, account := placerWithHistory(t)
	ctx := context.Background()
	var refused []string
	for i := range 3 {
		refused = append(refused, placeOrder(t, placer, account, "refused-"+strconv.Itoa(i)).ID)
	}
	good := placeOrder(t, placer, account, "good")
	failOrderWrites(t, db)
	if _, err := placer.CancelAll(ctx, account, ""); err == nil {
		t.Fatal("CancelAll while writes fail succeeded")
	}
	allowOrderWrites(t, db)
	refuseOrders(t, db, refused...)
	passes := 0
	for ; passes < 30; passes++ {
		if n, _ := placer.RecordUnconfirmedCancels(ctx, 0); n == 1 {
			break
		}
	}
	if row, err := postgres.NewHistory(db).Order(ctx, account, good.ID); err != nil || row.Status != orders.StatusCanceled {
		t.Fatalf("after %d passes the good order is %+v, %v; want it recorded canceled", passes+1, row, err)
	}
	left, err := queue.Unconfirmed(ctx, 0, 10)
	if err != nil || len(left) != 3 {
		t.Errorf("unconfirmed after the passes: %d, %v; want the 3 refused", len(left), err)
	}
}
