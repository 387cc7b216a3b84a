package placement

import "time"

// CoherenceWaiting is how many deliveries wait for c's applier, so a test
// can know a batch has gathered before it lets the applier go on.
func CoherenceWaiting(c *BalanceCoherence) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// SweepBatch bounds the rows one sweep transaction takes.
const SweepBatch = sweepBatch

// ArchiveClaim is how long an archiver's claim of an account lasts.
const ArchiveClaim = archiveClaim

// ArchivePace is the least time between the starts of two passes of Run.
const ArchivePace = archivePace

// ArchiveRounds and EventChunk bound what one pass archives of an account:
// that many chunks of that many events.
const (
	ArchiveRounds = archiveRounds
	EventChunk    = eventChunk
)

// ArchiveBacklog reports whether a's last pass left accounts due.
func ArchiveBacklog(a *EventArchiver) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.backlog
}

// CarryWithoutMarking has r's Relay carry rows and leave their marking to a
// sweeping loop that never comes, until forget, which drops them unmarked:
// a process that died between a relay and its marking.
func CarryWithoutMarking(r *OutboxRelay) (forget func()) {
	r.mu.Lock()
	r.markers++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.markers--
		r.unmarked, r.dropped = nil, 0
	}
}

// SetKeyCacheClock has c read the time from now, before c is used.
func SetKeyCacheClock(c *KeyCache, now func() time.Time) { c.now = now }

// KeyRefreshersRunning is how many RefreshAhead loops c has running.
func KeyRefreshersRunning(c *KeyCache) int { return int(c.refreshers.Load()) }

// KeyRefreshesPending is how many keys c has queued or is refreshing.
func KeyRefreshesPending(c *KeyCache) int {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	return len(c.refreshDue)
}

// DueAfter is how long an account's new events wait before they are due,
// at an archive delay.
var DueAfter = dueAfter
