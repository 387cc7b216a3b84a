package settlement

import (
	"context"

	"github.com/ordergate/ordergate/postgres"
)

// The worker's InstrumentOwner is PostgreSQL's fence of each instrument
// (issue 24). Until (*postgres.Settler).TakeOver and GiveUp exist, it fences
// nothing. To connect it, return settler from postgresOwner, and read the
// epoch with errors.As(err, &fenced) for a *postgres.FencedError in
// fencedEpoch.

// postgresOwner is the InstrumentOwner of the settler's instruments.
func postgresOwner(settler *postgres.Settler) InstrumentOwner { return unfenced{} }

// fencedEpoch is PostgreSQL's epoch of the instrument when err says it is
// fenced at or above the token the worker took it over with.
func fencedEpoch(err error) (int64, bool) { return 0, false }

// unfenced takes over and gives up instruments without a fence.
type unfenced struct{}

func (unfenced) TakeOver(context.Context, string, int64) error { return nil }
func (unfenced) GiveUp(string)                                 {}
