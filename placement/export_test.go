package placement

// CoherenceWaiting is how many deliveries wait for c's applier, so a test
// can know a batch has gathered before it lets the applier go on.
func CoherenceWaiting(c *BalanceCoherence) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

// ArchiveClaim is how long an archiver's claim of an account lasts.
const ArchiveClaim = archiveClaim
