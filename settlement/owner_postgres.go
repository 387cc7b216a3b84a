package settlement

import (
	"errors"

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
