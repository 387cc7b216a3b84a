package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// Queued cancels: the cancel of a resting order is an instrument command
// (orders.KindCommand) on the instrument's queue, in the account's lane,
// which the instrument's owner decides in sequence with the orders, on its
// book in memory (postgres.Settler.Command). The caller waits a bounded
// time for the decision, then reads the order's row.

// DefaultCancelWait is how long a cancel of a resting order waits for its
// instrument's owner to decide it (CANCEL_WAIT in the gateway): far above
// a batch's cycle (milliseconds) so an answer past it means a backlog or
// no owner, and well inside the request timeout (5 s by default; the
// wait never takes more than three quarters of what a request has left).
const DefaultCancelWait = 2 * time.Second

// commandPoll bounds the pause between two reads of a command job's state
// while a cancel waits for it; the pauses start at a millisecond and
// double, so a cancel decided at once is answered within a few.
const commandPoll = 50 * time.Millisecond

// WithQueuedCancels sends the cancels of resting orders through their
// instruments' queues and waits at most wait for each to be decided (a
// worker must be settling the queues). Without it, a Placer cancels a
// resting order itself under the instrument's lock (History.CancelResting),
// as a placer of tests and tools with no worker running needs.
func WithQueuedCancels(wait time.Duration) PlacerOption {
	return func(p *Placer) { p.cancelWait = wait }
}

// CancelUndecidedError: the cancel of resting orders is on their
// instruments' queues but was not decided within the placer's wait (a
// backlog, or no worker settling the instrument). Orders are the orders
// as they stand: those canceled already, and the resting ones whose cancel
// is still queued, in their current status. It is an answer, not a
// failure: the cancel stays queued, and reading the order tells when it
// is decided.
type CancelUndecidedError struct {
	Orders []orders.Order
}

func (e *CancelUndecidedError) Error() string {
	return fmt.Sprintf("placement: the cancel of %d orders is queued, not decided yet", len(e.Orders))
}

// cancelQueued cancels the account's resting order through its
// instrument's queue and answers it canceled once decided; a
// *NotCancelableError when it filled first or the market canceled it; a
// *CancelUndecidedError past the wait. A command that finished (done,
// dead, or withdrawn by a cancel-all) with the order still resting will
// cancel nothing: it is sent again once, under a key naming it, and when
// that one too finishes with the order resting, the cancel fails
// (orders.ErrUnavailable) rather than be answered queued.
func (p *Placer) cancelQueued(ctx context.Context, account string, order orders.Order) (orders.Order, error) {
	cmd := orders.Command{Kind: orders.CommandCancel, Account: account, Symbol: order.Symbol, OrderID: order.ID}
	dedup := orders.CancelDedupKey(order.ID)
	for sent := 1; ; sent++ {
		id, key, err := p.admitCommand(ctx, cmd, dedup)
		if err != nil {
			return orders.Order{}, err
		}
		finished := len(p.awaitCommands(ctx, map[string]string{id: order.Symbol})) == 0
		row, err := p.history.Order(ctx, account, order.ID)
		switch {
		case err != nil:
			return orders.Order{}, err
		case row.Status == orders.StatusCanceled && row.CancelReason == "":
			return withDefaults(row), nil
		case row.Status.Final():
			// Filled, or canceled by the market (a cancel reason): as the
			// cancel under the instrument's lock answers it.
			return orders.Order{}, &orders.NotCancelableError{OrderID: order.ID, Status: row.Status}
		case !finished:
			return orders.Order{}, &CancelUndecidedError{Orders: []orders.Order{withDefaults(row)}}
		case sent == 2:
			return orders.Order{}, fmt.Errorf("%w: the cancel of %s finished twice (the second command %s) with the order still %s",
				orders.ErrUnavailable, order.ID, id, row.Status)
		}
		dedup = key + "/" + id
	}
}

// commandRounds bounds how often admitCommand admits again behind a
// finished command that holds the dedup key.
const commandRounds = 3

// admitCommand puts cmd on its instrument's queue, in the account's lane,
// and returns its job's id and the dedup key that job holds. A retry of
// the same request (dedup, the command's dedup key; none: the job's own
// id) finds the first job and waits for it instead, unless that one
// finished: died, was withdrawn (a
// cancel-all's sweep of the lane), or is done, which the caller read the
// order resting before (a cancel done before that read canceled nothing;
// one done since decides nothing again). Then the command goes again,
// under a key naming the one it replaces, so a retry of that finds it in
// turn.
func (p *Placer) admitCommand(ctx context.Context, cmd orders.Command, dedup string) (id, key string, err error) {
	payload, err := cmd.Payload()
	if err != nil {
		return "", "", fmt.Errorf("orders: encode command: %w", err)
	}
	queue := p.queues.For(cmd.Symbol)
	for round := 1; ; round++ {
		job := emq.Job{ID: orders.NewCommandID(), Kind: orders.KindCommand, Group: cmd.Account, Payload: payload, DedupKey: dedup}
		admission, err := p.queues.admit(ctx, cmd.Symbol, job)
		var notReplicated *emq.NotReplicatedError
		if errors.As(err, &notReplicated) {
			// Admitted on the primary: waiting for its decision tells more
			// than refusing a cancel that may well happen.
			err = nil
		}
		if err != nil {
			return "", "", fmt.Errorf("%w: queue the %s of %s: %w", orders.ErrUnavailable, cmd.Kind, cmd.OrderID, err)
		}
		if !admission.Duplicate || dedup == "" || round == commandRounds {
			return admission.ID, dedup, nil
		}
		first, err := queue.Job(ctx, admission.ID)
		if err != nil || !finished(first.State) {
			return admission.ID, dedup, nil
		}
		dedup += "/" + admission.ID
	}
}

