package emq

import "sync"

// localWakes tells a client's claim loops of the jobs that became pending
// through the same client: an admission, a promotion, a reaped lease. A
// loop that found its queue empty waits on its queue's wake as well as its
// idle poll, so a job admitted by the process that works the queue (the
// settlement's relay admitting coherence jobs, which every worker
// consumes) is claimed at once, and the idle poll can be long: it is left
// to find what other processes admitted. A queue server wake
// (WakeOnAdmission) covers those, for the few queues that want it.
type localWakes struct {
	mu    sync.Mutex
	byKey map[string]chan struct{}
}

// wake returns the channel the next wake of queue closes. A loop takes it
// before its claim, so a job that turns pending between the claim and the
// wait closes a channel the loop already holds: no wake is lost.
func (w *localWakes) wake(queue string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey == nil {
		w.byKey = map[string]chan struct{}{}
	}
	ch, ok := w.byKey[queue]
	if !ok {
		ch = make(chan struct{})
		w.byKey[queue] = ch
	}
	return ch
}

// signal wakes every loop waiting on queue; without one waiting it costs
// a map lookup.
func (w *localWakes) signal(queue string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch, ok := w.byKey[queue]; ok {
		close(ch)
		delete(w.byKey, queue)
	}
}
