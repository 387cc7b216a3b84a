package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"

	"github.com/ordergate/ordergate/orders"
)

// An owner of an instrument (issue 24): the one settler that, holding the
// instrument's lease, matches its book in memory. TakeOver raises the
// instrument row's owner_epoch to the lease's and loads the book; from then
// on its orders settle without the instrument's lock across round trips
// and without reading the book back. Each batch:
//
//   - reads, outside any transaction, which of its orders have a row
//     (redeliveries), who holds their client order ids, and its takers'
//     balances;
//   - decides in memory against the book as the batch before it left it,
//     committed or not;
//   - writes in one round trip: BEGIN, the fence (the instrument row
//     locked, its owner_epoch the owner's, else SETTLEFENCED), the balance
//     locks, the funds guard, the makers' guard (the resting orders it
//     fills are as the book says, else SETTLESTALE: a cancel behind the
//     owner's back), the writes, COMMIT.
//
// Batch N+1 reads and decides while batch N's write is in flight; its
// write starts once N committed, so one write at a time per instrument,
// and a Settle call returns only after its batch committed. When a write
// fails, the batches decided after it are dropped with it, the book is
// loaded again, and the orders of the failed batch settle again one at a
// time (those of the dropped batch in the next batch): no decision stands
// on a book PostgreSQL did not keep.

var (
	//go:embed sql/settle_owned_take_over.sql
	settleOwnedTakeOverSQL string
	//go:embed sql/settle_owned_epoch.sql
	settleOwnedEpochSQL string
	//go:embed sql/settle_owned_resting.sql
	settleOwnedRestingSQL string
	//go:embed sql/settle_owned_fence.sql
	settleOwnedFenceSQL string
	//go:embed sql/settle_owned_makers.sql
	settleOwnedMakersSQL string
	//go:embed sql/settle_owned_lock_timeout.sql
	settleOwnedLockTimeoutSQL string
	//go:embed sql/settle_read_plans.sql
	settleReadPlansSQL string
)

const fencedCodeWord = "SETTLEFENCED"

// ErrFenced matches every failure that means another owner holds the
// instrument at a newer epoch (FencedError): the settler is no owner of it
// any more, and the job is not completed.
var ErrFenced = errors.New("postgres: the instrument has a newer owner")

// FencedError is PostgreSQL's refusal of an owner: Epoch is the
// instrument's owner_epoch as PostgreSQL holds it (0 when it could not be
// read), at or above the one refused. A worker whose lease counter was lost
// (a Redis failover) takes the lease again above it.
type FencedError struct {
	Symbol string
	Epoch  int64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("postgres: instrument %s is owned at epoch %d", e.Symbol, e.Epoch)
}

func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// ownedFence is what an owner's batch writes behind: its transaction's
// opening and the guard of the makers it changes (settle_write.go queues
// them).
type ownedFence struct {
	symbol string
	epoch  int64
	terms  string
	opened bool
}

// queueOpening queues BEGIN and the fence, once per transaction.
func (f *ownedFence) queueOpening(b *pgx.Batch) {
	if f.opened {
		return
	}
	f.opened = true
	b.Queue(beginSQL)
	b.Queue(settleOwnedFenceSQL, f.symbol, f.epoch, f.terms)
}

// queueMakersGuard queues the check that the resting orders the batch
// changes or relied on are what the owner's book held (nothing when
// there are none).
func (f *ownedFence) queueMakersGuard(b *pgx.Batch, w *batchWork) {
	n := len(w.makers) + len(w.seen)
	if n == 0 {
		return
	}
	ids, remaining, holds := make([]string, 0, n), numericArrayOf(n), numericArrayOf(n)
	for _, m := range w.makers {
		ids = append(ids, m.id)
		remaining.decimal(m.believedRemaining)
		holds.decimal(m.believedHold)
	}
	for _, o := range w.seen {
		ids = append(ids, o.id)
		remaining.decimal(o.remaining)
		holds.decimal(o.hold)
	}
	b.Queue(settleOwnedMakersSQL, ids, remaining.param(), holds.param())
}

// relyOn records the resting order a decision of an owner's batch relied
// on without changing it, when one did: the best opposing order a
// post-only order was rejected for or a market order was priced below the
// minimum notional at, the account's own order self-trade
// prevention stopped at. A cancel behind the owner's back that took it
// away must make the write fail as a fill of it would. An order the batch
// changed is guarded as a maker already, one it rested has no row yet.
func (w *batchWork) relyOn(order orders.Order, d orders.Decision, page []*bookOrder) {
	var relied *bookOrder
	switch {
	case d.RejectReason == orders.ReasonPostOnlyWouldTake && len(page) > 0,
		d.CancelReason == orders.CancelBelowMinNotional && len(page) > 0:
		relied = page[0]
	case d.CancelReason == orders.CancelSelfTradePrevented:
		for _, o := range page {
			if o.account == order.Account {
				relied = o
				break
			}
		}
	}
	if relied != nil && relied.generation != w.generation {
		w.seen = append(w.seen, relied)
	}
}

