package postgres_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestCancelRecordAllWritesTheRowsRecordCanceledWrites: RecordAllCanceled
// writes, for many orders in one transaction, the row RecordCanceled writes
// for one, with one order.canceled event; leaves a row settlement wrote
// alone and the order out of its answer; records a retry whose client order
// id another order holds (in the table, or among those recorded) as that
// order's duplicate; and changes nothing when called again.
func TestCancelRecordAllWritesTheRowsRecordCanceledWrites(t *testing.T) {
	db := migratedPool(t)
	history := postgres.NewHistory(db)
	ctx := context.Background()
	account := newAccount(t, db)
	ids := orderIDs(6)
	slices.Sort(ids) // oldest first
	settled, single, fresh, retry, twinA, twinB := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	insertHistoryRow(t, db, historyRow{ID: settled, Account: account, Status: "filled"})
	canceledAt := time.Now().UTC().Truncate(time.Millisecond)
	order := func(id, clientOrderID string) orders.Order {
		created, _ := orders.ParseOrderID(id)
		price := decimal.MustParse("50000.00")
		return orders.Order{ID: id, ClientOrderID: clientOrderID, Account: account, Symbol: "BTC-USD", Side: orders.Buy,
			Type: orders.Limit, TimeInForce: orders.GTC, Quantity: decimal.MustParse("0.01000"), Price: &price,
			Status: orders.StatusCanceled, CreatedAt: created, CanceledAt: &canceledAt, FinishedAt: &canceledAt}
	}
	if status, err := history.RecordCanceled(ctx, order(single, "single")); err != nil || status != orders.StatusCanceled {
		t.Fatalf("RecordCanceled = %q, %v", status, err)
	}
	list := []orders.Order{
		order(settled, "c-"+settled[len(settled)-8:]), order(fresh, "fresh"),
		order(retry, "c-"+settled[len(settled)-8:]), order(twinB, "twin"), order(twinA, "twin"),
	}
	for round := range 2 {
		got, err := history.RecordAllCanceled(ctx, list)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		var gotIDs []string
		for _, o := range got {
			gotIDs = append(gotIDs, o.ID)
			if o.Status != orders.StatusCanceled || o.CanceledAt == nil || !o.CanceledAt.Equal(canceledAt) {
				t.Errorf("round %d: %s is %s canceled at %v, want canceled at %v", round, o.ID, o.Status, o.CanceledAt, canceledAt)
			}
		}
		if want := []string{fresh, retry, twinB, twinA}; !slices.Equal(gotIDs, want) {
			t.Errorf("round %d answered %v, want %v (the settled one left out, in the order given)", round, gotIDs, want)
		}
	}
	one, err := history.Order(ctx, account, single)
	if err != nil {
		t.Fatal(err)
	}
	many, err := history.Order(ctx, account, fresh)
	if err != nil {
		t.Fatal(err)
	}
	one.ID, one.ClientOrderID, one.CreatedAt = many.ID, many.ClientOrderID, many.CreatedAt
	if a, b := jsonOf(t, one), jsonOf(t, many); !reflect.DeepEqual(a, b) {
		t.Errorf("RecordCanceled wrote\n%v\nRecordAllCanceled\n%v", a, b)
	}
	if got, err := history.Order(ctx, account, settled); err != nil || got.Status != orders.StatusFilled {
		t.Errorf("the settled row became %+v, %v", got, err)
	}
	for id, want := range map[string]string{fresh: "", retry: settled, twinA: "", twinB: twinA} {
		var duplicateOf string
		if err := db.QueryRow(ctx, `SELECT coalesce(duplicate_of, '') FROM orders WHERE id = $1`, id).Scan(&duplicateOf); err != nil {
			t.Fatal(err)
		}
		if duplicateOf != want {
			t.Errorf("%s is a duplicate of %q, want %q", id, duplicateOf, want)
		}
	}
	// The single cancel's event, then the batch's one, written once.
	rows, err := postgres.NewOutbox(db).EventRows(ctx, orders.EventsName(account, "BTC-USD"), 0, 100)
	if err != nil || len(rows) != 2 {
		t.Fatalf("events rows %v, %v; want two", rows, err)
	}
	// Each row the batch inserted is an order first seen: its
	// order.accepted (pending, as admitted) comes before the states.
	drafts, err := postgres.RenderEvents(rows[1])
	if err != nil || len(drafts) != 8 {
		t.Fatalf("the batch's events %+v, %v; want eight", drafts, err)
	}
	for i, draft := range drafts {
		want, status := orders.EventOrderAccepted, orders.StatusPending
		if i >= 4 {
			want, status = orders.EventOrderCanceled, orders.StatusCanceled
		}
		var order orders.Order
		if err := json.Unmarshal(draft.Data, &order); err != nil {
			t.Fatal(err)
		}
		if draft.Type != want || order.Status != status || want == orders.EventOrderAccepted && draft.ID != orders.AcceptedEventID(order.ID) {
			t.Errorf("event %d: %s %s of an order %s, want %s of one %s", i, draft.Type, draft.ID, order.Status, want, status)
		}
	}
	if got, err := history.RecordAllCanceled(ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("no orders: %v, %v", got, err)
	}
}
