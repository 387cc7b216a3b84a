package postgres

// SettleQueueLength is how many orders wait for the settler's next
// transaction: tests use it to build a batch of their choosing.
func SettleQueueLength(s *Settler) int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return len(s.queue.waiting)
}

// SetWindowRows makes each read of a book return at most n orders until the
// test ends, so that takers read the book page by page.
func SetWindowRows(t interface{ Cleanup(func()) }, n int32) {
	before := windowRows
	windowRows = n
	t.Cleanup(func() { windowRows = before })
}
