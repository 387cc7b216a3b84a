package orders

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/emq"
)

var (
	//go:embed sql/instruments_read.sql
	instrumentsReadSQL string
	//go:embed sql/instrument_set_status.sql
	instrumentSetStatusSQL string
)

// Instrument is a tradable pair and the rules its orders must follow.
type Instrument struct {
	Symbol string
	Base   string
	Quote  string
	// TickSize is the price grid; its decimals are the price's allowed decimals.
	TickSize decimal.Decimal
	// LotSize is the quantity grid; its decimals are the quantity's allowed decimals.
	LotSize decimal.Decimal
	// MinNotional is the least quantity × price an order may have, in the quote asset.
	MinNotional decimal.Decimal
	// ReferencePrice prices market orders.
	ReferencePrice decimal.Decimal
	Halted         bool
}

// Check applies the instrument's rules to a command whose fields are already
// well-formed, and returns every rule it breaks.
func (in Instrument) Check(cmd PlaceCommand) []FieldError {
	var refused []FieldError
	refuse := func(field, format string, args ...any) {
		refused = append(refused, FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if in.Halted {
		refuse("symbol", "instrument %s is halted; it accepts no orders", in.Symbol)
	}
	onGrid := func(field string, amount, grid decimal.Decimal, gridName string) bool {
		switch {
		case !amount.IsPos():
			refuse(field, "must be greater than zero")
		case amount.Scale() > grid.Scale():
			refuse(field, "has %d decimals; %s allows at most %d", amount.Scale(), in.Symbol, grid.Scale())
		default:
			_, remainder, err := amount.QuoRem(grid)
			switch {
			case err != nil: // the quotient overflows the decimal type
				refuse(field, "is too large for %s", in.Symbol)
			case !remainder.IsZero():
				refuse(field, "must be a multiple of the %s %s", gridName, grid)
			default:
				return true
			}
		}
		return false
	}
	quantityOK := onGrid("quantity", cmd.Quantity, in.LotSize, "lot size")
	price, priceOK := in.ReferencePrice, true
	if cmd.Type == Limit {
		price, priceOK = cmd.Price, onGrid("price", cmd.Price, in.TickSize, "tick size")
	}
	if quantityOK && priceOK {
		notional, err := cmd.Quantity.Mul(price)
		switch {
		case err != nil:
			refuse("quantity", "quantity × price is too large")
		case notional.Cmp(in.MinNotional) < 0:
			refuse("quantity", "quantity × price is %s %s, under the minimum notional %s %s",
				notional.Trim(0), in.Quote, in.MinNotional.Trim(0), in.Quote)
		}
	}
	return refused
}

// ErrUnknownInstrument: no instrument has the symbol.
var ErrUnknownInstrument = errors.New("orders: unknown instrument")

// Instruments is an in-process copy of the instruments table, replaced whole
// on each refresh so readers never lock.
type Instruments struct {
	db      *pgxpool.Pool
	current atomic.Pointer[map[string]Instrument]
}

// LoadInstruments reads the instruments table.
func LoadInstruments(ctx context.Context, db *pgxpool.Pool) (*Instruments, error) {
	instruments := &Instruments{db: db}
	if err := instruments.Refresh(ctx); err != nil {
		return nil, err
	}
	return instruments, nil
}

// Refresh reads the table again.
func (s *Instruments) Refresh(ctx context.Context) error {
	rows, err := s.db.Query(ctx, instrumentsReadSQL)
	if err != nil {
		return fmt.Errorf("orders: load instruments: %w", err)
	}
	defer rows.Close()
	loaded := make(map[string]Instrument)
	for rows.Next() {
		var in Instrument
		var tick, lot, minNotional, reference, status string
		if err := rows.Scan(&in.Symbol, &in.Base, &in.Quote, &tick, &lot, &minNotional, &reference, &status); err != nil {
			return fmt.Errorf("orders: load instruments: %w", err)
		}
		// NUMERIC(38,18) renders with 18 decimals; trimming restores the grid's own scale.
		for _, field := range []struct {
			text   string
			target *decimal.Decimal
		}{{tick, &in.TickSize}, {lot, &in.LotSize}, {minNotional, &in.MinNotional}, {reference, &in.ReferencePrice}} {
			value, err := decimal.Parse(field.text)
			if err != nil {
				return fmt.Errorf("orders: instrument %s: %w", in.Symbol, err)
			}
			*field.target = value.Trim(0)
		}
		in.Halted = status == "halted"
		loaded[in.Symbol] = in
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("orders: load instruments: %w", err)
	}
	s.current.Store(&loaded)
	return nil
}

// Lookup returns the instrument with the symbol.
func (s *Instruments) Lookup(symbol string) (Instrument, error) {
	in, found := (*s.current.Load())[symbol]
	if !found {
		return Instrument{}, fmt.Errorf("%w: %s", ErrUnknownInstrument, symbol)
	}
	return in, nil
}

// KeepFresh refreshes every interval until ctx ends, so a halt reaches the
// gateway within one interval; a failed refresh keeps the last good copy.
func (s *Instruments) KeepFresh(ctx context.Context, interval time.Duration, failed func(error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
				failed(err)
			}
		}
	}
}

// InstrumentsTable names instruments on the coherence lanes.
const InstrumentsTable = "instruments"

// SetInstrumentHalted halts or resumes trading in an instrument, then
// broadcasts the change so gateways reread their copy at once instead of at
// their next refresh. The broadcast is at-most-once: its failure is returned
// but the halt stands, and the periodic refresh delivers it.
func SetInstrumentHalted(ctx context.Context, db *pgxpool.Pool, lanes *emq.Client, symbol string, halted bool) error {
	status := "trading"
	if halted {
		status = "halted"
	}
	tag, err := db.Exec(ctx, instrumentSetStatusSQL, symbol, status)
	if err != nil {
		return fmt.Errorf("orders: set %s %s: %w", symbol, status, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", ErrUnknownInstrument, symbol)
	}
	if lanes == nil {
		return nil
	}
	if err := lanes.Broadcast(ctx, InstrumentsTable, InstrumentsTable+":"+symbol); err != nil {
		return fmt.Errorf("orders: %s is %s, but the broadcast failed (gateways see it at their next refresh): %w", symbol, status, err)
	}
	return nil
}

// FollowBroadcasts rereads the instruments whenever the broadcast lane says
// one changed. A burst of halts fills the bounded ring and the excess is
// dropped and counted; one reread covers them all.
func (s *Instruments) FollowBroadcasts(ctx context.Context, lanes *emq.Client, failed func(error), opts ...emq.SubscribeOption) (*emq.Subscription, error) {
	return lanes.Subscribe(ctx, InstrumentsTable, 16, func(string) {
		if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			failed(err)
		}
	}, opts...)
}
