package postgres

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/instruments_read.sql
	instrumentsReadSQL string
	//go:embed sql/instrument_set_status.sql
	instrumentSetStatusSQL string
)

// Instruments reads and writes the instruments table.
type Instruments struct {
	db *pgxpool.Pool
}

// NewInstruments uses db.
func NewInstruments(db *pgxpool.Pool) *Instruments { return &Instruments{db: db} }

// ReadInstruments reads the whole table, by symbol.
func (s *Instruments) ReadInstruments(ctx context.Context) (map[string]orders.Instrument, error) {
	rows, err := s.db.Query(ctx, instrumentsReadSQL)
	if err != nil {
		return nil, fmt.Errorf("postgres: load instruments: %w", err)
	}
	defer rows.Close()
	loaded := make(map[string]orders.Instrument)
	for rows.Next() {
		var in orders.Instrument
		var tick, lot, minNotional, reference, last, makerFee, takerFee, band, status string
		if err := rows.Scan(&in.Symbol, &in.Base, &in.Quote, &tick, &lot, &minNotional, &reference,
			&last, &makerFee, &takerFee, &band, &status); err != nil {
			return nil, fmt.Errorf("postgres: load instruments: %w", err)
		}
		// NUMERIC(38,18) renders with 18 decimals; trimming restores the grid's own scale.
		for _, field := range []struct {
			text   string
			target *decimal.Decimal
		}{{tick, &in.TickSize}, {lot, &in.LotSize}, {minNotional, &in.MinNotional}, {reference, &in.ReferencePrice},
			{last, &in.LastPrice}, {makerFee, &in.MakerFeeBps}, {takerFee, &in.TakerFeeBps}, {band, &in.PriceBandPercent}} {
			if field.text == "" {
				continue // no trade yet: LastPrice stays zero
			}
			value, err := orders.ParseExact(field.text)
			if err != nil {
				return nil, fmt.Errorf("postgres: instrument %s: %w", in.Symbol, err)
			}
			*field.target = value.Trim(0)
		}
		in.Halted = status == "halted"
		loaded[in.Symbol] = in
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: load instruments: %w", err)
	}
	return loaded, nil
}

// SetHalted halts or resumes trading in an instrument.
func (s *Instruments) SetHalted(ctx context.Context, symbol string, halted bool) error {
	status := "trading"
	if halted {
		status = "halted"
	}
	tag, err := s.db.Exec(ctx, instrumentSetStatusSQL, symbol, status)
	if err != nil {
		return fmt.Errorf("postgres: set %s %s: %w", symbol, status, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", orders.ErrUnknownInstrument, symbol)
	}
	return nil
}