// ownedPage is the part of a side of a whole book a taker limited to worst
// can reach: its best orders up to the first out of reach.
func ownedPage(side []*bookOrder, s orders.Side, worst decimal.Decimal) []*bookOrder {
	for i, o := range side {
		if s == orders.Sell && o.price.Cmp(worst) > 0 || s == orders.Buy && o.price.Cmp(worst) < 0 {
			return side[:i]
		}
	}
	return side
}

// ownedBook is an instrument the settler owns.
type ownedBook struct {
	symbol string
	epoch  int64
	// ready is closed once TakeOver loaded the book or failed; released
	// once GiveUp cleared PostgreSQL's owner mark (or could not), after
	// which the requests it handed back settle under the instrument's lock.
	ready, released chan struct{}

	mu sync.Mutex
	// waiting are the requests for the next batch; redo those to settle
	// one at a time first, after a failed write.
	waiting, redo []*settleRequest
	driving       bool
	// wake tells a driver waiting for its write in flight that a request
	// joined.
	wake chan struct{}
	// exited is closed when the driver that runs now stops.
	exited chan struct{}
	// fenced, once PostgreSQL refused the owner, fails every request.
	fenced error
	// leaving: GiveUp was called; requests not decided yet go back to the
	// locked path.
	leaving bool

	// The driver's alone (TakeOver's before it starts).
	fence       ownedFence
	book        *instrumentBook
	provisional int64
	generation  int64
	// stale: a write failed; load the book before deciding again.
	stale bool
	// relayed is closed once the last batch answered has relayed its
	// outbox (answer).
	relayed <-chan struct{}
}

// ownedState is the settler's owned instruments.
type ownedState struct {
	mu    sync.Mutex
	books map[string]*ownedBook
	// overlaps counts batches decided while the write before was in
	// flight; extended the requests decided into such a batch after it
	// (gather); loads the books loaded (TakeOver and after a failed write).
	overlaps, extended, loads atomic.Int64
}

// ownedFlight is a batch decided on an owner's book: its writes in flight,
// or about to be.
type ownedFlight struct {
	batch    []*settleRequest
	outcomes []batchOutcome
	w        *batchWork
	// base is the book the batch decided on, to decide again on locked
	// balances; snapshot and lockSet are its balances as estimated and the
	// rows it locks.
	base            *instrumentBook
	baseProvisional int64
	existing        map[string]bool
	holders         map[clientOrderKey]string
	snapshot        map[balanceKey]*lockedBalance
	takerKeys       map[balanceKey]bool

	// What a batch decided after this one, before it commits, must know:
	// the orders it writes (probe: one of them, whose row tells whether it
	// committed), the client order ids they hold, and what it moves on
	// each balance row (available, held).
	ids            map[string]bool
	probe          string
	pendingHolders map[clientOrderKey]string
	deltas         map[balanceKey][2]*ledgerAmount

	// writing and committed are when the batch's write started and
	// committed (the stages' metrics; zero when unmeasured or nothing was
	// written).
	writing, committed time.Time

	done chan struct{}
	err  error
}

// TakeOver makes the settler the owner of the instrument symbol at epoch
// (the fencing token of the worker's lease on the instrument's queue): in
// one transaction it raises the instrument row's owner_epoch to epoch and
// loads the instrument and every resting order of it into memory. From
// then on the settler's Settle calls of the instrument settle as its owner
// (settle_owned.go), until GiveUp. A row at epoch or above fails with a
// *FencedError (errors.Is ErrFenced) naming PostgreSQL's epoch. Settle calls
// of the instrument that arrive meanwhile wait for the book; those already
// settling under the instrument's lock finish first, within takeOverWait:
// a batch, or another connection's transaction, holding the instrument
// longer fails the take-over with ErrTakeOverBlocked (nothing changed; try
// again), and the whole take-over ends within settleTimeout.
func (s *Settler) TakeOver(ctx context.Context, symbol string, epoch int64) error {
	s.GiveUp(symbol)
	st := &ownedBook{symbol: symbol, epoch: epoch, ready: make(chan struct{}), released: make(chan struct{}),
		wake: make(chan struct{}, 1)}
	s.owned.mu.Lock()
	if s.owned.books == nil {
		s.owned.books = make(map[string]*ownedBook)
	}
	s.owned.books[symbol] = st
	s.owned.mu.Unlock()
	err := s.takeOver(ctx, st)
	if err != nil {
		s.owned.mu.Lock()
		if s.owned.books[symbol] == st {
			delete(s.owned.books, symbol)
		}
		s.owned.mu.Unlock()
	}
	close(st.ready)
	return err
}

