package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
)

// The locked path and owned instruments (migration 0018): a settler that is
// no owner of an instrument (the locked path, which locks the instrument
// for each batch) refuses to write on one that has a live owner, in
// PostgreSQL, under the instrument's lock: routing alone (a queue per
// instrument, one owner each) is not what keeps the two apart. An owner's
// GiveUp clears the mark, unless a newer owner took the instrument over,
// and the locked path may settle the instrument again.

var (
	//go:embed sql/settle_unowned.sql
	settleUnownedSQL string
	//go:embed sql/settle_owned_give_up.sql
	settleOwnedGiveUpSQL string
)

const ownedCodeWord = "SETTLEOWNED"

// ErrOwned matches the locked path's refusal of an instrument that has an
// owner: nothing was written, and the order should reach the owner (the
// queue retries it).
var ErrOwned = errors.New("postgres: the instrument has an owner; only it settles the instrument's orders")

// giveUpTimeout bounds GiveUp's write: the mark stays set if PostgreSQL is
// unreachable, and the locked path refuses the instrument until its next
// owner gives it up.
const giveUpTimeout = 5 * time.Second

// isOwned reports whether err is settle_unowned.sql's refusal.
func isOwned(err error) bool { return raisedWith(err, ownedCodeWord) }

// ownedRefusal makes the locked path's refusal match ErrOwned.
func ownedRefusal(err error) error {
	if isOwned(err) && !errors.Is(err, ErrOwned) {
		return fmt.Errorf("%w: %w", ErrOwned, err)
	}
	return err
}

// release clears the instrument's owner mark after its owner gave it up.
func (s *Settler) release(st *ownedBook) {
	ctx, cancel := context.WithTimeout(context.Background(), giveUpTimeout)
	defer cancel()
	if _, err := s.db.Exec(ctx, settleOwnedGiveUpSQL, st.symbol, st.epoch); err != nil {
		s.logger.Warn("cannot mark a given-up instrument unowned; the locked path refuses it until its next owner gives it up",
			"symbol", st.symbol, "epoch", st.epoch, "err", err)
	}
}
