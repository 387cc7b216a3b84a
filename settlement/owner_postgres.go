package settlement

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ordergate/ordergate/postgres"
)

// The worker's InstrumentOwner is PostgreSQL's fence of each instrument:
// the settler takes the instrument over at the ownership's token, keeps its
// book in memory, and every batch it writes checks the token is still the
// instrument's epoch (docs/market.md).

// postgresOwner is the InstrumentOwner of the settler's instruments.
func postgresOwner(settler *postgres.Settler) InstrumentOwner { return settler }

// fencedEpoch is PostgreSQL's epoch of the instrument when err says it is
// fenced at or above the token the worker took it over with.
func fencedEpoch(err error) (int64, bool) {
	if fenced, ok := errors.AsType[*postgres.FencedError](err); ok {
		return fenced.Epoch, true
	}
	return 0, false
}

// takeOverRetry is how long a worker waits before it tries a blocked
// take-over again.
const takeOverRetry = 100 * time.Millisecond

// takeOver takes the instrument over at epoch, again for as long as ctx
// (the ownership) lasts when a stuck transaction holds the instrument past
// the take-over's bounded wait (postgres.ErrTakeOverBlocked): giving the
// queue up would leave it unowned for a grace, while the holder (an owner
// stopped mid-write, whose transaction ends after 5 s idle) lets go soon.
func takeOver(ctx context.Context, owner InstrumentOwner, symbol string, epoch int64, logger *slog.Logger) error {
	for {
		err := owner.TakeOver(ctx, symbol, epoch)
		if !errors.Is(err, postgres.ErrTakeOverBlocked) {
			return err
		}
		logger.Warn("taking an instrument over waits for a transaction holding it; trying again", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(takeOverRetry):
		}
	}
}
