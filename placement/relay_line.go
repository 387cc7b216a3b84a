package placement

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// An owner's batches relay in the order they committed, so that each
// account's events rows reach its log in their source's order (a row
// relayed early finds a gap and fills it from the outbox, a PostgreSQL
// read a row). Waiting for the whole relay of the batch before (its
// coherence jobs and its append's round trip) cost each batch one relay's
// latency more when batches came quickly. RelayInTurn keeps the order
// with less: a batch waits only until the one before has put its appends
// in the relay's line, and the line sends the appends in the order they
// joined it, all those waiting in one round trip while the one before is
// in flight (as a database's group commit does). A source is one
// account's events on one instrument, and an owner's batch is one
// instrument's, so there is a line per instrument: one instrument's
// appends wait for no other's round trip. The coherence jobs need
// no order (their fill is conditional on the version) and go at once.

// turnWait bounds how long a relay waits for the one before it to take
// its place in line before it goes anyway: a relay that hangs must not
// hold every later batch back, and an events row appended early only
// finds a gap it fills from the outbox.
const turnWait = 5 * time.Second

// RelayInTurn relays entries as Relay does, their events after those of
// the relay before, which closes turn once they are in line: see
// orders.TurnRelayer. inLine is called once, when the events are in the
// line (or when the relay gives up before).
func (r *OutboxRelay) RelayInTurn(ctx context.Context, entries []orders.OutboxEntry, turn <-chan struct{}, inLine func()) {
	var once sync.Once
	letNext := func() { once.Do(inLine) }
	defer letNext()
	if len(entries) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	events, others := splitEvents(entries)
	var (
		carried      []orders.OutboxEntry
		coherenceErr error
		admitting    sync.WaitGroup
	)
	if len(others) > 0 {
		admitting.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, relayTimeout)
			defer cancel()
			carried, coherenceErr = r.carryCoherence(ctx, others, false)
		})
	}
	// Rendered before the turn comes: it needs nothing of the batch before.
	rendered := r.renderEvents(events)
	waitTurn(turn)
	var call *lineCall
	if len(rendered.appends) > 0 {
		call = r.lineOf(rendered.sent[0].Name).join(rendered.appends)
	}
	letNext()

	appendCtx, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	appended, appendErr := rendered.carried, error(nil)
	if call != nil {
		answers, err := call.wait(appendCtx)
		appended, appendErr = r.appendedEvents(appendCtx, rendered, answers, err)
	}
	admitting.Wait()
	r.relayed(appendCtx, entries, append(carried, appended...), errors.Join(coherenceErr, appendErr))
}

// lineOf is the line of the instrument an events row's name is of.
func (r *OutboxRelay) lineOf(name string) *appendLine {
	symbol := name[strings.LastIndexByte(name, ':')+1:]
	r.mu.Lock()
	defer r.mu.Unlock()
	line := r.lines[symbol]
	if line == nil {
		if r.lines == nil {
			r.lines = map[string]*appendLine{}
		}
		line = &appendLine{logs: r.eventsLogs}
		r.lines[symbol] = line
	}
	return line
}

// waitTurn waits for turn, turnWait at most.
func waitTurn(turn <-chan struct{}) {
	if turn == nil {
		return
	}
	timer := time.NewTimer(turnWait)
	defer timer.Stop()
	select {
	case <-turn:
	case <-timer.C:
	}
}

// appendLine sends the log appends that join it in the order they joined:
// one sender at a time, each round trip carrying every append that joined
// while the one before was in flight.
type appendLine struct {
	logs    EventLog
	mu      sync.Mutex
	waiting []*lineCall
	sending bool
}

// lineCall is one relay's appends in line, and their answers once sent.
type lineCall struct {
	appends []emq.LogAppend
	done    chan struct{}
	// answers and err are AppendLogs's of appends, set before done closes.
	answers []emq.LogAppended
	err     error
}

// join puts appends at the end of the line.
func (l *appendLine) join(appends []emq.LogAppend) *lineCall {
	call := &lineCall{appends: appends, done: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waiting = append(l.waiting, call)
	if !l.sending {
		l.sending = true
		go l.send()
	}
	return call
}

// send sends what waits, a round trip at a time, until nothing does.
func (l *appendLine) send() {
	for {
		l.mu.Lock()
		calls := l.waiting
		l.waiting = nil
		if len(calls) == 0 {
			l.sending = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		l.sendCalls(calls)
	}
}

// sendCalls sends calls' appends, in order, in one AppendLogs (a round
// trip per shard of the logs), and answers each call.
func (l *appendLine) sendCalls(calls []*lineCall) {
	// A caller may have stopped waiting; what is in line goes anyway, or
	// the relays behind it would find gaps.
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	var appends []emq.LogAppend
	for _, call := range calls {
		appends = append(appends, call.appends...)
	}
	answers, err := l.logs.AppendLogs(ctx, appends)
	for _, call := range calls {
		n := len(call.appends)
		call.err = err
		if len(answers) >= n {
			call.answers, answers = answers[:n:n], answers[n:]
		} else {
			call.answers = nil
		}
		close(call.done)
	}
}

// wait returns the answers to the call's appends: nil and the error when
// the call failed as a whole, or ctx ended first.
func (c *lineCall) wait(ctx context.Context) ([]emq.LogAppended, error) {
	select {
	case <-c.done:
		return c.answers, c.err
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
