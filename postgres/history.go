package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/order_select.sql
	orderSelectSQL string
	//go:embed sql/order_record_canceled.sql
	orderRecordCanceledSQL string
	//go:embed sql/order_status.sql
	orderStatusSQL string
)

// History reads and writes the durable record of orders that reached a final
// state, the orders table. Settlement writes settled and rejected rows; the
// cancel path writes canceled ones (RecordCanceled).
type History struct {
	db *pgxpool.Pool
}

// NewHistory uses db.
func NewHistory(db *pgxpool.Pool) *History { return &History{db: db} }

// Order returns the account's final order with the id, or ErrNotFound when
// the table has no such order of this account (another account's order
// included).
func (h *History) Order(ctx context.Context, account, id string) (orders.Order, error) {
	// The projection is List's too, so this reads it from its one file and
	// adds the one order's predicate rather than repeating it in another.
	rows, err := h.db.Query(ctx, orderSelectSQL+` WHERE o.id = $1 AND o.account_id = $2`, id, account)
	if err != nil {
		return orders.Order{}, fmt.Errorf("%w: read order %s: %w", orders.ErrUnavailable, id, err)
	}
	list, err := collectOrders(rows)
	if err != nil {
		return orders.Order{}, err
	}
	if len(list) == 0 {
		return orders.Order{}, fmt.Errorf("%w: %s", orders.ErrNotFound, id)
	}
	return list[0], nil
}

// List returns one page of the account's orders that a worker took (final
// or resting), newest first. ORD ids
// are ULIDs, so ordering by id is ordering by admission (to the millisecond),
// and each page is one range scan of orders_account_newest or, filtered,
// orders_account_status_newest.
func (h *History) List(ctx context.Context, account string, q orders.ListQuery) (orders.Page, error) {
	if q.Limit == 0 {
		q.Limit = orders.DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > orders.MaxListLimit {
		return orders.Page{}, fmt.Errorf("%w: limit %d is outside 1..%d", orders.ErrInvalidQuery, q.Limit, orders.MaxListLimit)
	}
	if q.Status != "" && !q.Status.Final() && !q.Status.Resting() {
		return orders.Page{}, fmt.Errorf("%w: status %q is no status of the orders table", orders.ErrInvalidQuery, q.Status)
	}
	if q.After != "" {
		if _, err := orders.ParseOrderID(q.After); err != nil {
			return orders.Page{}, fmt.Errorf("%w: after: %w", orders.ErrInvalidQuery, err)
		}
	}
	// Each filter is its own predicate rather than "$n IS NULL OR ...": a
	// generic plan of the catch-all form cannot use the status index. So the
	// statement is built here, on sql/order_select.sql, with the predicates
	// this query has, rather than kept whole in a file.
	var sql strings.Builder
	sql.WriteString(orderSelectSQL + ` WHERE o.account_id = $1`)
	args := []any{account}
	if q.Status != "" {
		args = append(args, string(q.Status))
		fmt.Fprintf(&sql, ` AND o.status = $%d`, len(args))
	}
	if q.After != "" {
		args = append(args, q.After)
		fmt.Fprintf(&sql, ` AND o.id < $%d`, len(args))
	}
	// One row more than the page tells whether another page follows, so the
	// last page carries no cursor and a client never fetches an empty page.
	args = append(args, q.Limit+1)
	fmt.Fprintf(&sql, ` ORDER BY o.id DESC LIMIT $%d`, len(args))

	rows, err := h.db.Query(ctx, sql.String(), args...)
	if err != nil {
		return orders.Page{}, fmt.Errorf("%w: list orders: %w", orders.ErrUnavailable, err)
	}
	list, err := collectOrders(rows)
	if err != nil {
		return orders.Page{}, err
	}
	page := orders.Page{Orders: list}
	if len(list) > q.Limit {
		page.Orders = list[:q.Limit]
		page.Next = page.Orders[q.Limit-1].ID
	}
	return page, nil
}

// RecordCanceled writes the canceled row of an order the queue has canceled,
// and returns the status the row holds afterwards: canceled, or the status
// settlement recorded when it wrote the row first (a worker whose lease had
// expired can settle an order the reaper had returned to pending). Writing
// twice changes nothing. The account's order.canceled event is written with
// the row, for the outbox sweep to relay.
func (h *History) RecordCanceled(ctx context.Context, order orders.Order) (orders.Status, error) {
	var price *string
	if order.Price != nil {
		text := order.Price.String()
		price = &text
	}
	// The row and its order.canceled event in one transaction; the
	// workers' outbox sweep relays the event (no relay runs here).
	var inserted bool
	err := pgx.BeginFunc(ctx, h.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, orderRecordCanceledSQL,
			order.ID, order.Account, order.ClientOrderID, order.Symbol, string(order.Side), string(order.Type),
			order.Quantity.String(), price, order.CreatedAt, order.CanceledAt, string(order.TimeInForce), order.PostOnly)
		if err != nil || tag.RowsAffected() != 1 {
			return err
		}
		inserted = true
		_, err = tx.Exec(ctx, settleEventsSQL, []string{order.ID}, []string{}, []string{order.ID})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("%w: record cancel of %s: %w", orders.ErrUnavailable, order.ID, err)
	}
	if inserted {
		return orders.StatusCanceled, nil
	}
	var status string
	if err := h.db.QueryRow(ctx, orderStatusSQL, order.ID).Scan(&status); err != nil {
		return "", fmt.Errorf("%w: read order %s: %w", orders.ErrUnavailable, order.ID, err)
	}
	return orders.Status(status), nil
}

