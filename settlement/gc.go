package settlement

import (
	"runtime/debug"
)

// GCPercent is the garbage collector's target a worker process runs with
// unless the environment sets GOGC: the heap may grow to five times what
// is live between collections instead of twice.
//
// A worker's live heap is small (the owned books, the orders in flight,
// the connections' buffers: tens of MB) while it allocates about 85 KB per
// order it settles (the batches' parameters, the relay's events, the queue's
// replies), so at Go's default of 100 it collects every 20-odd MB, some 40
// times over the bench's 10,000 orders, and the collector took 12-16 % of
// the workers' CPU (their CPU profile, docs/performance.md). At 400 it
// collects a fifth as often for a few tens of MB more per process.
const GCPercent = 400

// TuneGC sets the collector's target to GCPercent unless getenv("GOGC")
// sets one (the runtime read it at start), and returns what puts the
// previous target back.
func TuneGC(getenv func(string) string) (restore func()) {
	if getenv("GOGC") != "" {
		return func() {}
	}
	previous := debug.SetGCPercent(GCPercent)
	return func() { debug.SetGCPercent(previous) }
}
