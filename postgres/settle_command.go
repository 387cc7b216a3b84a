package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/orders"
)

// Instrument commands (orders.KindCommand): cancels of resting orders, and
// later amends, that travel the instrument's queue in the account's lane.
// The instrument's owner decides one in its batch, in sequence with the
// orders around it, on its book in memory, and writes it with the batch
// (the order canceled, its hold moved back to available on the balance
// row, its order.canceled event and the outbox): its book stays the one
// PostgreSQL holds, so nothing is loaded again. A settler that does not own
// the instrument cancels under the instrument's lock (CancelResting), with
// the same outcome.

// CommandOutcome is what an instrument command decided.
type CommandOutcome struct {
	// Canceled are the resting orders it canceled, in book order; none when
	// the order was no longer resting (filled or canceled before it), or
	// not the account's.
	Canceled []string
}

// Command decides the instrument command cmd, the job id's, under the
// lease whose fencing token is token, and returns once what it decided is
// committed. A cancel of an order that is not resting, or not the
// account's, cancels nothing and is no failure: the order's row tells what
// became of it. A failure is returned for the queue to retry.
func (s *Settler) Command(ctx context.Context, id string, cmd orders.Command, token int64) (CommandOutcome, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if st := s.ownedBookOf(ctx, cmd.Symbol); st != nil {
		// The batch keys a request by an order id: the cancel's is the
		// order's, so a cancel never shares a batch with its order's
		// settlement (nextBatch) and waits for a write in flight that
		// inserts it (ownedFlight.blocks).
		key := cmd.OrderID
		if cmd.Kind != orders.CommandCancel {
			key = id
		}
		req := &settleRequest{ctx: ctx, order: orders.Order{ID: key, Account: cmd.Account, Symbol: cmd.Symbol},
			token: token, done: make(chan struct{}), command: &cmd}
		result, unowned, err := s.settleOwned(ctx, st, req)
		if !unowned {
			if err != nil {
				return CommandOutcome{}, fmt.Errorf("postgres: command %s (%s): %w", id, cmd.Kind, err)
			}
			s.logger.Info("instrument command decided by its owner", "command_id", id, "kind", cmd.Kind,
				"account", cmd.Account, "symbol", cmd.Symbol, "canceled", len(result.canceled))
			s.relayInOrder(ctx, result)
			return CommandOutcome{Canceled: result.canceled}, nil
		}
		// Given up before it was decided: under the instrument's lock once
		// the owner's writes landed, as a handed-back order (settleJoined).
		// At once, a cancel-all would overtake the write in flight of an
		// order sequenced before it, which then rests after it.
		select {
		case <-st.released:
		case <-ctx.Done():
			return CommandOutcome{}, fmt.Errorf("postgres: command %s (%s): waiting for the owner to give up: %w",
				id, cmd.Kind, context.Cause(ctx))
		}
	}
	return s.commandLocked(ctx, cmd)
}

// commandLocked decides cmd under the instrument's lock, as a settler that
// does not own the instrument settles its orders.
func (s *Settler) commandLocked(ctx context.Context, cmd orders.Command) (CommandOutcome, error) {
	switch cmd.Kind {
	case orders.CommandCancel:
		canceled, err := s.CancelResting(ctx, cmd.Account, cmd.OrderID)
		switch {
		case errors.Is(err, orders.ErrNotCancelable), errors.Is(err, orders.ErrNotFound):
			return CommandOutcome{}, nil
		case err != nil:
			return CommandOutcome{}, err
		}
		return CommandOutcome{Canceled: []string{canceled.ID}}, nil
	case orders.CommandCancelAll:
		canceled, err := s.CancelAllResting(ctx, cmd.Account, cmd.Symbol)
		ids := make([]string, len(canceled))
		for i, order := range canceled {
			ids[i] = order.ID
		}
		return CommandOutcome{Canceled: ids}, err
	}
	return CommandOutcome{}, unsettleable(fmt.Errorf("%w: command kind %q", orders.ErrMalformedOrder, cmd.Kind))
}

// decideCommand decides an instrument command in an owner's batch, on the
// book as the orders before it in the batch left it.
func (w *batchWork) decideCommand(req *settleRequest) (batchOutcome, error) {
	cmd := req.command
	book := w.books[cmd.Symbol]
	if w.owned == nil || book == nil {
		// The locked path reads its books page by page: a command is not
		// decided there (commandLocked is).
		return batchOutcome{}, fmt.Errorf("command %s on %s outside its owner's book", cmd.Kind, cmd.Symbol)
	}
	if cmd.Kind != orders.CommandCancel && cmd.Kind != orders.CommandCancelAll {
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: command kind %q", orders.ErrMalformedOrder, cmd.Kind))}, nil
	}
	var targets []*bookOrder
	for _, side := range []orders.Side{orders.Buy, orders.Sell} {
		for _, o := range *book.side(side) {
			if o.account == cmd.Account && (cmd.Kind == orders.CommandCancelAll || o.id == cmd.OrderID) {
				targets = append(targets, o)
			}
		}
	}
	canceled := make([]string, 0, len(targets))
	for _, o := range targets {
		w.cancelResting(book, o)
		canceled = append(canceled, o.id)
	}
	return batchOutcome{result: settlement{status: orders.StatusCanceled, canceled: canceled}}, nil
}

// cancelResting records the cancel of a resting order by its client: it
// leaves the book with no cancel reason, what filled stays filled, and its
// whole hold moves back to available on its balance row (a release: no
// ledger transaction, one change of the row's version).
func (w *batchWork) cancelResting(book *instrumentBook, o *bookOrder) {
	o = w.claim(book, o, make(map[string]*bookOrder, 1))
	if o.hold.IsPos() {
		asset := book.in.Base
		if o.side == orders.Buy {
			asset = book.in.Quote
		}
		w.record(orders.Release(o.id, o.account, asset, o.hold))
	}
	// As the market cancels a maker, with no reason: a taker of this batch
	// that came to rest has its row inserted canceled.
	w.cancelMaker(book, o, orders.CanceledMaker{OrderID: o.id, Account: o.account, Release: o.hold})
}

// blocks reports whether batch must wait for the write in flight to land
// before it is decided: it holds an order the write inserts, or the write
// inserts no order (only commands) whose row the next batch's read could
// probe to tell whether the write's balance moves are committed.
func (f *ownedFlight) blocks(batch []*settleRequest) bool {
	return f.holdsAny(batch) || f.probe == "" && len(f.deltas) > 0
}

// RegisterOwnerMetrics registers orders_settlement_book_loads_total: the
// books the settler loaded as an instrument's owner, one at each TakeOver
// and one after each write PostgreSQL refused because the book or a
// balance moved behind the owner. Cancels the owner decides itself load
// nothing; a count rising with the cancels means they reach the book
// behind its back.
func (s *Settler) RegisterOwnerMetrics(registerer prometheus.Registerer) error {
	return registerer.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "orders_settlement_book_loads_total",
		Help: "Books loaded by instruments' owners: one at each take-over, one after each write refused because the book or a balance moved behind the owner.",
	}, func() float64 { return float64(s.owned.loads.Load()) }))
}