// collectOrders reads every row of an orderSelectSQL query.
func collectOrders(rows pgx.Rows) ([]orders.Order, error) {
	defer rows.Close()
	var list []orders.Order
	for rows.Next() {
		order, err := scanOrder(rows)
		if err != nil {
			return nil, err
		}
		list = append(list, order)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%w: read orders: %w", orders.ErrUnavailable, err)
	}
	return list, nil
}

// scanOrder reads one orderSelectSQL row. Amounts are shown on the
// instrument's grid (quantities with the lot size's decimals, prices with the
// tick size's, fees with the quote asset's), as orders are entered; padding
// never rounds, so a value finer than the grid keeps its digits. The average
// fill price is exact when the decimal type holds it (trimmed, then padded
// to the tick size), and otherwise rounded to its 19 digits.
func scanOrder(row pgx.Row) (orders.Order, error) {
	// One allocation holds every column scanned and every value the order
	// points at: Scan is an interface call, so each variable it scans
	// into would otherwise escape to the heap on its own (the relay scans
	// every order a batch touched).
	c := new(struct {
		order                             orders.Order
		side, typ, tif, status, quantity  string
		filled, notional, remaining, fees string
		price, reason, cancelReason       *string
		duplicateOf                       *string
		postOnly                          bool
		created, finished                 time.Time
		tickScale, lotScale, quoteScale   int
		// What the order points at.
		limit, filledQuantity, remainingQuantity, paid, average decimal.Decimal
	})
	order := &c.order
	if err := row.Scan(&order.ID, &order.ClientOrderID, &order.Account, &order.Symbol, &c.side, &c.typ, &c.tif, &c.postOnly,
		&c.quantity, &c.price, &c.status, &c.reason, &c.cancelReason, &c.duplicateOf, &c.filled, &c.notional, &c.remaining, &c.fees,
		&c.created, &c.finished, &c.tickScale, &c.lotScale, &c.quoteScale); err != nil {
		return orders.Order{}, fmt.Errorf("postgres: read order row: %w", err)
	}
	order.Side, order.Type, order.Status = orders.Side(c.side), orders.OrderType(c.typ), orders.Status(c.status)
	order.TimeInForce, order.PostOnly = orders.TimeInForce(c.tif), c.postOnly
	if !order.Status.Final() && !order.Status.Resting() {
		return orders.Order{}, fmt.Errorf("postgres: order %s has status %q in the orders table", order.ID, c.status)
	}
	order.CreatedAt, c.finished = c.created.UTC(), c.finished.UTC()
	if order.Status.Final() {
		order.FinishedAt = &c.finished
	}
	if order.Status == orders.StatusCanceled {
		order.CanceledAt = &c.finished
	}
	if c.reason != nil {
		order.RejectReason = orders.RejectReason(*c.reason)
	}
	if c.cancelReason != nil {
		order.CancelReason = orders.CancelReason(*c.cancelReason)
	}
	if c.duplicateOf != nil {
		order.DuplicateOf = *c.duplicateOf
	}
	amount := func(text string, scale int) (decimal.Decimal, error) {
		// A stored amount is shown exactly or not at all.
		d, err := orders.ParseExact(text)
		if err != nil {
			return decimal.Decimal{}, fmt.Errorf("postgres: order %s: stored amount: %w", order.ID, err)
		}
		return d.Pad(scale), nil
	}
	var err error
	if order.Quantity, err = amount(c.quantity, c.lotScale); err != nil {
		return orders.Order{}, err
	}
	if c.price != nil {
		if c.limit, err = amount(*c.price, c.tickScale); err != nil {
			return orders.Order{}, err
		}
		order.Price = &c.limit
	}
	var filledNotional decimal.Decimal
	for _, field := range []struct {
		text   string
		scale  int
		target *decimal.Decimal
	}{
		{c.filled, c.lotScale, &c.filledQuantity},
		{c.notional, 0, &filledNotional},
		{c.remaining, c.lotScale, &c.remainingQuantity},
		{c.fees, c.quoteScale, &c.paid},
	} {
		if *field.target, err = amount(field.text, field.scale); err != nil {
			return orders.Order{}, err
		}
	}
	order.FilledQuantity, order.RemainingQuantity, order.Fees = &c.filledQuantity, &c.remainingQuantity, &c.paid
	if c.filledQuantity.IsPos() {
		average, err := filledNotional.Quo(c.filledQuantity)
		if err != nil {
			return orders.Order{}, fmt.Errorf("postgres: order %s: average fill price: %w", order.ID, err)
		}
		c.average = average.Trim(0).Pad(c.tickScale)
		order.AverageFillPrice = &c.average
	}
	return *order, nil
}