// awaitCommands waits until every command job (id → symbol) is finished
// (done, dead or withdrawn), at most the placer's wait and three quarters
// of what is left of ctx's time, and returns those that were not. A job
// the queue no longer knows (its finished record trimmed) is finished.
func (p *Placer) awaitCommands(ctx context.Context, jobs map[string]string) (unfinished map[string]bool) {
	wait := p.cancelWait
	if deadline, ok := ctx.Deadline(); ok {
		// What is left of the request's time after the wait reads the
		// orders' rows.
		wait = min(wait, time.Until(deadline)*3/4)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	unfinished = make(map[string]bool)
	for id, symbol := range jobs {
		wg.Go(func() {
			if !p.awaitCommand(ctx, p.queues.For(symbol), id) {
				mu.Lock()
				unfinished[id] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return unfinished
}

func (p *Placer) awaitCommand(ctx context.Context, queue *emq.Queue, id string) bool {
	pause := time.Millisecond
	for {
		job, err := queue.Job(ctx, id)
		switch {
		case errors.Is(err, emq.ErrNotFound):
			return true
		case err == nil && finished(job.State):
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
		pause = min(2*pause, commandPoll)
	}
}

// finished reports whether a command job in state will run no more.
func finished(state string) bool {
	return state == emq.StateDone || state == emq.StateDead || state == emq.StateCanceled
}

// cancelAllQueued cancels the account's resting orders (of symbol, or of
// every instrument when empty) through their instruments' queues: one
// cancel-all command per instrument with resting orders of the account,
// decided by its owner on its book in memory. It answers the orders it
// found resting that are canceled now; past the wait, a
// *CancelUndecidedError carrying those and the ones still resting. An
// instrument whose command finished with orders of the account still
// resting (the command died, or a cancel-all withdrew it) is sent one
// again; when that one too leaves them resting, the call fails
// (orders.ErrUnavailable) with the orders canceled.
func (p *Placer) cancelAllQueued(ctx context.Context, account, symbol string) ([]orders.Order, error) {
	resting, err := p.history.RestingOrders(ctx, account, symbol)
	if err != nil || len(resting) == 0 {
		return nil, err
	}
	var symbols []string
	ids := make([]string, len(resting))
	for i, order := range resting {
		ids[i] = order.ID
		if !slices.Contains(symbols, order.Symbol) {
			symbols = append(symbols, order.Symbol)
		}
	}
	var canceled []orders.Order
	for sent := 1; ; sent++ {
		jobs := make(map[string]string)
		for _, symbol := range symbols {
			cmd := orders.Command{Kind: orders.CommandCancelAll, Account: account, Symbol: symbol}
			id, _, err := p.admitCommand(ctx, cmd, "")
			if err != nil {
				return canceled, err
			}
			jobs[id] = symbol
		}
		waiting := make(map[string]bool)
		for id := range p.awaitCommands(ctx, jobs) {
			waiting[jobs[id]] = true
		}
		now, err := p.history.Orders(ctx, account, ids)
		if err != nil {
			return canceled, err
		}
		var undecided []orders.Order
		canceled, symbols = nil, nil
		for _, order := range now {
			switch {
			case order.Status == orders.StatusCanceled && order.CancelReason == "":
				canceled = append(canceled, withDefaults(order))
			case order.Status.Resting():
				undecided = append(undecided, withDefaults(order))
				if !waiting[order.Symbol] && !slices.Contains(symbols, order.Symbol) {
					symbols = append(symbols, order.Symbol)
				}
			}
		}
		switch {
		case len(symbols) > 0 && sent == 2:
			return canceled, fmt.Errorf("%w: the cancel-all of %s finished twice with %d orders still resting",
				orders.ErrUnavailable, strings.Join(symbols, ", "), len(undecided))
		case len(symbols) > 0:
			continue
		case len(undecided) > 0:
			return canceled, &CancelUndecidedError{Orders: slices.Concat(canceled, undecided)}
		}
		return canceled, nil
	}
}