func (s *Settler) takeOver(ctx context.Context, st *ownedBook) error {
	// A batch of the instrument already under its lock would write behind
	// the book loaded: let it end.
	waited := time.After(takeOverWait)
	for s.lockedInFlight(st.symbol) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres: take over %s: %w", st.symbol, context.Cause(ctx))
		case <-waited:
			return fmt.Errorf("postgres: take over %s: a batch under its lock still runs after %s: %w",
				st.symbol, takeOverWait, ErrTakeOverBlocked)
		case <-time.After(time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	return takeOverBlocked(s.loadOwned(ctx, st, true))
}

// lockedInFlight reports whether a batch of the instrument settles under its
// lock, or orders wait for one.
func (s *Settler) lockedInFlight(symbol string) bool {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return s.queue.inFlight[symbol] != nil
}

// GiveUp ends the settler's ownership of symbol: it waits for the batches
// decided to be written, drops the book, clears PostgreSQL's mark that the
// instrument has an owner (unless a newer owner took it over: its epoch
// fences this one), and the Settle calls of symbol settle under the
// instrument's lock again, those waiting included.
func (s *Settler) GiveUp(symbol string) {
	s.owned.mu.Lock()
	st := s.owned.books[symbol]
	delete(s.owned.books, symbol)
	s.owned.mu.Unlock()
	if st == nil {
		return
	}
	<-st.ready
	st.mu.Lock()
	st.leaving = true
	exited := st.exited
	if !st.driving {
		exited = nil
		st.handBack()
	}
	st.mu.Unlock()
	if exited != nil {
		<-exited
	}
	s.logGivenUpBook(st)
	st.mu.Lock()
	fenced := st.fenced
	st.mu.Unlock()
	if fenced == nil {
		s.release(st)
	}
	close(st.released)
}

// ownedBookOf is the settler's owned instrument symbol, loaded, or nil.
func (s *Settler) ownedBookOf(ctx context.Context, symbol string) *ownedBook {
	s.owned.mu.Lock()
	st := s.owned.books[symbol]
	s.owned.mu.Unlock()
	if st == nil {
		return nil
	}
	select {
	case <-st.ready:
	case <-ctx.Done():
		return nil
	}
	s.owned.mu.Lock()
	defer s.owned.mu.Unlock()
	if s.owned.books[symbol] != st {
		return nil
	}
	return st
}

// loadOwned loads the instrument and its book: raising the epoch first
// (TakeOver) or checking it is still the owner's (after a failed write).
func (s *Settler) loadOwned(ctx context.Context, st *ownedBook, takeOver bool) error {
	fail := func(err error) error { return fmt.Errorf("postgres: load the book of %s: %w", st.symbol, err) }
	instruments := make(map[string]orders.Instrument, 1)
	var epoch int64
	var terms string
	var found bool
	var bids, asks []*bookOrder
	var readErr error
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if takeOver {
			if _, err := tx.Exec(ctx, settleOwnedLockTimeoutSQL, takeOverWait.String()); err != nil {
				return err
			}
			err := tx.QueryRow(ctx, settleOwnedTakeOverSQL, st.symbol, st.epoch).Scan(new(string))
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			found = err == nil
		}
		rows, err := tx.Query(ctx, settleInstrumentsSQL, []string{st.symbol})
		if err != nil {
			return err
		}
		err = scanInstruments(rows, instruments, &readErr)
		rows.Close()
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, settleOwnedEpochSQL, st.symbol).Scan(&epoch, &terms); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: %s", orders.ErrUnknownInstrument, st.symbol)
			}
			return err
		}
		if takeOver && !found || !takeOver && epoch != st.epoch {
			return &FencedError{Symbol: st.symbol, Epoch: epoch}
		}
		rows, err = tx.Query(ctx, settleOwnedRestingSQL, st.symbol)
		if err != nil {
			return err
		}
		var o bookOrder
		var side, price, remaining, hold string
		_, err = pgx.ForEachRow(rows, []any{&side, &o.id, &o.account, &price, &remaining, &o.sequence, &hold}, func() error {
			o.side = orders.Side(side)
			var errs [3]error
			o.price, errs[0] = orders.ParseExact(price)
			o.remaining, errs[1] = orders.ParseExact(remaining)
			o.hold, errs[2] = orders.ParseExact(hold)
			if err := errors.Join(errs[:]...); err != nil {
				return fmt.Errorf("resting order %s: %w", o.id, err)
			}
			resting := o
			if o.side == orders.Buy {
				bids = append(bids, &resting)
			} else {
				asks = append(asks, &resting)
			}
			return nil
		})
		return err
	})
	if err == nil {
		err = readErr
	}
	if err != nil {
		if errors.Is(err, ErrFenced) {
			return err
		}
		return fail(err)
	}
	in, ok := instruments[st.symbol]
	if !ok {
		return fail(fmt.Errorf("%w: %s", orders.ErrUnknownInstrument, st.symbol))
	}
	s.owned.loads.Add(1)
	st.fence = ownedFence{symbol: st.symbol, epoch: st.epoch, terms: terms}
	st.book = &instrumentBook{in: in, bids: bids, asks: asks}
	st.provisional, st.stale = 1<<62, false
	return nil
}
