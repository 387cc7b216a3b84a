package postgres

// SettleQueueLength is how many orders wait for the settler's next
// transaction: tests use it to build a batch of their choosing.
func SettleQueueLength(s *Settler) int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	n := 0
	for _, sq := range s.queue.inFlight {
		n += len(sq.waiting)
	}
	return n
}

// SetWindowRows makes each read of a book return at most n orders until the
// test ends, so that takers read the book page by page.
func SetWindowRows(t interface{ Cleanup(func()) }, n int32) {
	before := windowRows
	windowRows = n
	t.Cleanup(func() { windowRows = before })
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
