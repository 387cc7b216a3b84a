package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

// RestingOrders are the account's resting orders, of the instrument symbol
// or of every instrument when symbol is empty, oldest first, as Order reads
// them: what a cancel-all sends its instruments' owners to cancel.
func (h *History) RestingOrders(ctx context.Context, account, symbol string) ([]orders.Order, error) {
	ids, err := restingIDs(ctx, h.db, account, symbol)
	if err != nil {
		return nil, err
	}
	return h.Orders(ctx, account, ids)
}

// restingIDs lists the ids of the account's resting orders, of the
// instrument symbol or of every instrument when symbol is empty, oldest
// first (cancel_list.sql).
func restingIDs(ctx context.Context, db *pgxpool.Pool, account, symbol string) ([]string, error) {
	rows, err := db.Query(ctx, cancelListSQL, account, symbol)
	if err != nil {
		return nil, fmt.Errorf("%w: list resting orders of %s: %w", orders.ErrUnavailable, account, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("%w: list resting orders of %s: %w", orders.ErrUnavailable, account, err)
	}
	return ids, nil
}

// Orders are the account's orders of the ids that have a row, as Order
// reads each, in the order given; another account's are left out.
func (h *History) Orders(ctx context.Context, account string, ids []string) ([]orders.Order, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := h.db.Query(ctx, orderSelectSQL+` WHERE o.id = ANY($1) AND o.account_id = $2`, ids, account)
	if err != nil {
		return nil, fmt.Errorf("%w: read %d orders of %s: %w", orders.ErrUnavailable, len(ids), account, err)
	}
	read, err := collectOrders(rows)
	if err != nil {
		return nil, fmt.Errorf("%w: read %d orders of %s: %w", orders.ErrUnavailable, len(ids), account, err)
	}
	return inIDOrder(read, ids), nil
}

// inIDOrder lists the orders read in the order of ids; an id none of them
// has is left out.
func inIDOrder(read []orders.Order, ids []string) []orders.Order {
	byID := make(map[string]orders.Order, len(read))
	for _, order := range read {
		byID[order.ID] = order
	}
	list := make([]orders.Order, 0, len(read))
	for _, id := range ids {
		if order, ok := byID[id]; ok {
			list = append(list, order)
		}
	}
	return list
}
