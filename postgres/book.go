package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

//go:embed sql/book_levels.sql
var bookLevelsSQL string

// Book reads instruments' order books from the orders table.
type Book struct {
	db *pgxpool.Pool
}

// NewBook reads from db.
func NewBook(db *pgxpool.Pool) *Book { return &Book{db: db} }

// Levels returns the instrument's book, at most depth price levels a side,
// amounts on its grid (prices with the tick size's decimals, quantities
// with the lot size's). The caller knows the instrument exists: an unknown
// one reads as an empty book.
func (b *Book) Levels(ctx context.Context, in orders.Instrument, depth int) (orders.Depth, error) {
	book := orders.Depth{Symbol: in.Symbol, Bids: []orders.DepthLevel{}, Asks: []orders.DepthLevel{}}
	if depth < 1 || depth > orders.MaxBookDepth {
		return book, fmt.Errorf("%w: depth %d is outside 1..%d", orders.ErrInvalidQuery, depth, orders.MaxBookDepth)
	}
	rows, err := b.db.Query(ctx, bookLevelsSQL, in.Symbol, depth)
	if err != nil {
		return book, fmt.Errorf("%w: read the book of %s: %w", orders.ErrUnavailable, in.Symbol, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			side, price, quantity string
			count                 int
		)
		if err := rows.Scan(&side, &price, &quantity, &count); err != nil {
			return book, fmt.Errorf("%w: read the book of %s: %w", orders.ErrUnavailable, in.Symbol, err)
		}
		level := orders.DepthLevel{Orders: count}
		if level.Price, err = exactAmount(price, in.TickSize.Scale()); err != nil {
			return book, fmt.Errorf("postgres: book of %s: %w", in.Symbol, err)
		}
		if level.Quantity, err = exactAmount(quantity, in.LotSize.Scale()); err != nil {
			return book, fmt.Errorf("postgres: book of %s: %w", in.Symbol, err)
		}
		if orders.Side(side) == orders.Buy {
			book.Bids = append(book.Bids, level)
		} else {
			book.Asks = append(book.Asks, level)
		}
	}
	if err := rows.Err(); err != nil {
		return book, fmt.Errorf("%w: read the book of %s: %w", orders.ErrUnavailable, in.Symbol, err)
	}
	return book, nil
}

// exactAmount parses a trimmed NUMERIC text and pads it to scale: a stored
// amount is shown exactly or not at all. Padding never rounds.
func exactAmount(text string, scale int) (decimal.Decimal, error) {
	d, err := orders.ParseExact(text)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("stored amount: %w", err)
	}
	return d.Pad(scale), nil
}
