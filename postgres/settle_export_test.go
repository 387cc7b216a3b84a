package postgres

// SettleQueueLength is how many orders wait for the settler's next
// transaction: tests use it to build a batch of their choosing.
func SettleQueueLength(s *Settler) int {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	return len(s.queue.waiting)
}
