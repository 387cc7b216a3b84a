package postgres

import (
	"context"

	"github.com/ordergate/ordergate/orders"
)

// SettleTogether settles the orders in one batch, in this order, with
// token 1, and returns each order's own failure.
func SettleTogether(ctx context.Context, s *Settler, placed []orders.Order) ([]error, error) {
	batch := make([]*settleRequest, len(placed))
	for i, o := range placed {
		batch[i] = &settleRequest{ctx: ctx, order: o, token: 1, done: make(chan struct{})}
	}
	outcomes, err := s.settleTogether(ctx, batch)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(outcomes))
	for i, o := range outcomes {
		errs[i] = o.err
	}
	return errs, nil
}

// SetPageRows makes each read of a book return at most n orders until the
// test ends, so that takers read the book page by page.
func SetPageRows(t interface{ Cleanup(func()) }, n int32) {
	before := pageRows
	pageRows = n
	t.Cleanup(func() { pageRows = before })
}

// SetAfterFirstDecision makes f run between each batch's first decision
// and its balance locks until the test ends.
func SetAfterFirstDecision(t interface{ Cleanup(func()) }, f func()) {
	afterFirstDecision = f
	t.Cleanup(func() { afterFirstDecision = nil })
}

// SettleQueueInstruments is how many instruments have orders in flight or
// waiting in the settler's queue.
func SettleQueueInstruments(s *Settler) int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return len(s.queue.inFlight)
}

// OwnedOverlaps is how many of the settler's owned batches were decided
// while the write of the batch before was in flight.
func OwnedOverlaps(s *Settler) int64 { return s.owned.overlaps.Load() }

// OwnedLoads is how many books the settler loaded as an owner: at each
// TakeOver, and after each failed write.
func OwnedLoads(s *Settler) int64 { return s.owned.loads.Load() }

// SetOwnedJoined makes f run each time a Settle call joins an owner's
// queue (the owner's lock held: f must not call the settler) until the
// test ends.
func SetOwnedJoined(t interface{ Cleanup(func()) }, f func()) {
	ownedJoined = f
	t.Cleanup(func() { ownedJoined = nil })
}

// SetBeforeOwnedWrite makes f run before each write of an owner's batch
// until the test ends.
func SetBeforeOwnedWrite(t interface{ Cleanup(func()) }, f func()) {
	beforeOwnedWrite = f
	t.Cleanup(func() { beforeOwnedWrite = nil })
}

// OwnedExtended is how many requests the settler's owners decided into a
// batch already decided, while the write before it was in flight.
func OwnedExtended(s *Settler) int64 { return s.owned.extended.Load() }

// SettleEventsSQL is settle_events.sql, for the tests that run it on its own.
var SettleEventsSQL = settleEventsSQL

// SettlementWriteSQL is each statement of an owner's write and of its read
// before, as the owner sends it, by its file's name, for the tests that run
// them on their own.
var SettlementWriteSQL = func() map[string]string {
	_, texts := SharedStatements()
	texts["settle_owned_fence"] = settleOwnedFenceSQL
	texts["settle_owned_makers"] = settleOwnedMakersSQL
	texts["settle_read_plans"] = settleReadPlansSQL
	return texts
}()

// SharedStatements is each statement the owner's path and the locked path
// both send, by its file's name: as the locked path and the cancels send
// it, and as the owner does.
func SharedStatements() (locked, owned map[string]string) {
	named := func(s settleStatements) map[string]string {
		texts := make(map[string]string)
		for name, text := range s.byFile() {
			texts[name] = *text
		}
		return texts
	}
	return named(lockedStatements), named(ownedStatements)
}

// SortedBalanceKeys is sortedKeys on parallel arrays: the order, without
// repeats, in which a write names the balances it locks.
func SortedBalanceKeys(accounts, assets []string) ([]string, []string) {
	keys := make([]balanceKey, len(accounts))
	for i := range accounts {
		keys[i] = balanceKey{account: accounts[i], asset: assets[i]}
	}
	return sortedKeys(keys)
}
