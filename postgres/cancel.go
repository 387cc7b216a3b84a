package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/cancel_find.sql
	cancelFindSQL string
	//go:embed sql/cancel_read.sql
	cancelReadSQL string
	//go:embed sql/cancel_write.sql
	cancelWriteSQL string
	//go:embed sql/cancel_list.sql
	cancelListSQL string
	//go:embed sql/cancel_record_all.sql
	cancelRecordAllSQL string
)

// RecordAllCanceled writes the canceled rows of orders the queue canceled
// before any worker took them, with their order.canceled events, as
// RecordCanceled writes one, and returns the rows of those now canceled as
// History.Order reads them, in the order given. An order whose row
// settlement wrote first (a worker whose lease ran out settled it) is left
// out: that row is what happened to it. The call is one transaction of
// three statements whatever the number of orders (the caller bounds it): on
// an error no row is written, and the error wraps orders.ErrUnavailable.
func (h *History) RecordAllCanceled(ctx context.Context, list []orders.Order) ([]orders.Order, error) {
	if len(list) == 0 {
		return nil, nil
	}
	n := len(list)
	ids, accounts, clientIDs, symbols := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	sides, types, quantities, prices := make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	created, canceledAt := make([]time.Time, n), make([]*time.Time, n)
	tifs, postOnly := make([]string, n), make([]bool, n)
	for i, order := range list {
		ids[i], accounts[i], clientIDs[i], symbols[i] = order.ID, order.Account, order.ClientOrderID, order.Symbol
		sides[i], types[i], quantities[i] = string(order.Side), string(order.Type), order.Quantity.String()
		if order.Price != nil {
			text := order.Price.String()
			prices[i] = &text
		}
		created[i], canceledAt[i] = order.CreatedAt, order.CanceledAt
		tifs[i], postOnly[i] = string(order.TimeInForce), order.PostOnly
	}
	unavailable := func(err error) error {
		return fmt.Errorf("%w: record the cancel of %d orders of %s: %w", orders.ErrUnavailable, n, list[0].Account, err)
	}
	var canceled []orders.Order
	err := pgx.BeginFunc(ctx, h.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, cancelRecordAllSQL, ids, accounts, clientIDs, symbols, sides, types, quantities, prices,
			created, canceledAt, tifs, postOnly)
		if err != nil {
			return err
		}
		var inserted, stillCanceled []string
		var (
			id, status string
			isNew      bool
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &status, &isNew}, func() error {
			if isNew {
				inserted = append(inserted, id)
			}
			if orders.Status(status) == orders.StatusCanceled {
				stillCanceled = append(stillCanceled, id)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(inserted) > 0 {
			if _, err := tx.Exec(ctx, settleEventsSQL, inserted, []string{}, inserted); err != nil {
				return err
			}
		}
		if len(stillCanceled) == 0 {
			return nil
		}
		rows, err = tx.Query(ctx, orderSelectSQL+` WHERE o.id = ANY($1)`, stillCanceled)
		if err != nil {
			return err
		}
		read, err := collectOrders(rows)
		if err != nil {
			return err
		}
		canceled = append(canceled, inIDOrder(read, ids)...)
		return nil
	})
	if err != nil {
		return nil, unavailable(err)
	}
	return canceled, nil
}

