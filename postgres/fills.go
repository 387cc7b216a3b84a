package postgres

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

//go:embed sql/fills_list.sql
var fillsListSQL string

// Fills reads accounts' fills from the trades table: each trade as one of
// its two accounts sees it (orders.Execution).
type Fills struct {
	db *pgxpool.Pool
}

// NewFills reads from db.
func NewFills(db *pgxpool.Pool) *Fills { return &Fills{db: db} }

// List returns one page of the account's executions, newest first. Trade
// ids grow with every trade, so ordering by id is ordering by time; each
// page is a range scan of trades_maker_account and trades_taker_account
// or, for one order, of trades_maker and trades_taker. An order that is not
// the account's (another account's, or none at all) has no executions
// here: the page is empty, as for an order that never traded.
func (f *Fills) List(ctx context.Context, account string, q orders.ExecutionQuery) (orders.ExecutionPage, error) {
	if q.Limit == 0 {
		q.Limit = orders.DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > orders.MaxListLimit {
		return orders.ExecutionPage{}, fmt.Errorf("%w: limit %d is outside 1..%d", orders.ErrInvalidQuery, q.Limit, orders.MaxListLimit)
	}
	before := int64(math.MaxInt64)
	if q.After != "" {
		id, err := orders.ParseFillID(q.After)
		if err != nil {
			return orders.ExecutionPage{}, fmt.Errorf("%w: after: %w", orders.ErrInvalidQuery, err)
		}
		before = id
	}
	var order *string
	if q.OrderID != "" {
		if _, err := orders.ParseOrderID(q.OrderID); err != nil {
			return orders.ExecutionPage{}, fmt.Errorf("%w: order id: %w", orders.ErrInvalidQuery, err)
		}
		order = &q.OrderID
	}
	// One row more than the page tells whether another page follows, so the
	// last page carries no cursor, as History.List.
	rows, err := f.db.Query(ctx, fillsListSQL, account, before, order, q.Limit+1)
	if err != nil {
		return orders.ExecutionPage{}, fmt.Errorf("%w: list fills: %w", orders.ErrUnavailable, err)
	}
	defer rows.Close()
	var list []orders.Execution
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return orders.ExecutionPage{}, err
		}
		list = append(list, e)
	}
	if err := rows.Err(); err != nil {
		return orders.ExecutionPage{}, fmt.Errorf("%w: read fills: %w", orders.ErrUnavailable, err)
	}
	page := orders.ExecutionPage{Executions: list}
	if len(list) > q.Limit {
		page.Executions = list[:q.Limit]
		page.Next = page.Executions[q.Limit-1].ID
	}
	return page, nil
}

// scanExecution reads one fill row of fills_list.sql's columns: the trade
// from the account's side, on the instrument's grid as an order's amounts
// (scanOrder).
func scanExecution(row pgx.Row) (orders.Execution, error) {
	// One allocation for every column scanned, as in scanOrder: Scan is an
	// interface call, so each variable would escape on its own.
	c := new(struct {
		e                               orders.Execution
		tradeID                         int64
		liquidity, takerSide            string
		price, quantity, fee            string
		created                         time.Time
		tickScale, lotScale, quoteScale int
	})
	e := &c.e
	if err := row.Scan(&c.tradeID, &e.OrderID, &e.Symbol, &c.liquidity, &c.takerSide, &c.price, &c.quantity, &c.fee,
		&c.created, &c.tickScale, &c.lotScale, &c.quoteScale, &e.FeeAsset); err != nil {
		return orders.Execution{}, fmt.Errorf("%w: read fills: %w", orders.ErrUnavailable, err)
	}
	e.ID, e.Liquidity, e.CreatedAt = orders.FillID(c.tradeID), orders.Liquidity(c.liquidity), c.created.UTC()
	e.Side = orders.Side(c.takerSide)
	if e.Liquidity == orders.LiquidityMaker {
		e.Side = e.Side.Opposite()
	}
	for _, field := range []struct {
		text  string
		scale int
		into  *decimal.Decimal
	}{
		{c.price, c.tickScale, &e.Price},
		{c.quantity, c.lotScale, &e.Quantity},
		{c.fee, c.quoteScale, &e.Fee},
	} {
		var err error
		if *field.into, err = exactAmount(field.text, field.scale); err != nil {
			return orders.Execution{}, fmt.Errorf("postgres: fill %s: %w", e.ID, err)
		}
	}
	return *e, nil
}
