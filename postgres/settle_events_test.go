package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestSettleEventsRendersAsTheReference: settle_events.sql, on the rows a
// batch of crossing orders left, gives the relay the events the plain
// statement it replaced gives (testdata/settle_events_reference.sql), row
// for row, event for event, byte for byte: the statement may change how it
// finds and writes its rows, never what the relay renders from them.
func TestSettleEventsRendersAsTheReference(t *testing.T) {
	ctx := context.Background()
	reference, err := os.ReadFile("testdata/settle_events_reference.sql")
	if err != nil {
		t.Fatal(err)
	}
	m := newMarket(t)
	accounts := []string{m.alice, m.bob}
	for range 6 {
		accounts = append(accounts, m.newCustomer(t))
	}
	settle := func(batch []orders.Order) {
		t.Helper()
		errs, err := postgres.SettleTogether(ctx, m.settler, batch)
		if err != nil || errors.Join(errs...) != nil {
			t.Fatalf("settle: %v %v", err, errs)
		}
	}
	// The book: resting bids and asks of every account at several prices.
	var resting []orders.Order
	for i := range 40 {
		side, price := orders.Buy, fmt.Sprintf("%d.%02d", 49990-i%5, i%7)
		if i%2 == 1 {
			side, price = orders.Sell, fmt.Sprintf("%d.%02d", 50010+i%5, i%7)
		}
		resting = append(resting, newOrder(accounts[i%len(accounts)], "BTC-USD", side, fmt.Sprintf("0.00%d", 1+i%9), price))
	}
	settle(resting)
	// The batch: takers filling against one or several makers, partly or
	// wholly, market orders, IOCs canceled for their rest, a post-only
	// rejected, a retry of a client order id, and orders that only rest.
	var batch []orders.Order
	for i := range 60 {
		side, price := orders.Buy, "50014.00"
		if i%2 == 1 {
			side, price = orders.Sell, "49986.00"
		}
		order := newOrder(accounts[(i+3)%len(accounts)], "BTC-USD", side, fmt.Sprintf("0.0%d", 1+i%4), price)
		switch i % 10 {
		case 3:
			order = newOrder(order.Account, "BTC-USD", side, "0.002", "")
		case 5:
			order = withTIF(order, orders.IOC)
		case 7:
			order.PostOnly = true
		case 8:
			order = newOrder(order.Account, "BTC-USD", side, "0.001", map[orders.Side]string{orders.Buy: "40000.00", orders.Sell: "60000.00"}[side])
		case 9:
			order.ClientOrderID = batch[len(batch)-1].ClientOrderID
			order.Account = batch[len(batch)-1].Account
		}
		batch = append(batch, order)
	}
	settle(batch)
	other := newOrder(m.alice, "ETH-USD", orders.Buy, "0.5", "2999.00")
	settle([]orders.Order{other})

	var takers []string
	for _, o := range batch {
		takers = append(takers, o.ID)
	}
	var makers []string
	if err := m.db.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT maker_order_id), '{}') FROM trades WHERE taker_order_id = ANY($1)`, takers).Scan(&makers); err != nil {
		t.Fatal(err)
	}
	if len(makers) < 10 {
		t.Fatalf("the batch traded against %d makers: too few for the test to mean anything", len(makers))
	}
	touched := append(slices.Clone(takers), makers...)
	for _, tc := range []struct {
		name                     string
		touched, traded, created []string
	}{
		{"a batch: its takers and the makers they traded with", touched, takers, takers},
		{"every order of both batches, all inserted", append(slices.Clone(touched), idsOf(resting)...), append(idsOf(resting), takers...), append(idsOf(resting), takers...)},
		{"an id twice, in every list", append(slices.Clone(touched), touched[:5]...), append(slices.Clone(takers), takers[:5]...), append(slices.Clone(takers), takers[:5]...)},
		{"two instruments", []string{other.ID, takers[0]}, []string{takers[0]}, []string{other.ID}},
		{"a canceled order's first row (cancel.go)", []string{batch[5].ID}, []string{}, []string{batch[5].ID}},
		{"an order read again, none inserted", []string{makers[0]}, []string{}, []string{}},
		{"ids of no order", []string{"ORD_00000000000000000000000000"}, []string{"ORD_00000000000000000000000000"}, []string{}},
		{"nothing", []string{}, []string{}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			render := func(statement string) []string {
				t.Helper()
				// Each in a transaction of its own, rolled back: both bump the
				// same sources from the same versions.
				tx, err := m.db.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback(ctx)
				rows, _ := tx.Query(ctx, statement, tc.touched, tc.traded, tc.created)
				entries, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
				if err != nil {
					t.Fatal(err)
				}
				var rendered []string
				for _, entry := range entries {
					drafts, err := postgres.RenderEvents(entry)
					if err != nil {
						t.Fatal(err)
					}
					var b bytes.Buffer
					fmt.Fprintf(&b, "%s@%d:", entry.Name, entry.Version)
					for _, d := range drafts {
						fmt.Fprintf(&b, "\n  %s %s %s", d.ID, d.Type, d.Data)
					}
					rendered = append(rendered, b.String())
				}
				return rendered
			}
			want, got := render(string(reference)), render(postgres.SettleEventsSQL)
			if !slices.Equal(got, want) {
				t.Errorf("settle_events.sql renders\n%q\nwant (the reference)\n%q", got, want)
			}
		})
	}
}