// CancelResting cancels a resting order of the account by its client, under
// its instrument's lock (the lock settlement matches under, so a quantity is
// either filled or released, never both): the order becomes canceled with
// no cancel reason, finished now, and what it still holds goes back to
// available in one release ledger transaction, with the balance's version
// and outbox row; the outbox entries are relayed after the commit, as
// Settle relays its own. It returns the canceled order as History reads it.
//
// An order of the account that is not resting (filled, canceled, rejected)
// fails with a *orders.NotCancelableError (orders.ErrNotCancelable) naming
// its status; an order the table does not hold for the account (another
// account's, a pending one, or none) with orders.ErrNotFound. Other failures
// wrap orders.ErrUnavailable.
func (s *Settler) CancelResting(ctx context.Context, account, orderID string) (orders.Order, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	unavailable := func(err error) error {
		return fmt.Errorf("%w: cancel %s: %w", orders.ErrUnavailable, orderID, err)
	}
	var (
		canceled orders.Order
		outbox   []orders.OutboxEntry
	)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var symbol string
		if err := tx.QueryRow(ctx, cancelFindSQL, orderID, account).Scan(&symbol); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", orders.ErrNotFound, orderID)
			}
			return unavailable(err)
		}
		rows, err := tx.Query(ctx, settleInstrumentsSQL, []string{symbol})
		if err != nil {
			return unavailable(err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return unavailable(err)
		}
		var status, asset, holdText string
		if err := tx.QueryRow(ctx, cancelReadSQL, orderID).Scan(&status, &asset, &holdText); err != nil {
			return unavailable(err)
		}
		if !orders.Status(status).Resting() {
			return &orders.NotCancelableError{OrderID: orderID, Status: orders.Status(status)}
		}
		hold, err := orders.ParseExact(holdText)
		if err != nil {
			return unavailable(err)
		}
		var version int64
		found := false
		rows, err = tx.Query(ctx, settleLockSQL, []string{account}, []string{asset})
		if err != nil {
			return unavailable(err)
		}
		for rows.Next() {
			var acc, as, available, held string
			if err := rows.Scan(&acc, &as, &version, &available, &held); err != nil {
				rows.Close()
				return unavailable(err)
			}
			found = true
		}
		if err := rows.Err(); err != nil {
			return unavailable(err)
		}
		if !found && hold.IsPos() {
			return unavailable(fmt.Errorf("the order holds %s %s but its account has no such balance", hold, asset))
		}
		if _, err := tx.Exec(ctx, cancelWriteSQL, orderID); err != nil {
			return unavailable(err)
		}
		if hold.IsPos() {
			// The release moves the hold back to available on the balance
			// row: one change of its version, no ledger transaction (it
			// changes no total), and the write's outbox row, listing it at
			// the version reached.
			name := orders.BalanceName(account, asset)
			rows, err := tx.Query(ctx, settleBalancesSQL, []string{name}, []string{account}, []string{asset},
				[]string{hold.String()}, []string{hold.Neg().String()}, []int64{1}, s.balances.row, s.balances.values)
			if err != nil {
				return unavailable(err)
			}
			if outbox, err = pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry]); err != nil {
				return unavailable(err)
			}
		}
		rows, err = tx.Query(ctx, orderSelectSQL+` WHERE o.id = $1 AND o.account_id = $2`, orderID, account)
		if err != nil {
			return unavailable(err)
		}
		list, err := collectOrders(rows)
		if err != nil {
			return err
		}
		if len(list) != 1 {
			return unavailable(fmt.Errorf("read back %d rows", len(list)))
		}
		canceled = list[0]
		// The cancel's order.canceled event, as settlement writes its own.
		rows, err = tx.Query(ctx, settleEventsSQL, []string{orderID}, []string{}, []string{})
		if err != nil {
			return unavailable(err)
		}
		events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
		if err != nil {
			return unavailable(err)
		}
		outbox = append(outbox, events...)
		return nil
	})
	if err != nil {
		var notCancelable *orders.NotCancelableError
		if errors.Is(err, orders.ErrNotFound) || errors.As(err, &notCancelable) || errors.Is(err, orders.ErrUnavailable) {
			return orders.Order{}, err
		}
		return orders.Order{}, unavailable(err)
	}
	s.logger.Info("resting order canceled", "order_id", orderID, "account", account)
	if s.relay != nil && len(outbox) > 0 {
		s.relay.Relay(ctx, outbox)
	}
	return canceled, nil
}

// CancelAllResting cancels every resting order of the account, of the
// instrument symbol or of every instrument when symbol is empty, each as
// CancelResting does in a transaction of its own, and returns the orders it
// canceled. An order that stopped resting meanwhile (filled by a match
// between the listing and its cancel) is left out; the first other failure
// stops it, returned with the orders canceled until then.
func (s *Settler) CancelAllResting(ctx context.Context, account, symbol string) ([]orders.Order, error) {
	ids, err := restingIDs(ctx, s.db, account, symbol)
	if err != nil {
		return nil, err
	}
	var canceled []orders.Order
	for _, id := range ids {
		order, err := s.CancelResting(ctx, account, id)
		switch {
		case errors.Is(err, orders.ErrNotCancelable), errors.Is(err, orders.ErrNotFound):
			continue
		case err != nil:
			return canceled, err
		}
		canceled = append(canceled, order)
	}
	return canceled, nil
}
