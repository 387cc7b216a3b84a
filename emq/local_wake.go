package emq

import (
	"slices"
	"sync"
)

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
	byKey map[string]*localWake
}

// maxWakeGroups bounds the groups a wake carries to the claim after it.
const maxWakeGroups = 8

// localWake is one wake of a queue: done is closed by the next signal, and
// groups, set before, are the groups of the jobs that signal admitted (as
// a wake token names one, admit.lua): the claim that follows names their
// lanes, so that one script run takes the jobs rather than a first run
// only learning the lanes at the head of the rotation.
type localWake struct {
	done   chan struct{}
	groups []string
}

// woken returns the groups of the signal that closed done; nil while it is
// open.
func (w *localWake) woken() []string {
	select {
	case <-w.done:
		return w.groups
	default:
		return nil
	}
}

// wake returns the next wake of queue. A loop takes it before its claim, so
// a job that turns pending between the claim and the wait closes a wake
// the loop already holds: no wake is lost.
func (w *localWakes) wake(queue string) *localWake {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byKey == nil {
		w.byKey = map[string]*localWake{}
	}
	wake, ok := w.byKey[queue]
	if !ok {
		wake = &localWake{done: make(chan struct{})}
		w.byKey[queue] = wake
	}
	return wake
}

// signal wakes every loop waiting on queue, telling them the groups of the
// jobs admitted (none for a promotion or a reap); without one waiting it
// costs a map lookup.
func (w *localWakes) signal(queue string, groups ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wake, ok := w.byKey[queue]; ok {
		for _, group := range groups {
			wake.groups = withWakeGroup(wake.groups, group)
		}
		close(wake.done)
		delete(w.byKey, queue)
	}
}

// withWakeGroup adds group to groups, the groups a wake carries, unless it
// is among them or they are maxWakeGroups already.
func withWakeGroup(groups []string, group string) []string {
	if len(groups) < maxWakeGroups && !slices.Contains(groups, group) {
		return append(groups, group)
	}
	return groups
}
