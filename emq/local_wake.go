package emq

import "sync"

// localWakes tells a client's claim loops of the jobs that became pending
// through the same client: an admission, a promotion, a reaped lease. A
// loop that found its queue empty waits on its queue's wake as well as its
// idle poll, so a job admitted by the process that works the queue (a
// worker's relay admitting its coherence jobs) is claimed at once; the
// idle poll finds what other processes admitted (a gateway's relay admits
// coherence jobs too), and a queue server wake (WakeOnAdmission) does, for
// the few queues that want it.
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
