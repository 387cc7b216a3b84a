package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// History is the durable record of final orders (postgres.History).
type History interface {
	// Order is the account's final order with the id (orders.ErrNotFound
	// when the record has none).
	Order(ctx context.Context, account, id string) (orders.Order, error)
	// List is one page of the account's final orders, newest first.
	List(ctx context.Context, account string, q orders.ListQuery) (orders.Page, error)
	// RecordCanceled writes the canceled row of an order and returns the
	// status the row holds afterwards.
	RecordCanceled(ctx context.Context, order orders.Order) (orders.Status, error)
	// RecordAllCanceled writes the canceled rows of orders in one
	// transaction and returns the rows of those now canceled, leaving out
	// any whose row settlement wrote first; on an error it wrote none.
	RecordAllCanceled(ctx context.Context, list []orders.Order) ([]orders.Order, error)
	// CancelResting cancels the account's resting order with the id under
	// its instrument's lock, releasing its hold, and returns it canceled: a
	// *NotCancelableError when it is no longer resting (filled meanwhile),
	// ErrNotFound when the account has no such order.
	CancelResting(ctx context.Context, account, id string) (orders.Order, error)
	// CancelAllResting cancels every resting order of the account (of the
	// symbol, unless empty) as CancelResting does, and returns them.
	CancelAllResting(ctx context.Context, account, symbol string) ([]orders.Order, error)
	// RestingOrders are the account's resting orders (of the symbol, unless
	// empty), oldest first.
	RestingOrders(ctx context.Context, account, symbol string) ([]orders.Order, error)
	// Orders are the account's orders of the ids that have a row, in the
	// order given.
	Orders(ctx context.Context, account string, ids []string) ([]orders.Order, error)
}

// Placer admits orders onto their instruments' queues and reads them back:
// final orders from the orders table (its History), the others from the
// queues.
type Placer struct {
	queues *OrderQueues
	// history is nil for a Placer on the queue alone, which then knows no
	// final state but canceled and lists nothing.
	history History
	// cancelWait, above zero, sends the cancels of resting orders through
	// their instruments' queues and bounds the wait for their decision
	// (WithQueuedCancels).
	cancelWait time.Duration
}

// PlacerOption configures a Placer.
type PlacerOption func(*Placer)

// WithHistory reads final orders from history first and records cancels in
// it. Every Placer that serves clients needs it: without it a settled order
// shows as accepted and canceled orders are never listed.
func WithHistory(history History) PlacerOption {
	return func(p *Placer) { p.history = history }
}

// NewPlacer admits onto queues, each order onto its instrument's. A client
// order id is held for the queue's dedup retention, which Declare sets when
// the queues were made with emq.WithDedupRetention (DEDUP_RETENTION in the
// gateway), per account and instrument: the same id on another instrument
// is admitted, and settlement rejects it (duplicate_client_order_id).
func NewPlacer(queues *OrderQueues, opts ...PlacerOption) *Placer {
	p := &Placer{queues: queues}
	for _, opt := range opts {
		opt(p)
	}
	return p
}

// Declare registers the order job kind on the symbols' queues, and their
// dedup retention if the queues were made with one; call once at start.
// A queue not declared is declared at its first placement.
func (p *Placer) Declare(ctx context.Context, symbols ...string) error {
	return p.queues.Declare(ctx, symbols...)
}

// Queues are the instruments' queues the placer admits onto.
func (p *Placer) Queues() *OrderQueues { return p.queues }

// Placement is the outcome of Place.
type Placement struct {
	// Order is the order admitted, or on a replay the first one.
	Order orders.Order
	// Replayed is true when the command repeated an order placed before.
	Replayed bool
	// Take is what the placement's rate limit took; nil without one. It is
	// set on a refusal after the take too (a conflicting reuse of a client
	// order id, say): the permit was spent.
	Take *Take
	// JSON is the admitted order's JSON encoding, as the queue job carries
	// it; nil on a replay.
	JSON []byte
}

// PlaceOption tunes one Place.
type PlaceOption func(*emq.Job)

// NotReplicatedError: the order was admitted on the Redis primary, but
// fewer replicas than the queue asks for acknowledged it in time, so a
// failover now may lose it. Place returns it wrapped in
// orders.ErrUnavailable: a retry with the same client order id answers the
// order if it survived. It wraps the queue's error.
type NotReplicatedError struct {
	Acked, Wanted int
	queue         *emq.NotReplicatedError
}

func (e *NotReplicatedError) Error() string { return e.queue.Error() }

func (e *NotReplicatedError) Unwrap() error { return e.queue }

// Place mints an ORD id and admits the order in one script run. A command
// whose client order id the account used before returns the first order as
// a replay when it is the same request, or a *ConflictError when not. An
// empty rate-limit bucket is a *RateLimitedError, an admission too few
// replicas hold a *NotReplicatedError.
func (p *Placer) Place(ctx context.Context, cmd orders.PlaceCommand, opts ...PlaceOption) (Placement, error) {
	order, job, err := PlaceJob(cmd)
	if err != nil {
		return Placement{}, err
	}
	for _, opt := range opts {
		opt(&job)
	}
	admission, err := p.queues.admit(ctx, order.Symbol, job)
	if limited := rateLimited(err); limited != nil {
		return Placement{}, limited
	}
	take := takeOf(admission.Take)
	if notReplicated, ok := errors.AsType[*emq.NotReplicatedError](err); ok {
		if admission.Duplicate && admission.Fingerprint != job.Fingerprint {
			// Another request under the id: this one admitted nothing, so
			// how far the first has replicated is not its answer.
			return Placement{Take: take}, &orders.ConflictError{ClientOrderID: cmd.ClientOrderID, OrderID: admission.ID}
		}
		err = &NotReplicatedError{Acked: notReplicated.Acked, Wanted: notReplicated.Wanted, queue: notReplicated}
	}
	if err != nil {
		return Placement{}, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	if !admission.Duplicate {
		return Placement{Order: order, Take: take, JSON: job.Payload}, nil
	}
	// From here on the permit was spent: it goes back with the refusal too.
	if admission.Fingerprint != job.Fingerprint {
		return Placement{Take: take}, &orders.ConflictError{ClientOrderID: cmd.ClientOrderID, OrderID: admission.ID}
	}
	first, err := p.Order(ctx, cmd.Account, admission.ID)
	if err != nil {
		return Placement{Take: take}, err
	}
	return Placement{Order: first, Replayed: true, Take: take}, nil
}

// PlaceJob is the pending order cmd makes, under a new ORD id, and the queue
// job that admits it: exactly what Place admits, for callers that admit
// orders themselves (in bulk, say). A client order id is held for the
// queue's dedup retention. The order's order.accepted event is not the
// admission's: it comes with the order's first row (postgres.RenderEvents).
func PlaceJob(cmd orders.PlaceCommand) (orders.Order, emq.Job, error) {
	order, err := orders.NewOrder(cmd)
	if err != nil {
		return orders.Order{}, emq.Job{}, err
	}
	payload, err := order.Payload()
	if err != nil {
		return orders.Order{}, emq.Job{}, fmt.Errorf("orders: encode order %s: %w", order.ID, err)
	}
	return order, emq.Job{
		ID:          order.ID,
		Kind:        orders.KindPlace,
		Group:       cmd.Account,
		Payload:     payload,
		DedupKey:    cmd.Account + ":" + cmd.ClientOrderID,
		Fingerprint: cmd.Fingerprint(),
	}, nil
}

// Order returns the account's order with the id. Another account's order is
// ErrNotFound, exactly like a missing one, so ids leak nothing.
//
// The orders table is read first: a row there is final and holds the fill,
// and settlement writes it before it completes the job, so the queue's view
// is never fresher. Without a row the order is still in flight and the queue
// tells its status. PostgreSQL down is ErrUnavailable rather than a fallback
// to the queue, which would show a settled order as accepted.
func (p *Placer) Order(ctx context.Context, account, id string) (orders.Order, error) {
	if _, err := orders.ParseOrderID(id); err != nil {
		return orders.Order{}, fmt.Errorf("%w: %w", orders.ErrNotFound, err)
	}
	if p.history != nil {
		order, err := p.history.Order(ctx, account, id)
		if !errors.Is(err, orders.ErrNotFound) {
			return withDefaults(order), err
		}
	}
	order, err := p.queued(ctx, account, id)
	if (err == nil && order.Status != orders.StatusCanceled || errors.Is(err, orders.ErrNotFound)) && p.history != nil {
		// Settlement may have committed the order's row, and completed its
		// job, between the first read and the queue's: the queue's answer
		// stands only if PostgreSQL still has no row after it, so GET never
		// answers accepted (or active) for an order that is already settled,
		// nor not found for one whose finished record the queue trimmed or
		// lost meanwhile.
		settled, err := p.history.Order(ctx, account, id)
		if !errors.Is(err, orders.ErrNotFound) {
			return withDefaults(settled), err
		}
	}
	if err != nil || order.Status != orders.StatusCanceled || p.history == nil {
		return order, err
	}
	// Canceled in the queue with no row: the cancel's own write failed (see
	// Cancel). Writing it now keeps the order from vanishing from the listing
	// and, once the queue trims its finished record, from GET. It is the
	// row Cancel would have written, so a read may write it; a failure only
	// leaves it for the next read.
	stored, err := p.history.RecordCanceled(ctx, order)
	if err == nil {
		p.confirmCanceled(ctx, order.Symbol, id)
	}
	if err == nil && stored != orders.StatusCanceled {
		return p.history.Order(ctx, account, id)
	}
	return order, nil
}

// List returns one page of the account's final orders, newest first (see
// History.List). Orders still in flight live only in the queue and are not
// listed.
func (p *Placer) List(ctx context.Context, account string, q orders.ListQuery) (orders.Page, error) {
	if p.history == nil {
		return orders.Page{}, errors.New("orders: listing orders needs a Placer with a History")
	}
	page, err := p.history.List(ctx, account, q)
	for i := range page.Orders {
		page.Orders[i] = withDefaults(page.Orders[i])
	}
	return page, err
}

// withDefaults fills in what an order recorded before a field existed
// meant: an empty time in force is the type's default (a queue job admitted
// before time in force, or a row read without it).
func withDefaults(order orders.Order) orders.Order {
	if order.TimeInForce == "" && order.ID != "" {
		order.TimeInForce = orders.PlaceCommand{Type: order.Type}.TimeInForceOrDefault()
	}
	return order
}

// queued reads the account's order from the queues alone. The id does not
// name the instrument, so every instrument's queue is asked at once
// (OrderQueues.Symbols): one round trip of Redis calls per instrument,
// paid only by a look-up of an order PostgreSQL holds no row of yet (still
// pending, active, or dead), since Order reads the row first.
func (p *Placer) queued(ctx context.Context, account, id string) (orders.Order, error) {
	job, err := p.findJob(ctx, id)
	if errors.Is(err, emq.ErrNotFound) {
		return orders.Order{}, fmt.Errorf("%w: %s", orders.ErrNotFound, id)
	}
	if err != nil {
		return orders.Order{}, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	if job.Kind != orders.KindPlace || job.Group != account {
		return orders.Order{}, fmt.Errorf("%w: %s", orders.ErrNotFound, id)
	}
	return orderOf(job)
}

// findJob reads the job id from the instrument queue that holds it;
// emq.ErrNotFound when none does, and a queue's failure only when no other
// found it.
func (p *Placer) findJob(ctx context.Context, id string) (emq.JobInfo, error) {
	symbols := p.queues.Symbols()
	if len(symbols) == 0 {
		return emq.JobInfo{}, emq.ErrNotFound
	}
	type found struct {
		job emq.JobInfo
		err error
	}
	answers := make([]found, len(symbols))
	var wg sync.WaitGroup
	for i, symbol := range symbols {
		wg.Go(func() {
			job, err := p.queues.For(symbol).Job(ctx, id)
			answers[i] = found{job, err}
		})
	}
	wg.Wait()
	var failure error
	for _, answer := range answers {
		switch {
		case answer.err == nil:
			return answer.job, nil
		case !errors.Is(answer.err, emq.ErrNotFound) && failure == nil:
			failure = answer.err
		}
	}
	if failure != nil {
		return emq.JobInfo{}, failure
	}
	return emq.JobInfo{}, emq.ErrNotFound
}

// orderOf reads the order a job carries and its status from the job's state.
func orderOf(job emq.JobInfo) (orders.Order, error) {
	var order orders.Order
	if err := json.Unmarshal(job.Payload, &order); err != nil {
		return orders.Order{}, fmt.Errorf("orders: decode order %s: %w", job.ID, err)
	}
	status, known := statusOf(job.State)
	if !known {
		return orders.Order{}, fmt.Errorf("orders: order %s is in queue state %q, which no order status stands for", job.ID, job.State)
	}
	order = withDefaults(order)
	order.Status = status
	if status == orders.StatusCanceled && !job.Finished.IsZero() {
		canceled := job.Finished.UTC()
		order.CanceledAt, order.FinishedAt = &canceled, &canceled
	}
	return order, nil
}

// Cancel withdraws the account's order while it is pending, records it in
// the orders table, and returns it in status canceled. An order a worker
// holds or that is final is refused with a *NotCancelableError naming its
// status (canceling twice is refused too: the second call finds it
// canceled). Another account's order is ErrNotFound, exactly as in Order.
//
// The queue decides, and the row follows: writing the row first would make
// a cancel the queue then refuses (a worker took the order meanwhile) block
// that order's settlement. So when the row cannot be written the cancel has
// already happened, and Cancel returns a *CancelNotRecordedError carrying the
// canceled order; the next Order writes the row.
func (p *Placer) Cancel(ctx context.Context, account, id string) (orders.Order, error) {
	order, err := p.Order(ctx, account, id)
	if err != nil {
		return orders.Order{}, err
	}
	if order.Status.Final() {
		return orders.Order{}, &orders.NotCancelableError{OrderID: id, Status: order.Status}
	}
	if order.Status.Resting() && p.history != nil {
		return p.cancelResting(ctx, account, order)
	}
	err = p.queues.For(order.Symbol).Cancel(ctx, id)
	switch {
	case errors.Is(err, emq.ErrState):
		refusal := p.notCancelable(ctx, account, id, err)
		// A worker took the order between the read and the cancel and it
		// came to rest: it is still cancelable, in the book.
		var notCancelable *orders.NotCancelableError
		if errors.As(refusal, &notCancelable) && notCancelable.Status.Resting() && p.history != nil {
			return p.cancelResting(ctx, account, order)
		}
		return orders.Order{}, refusal
	case errors.Is(err, emq.ErrNotFound):
		// Its finished record was trimmed between the read and the cancel.
		return orders.Order{}, fmt.Errorf("%w: %s", orders.ErrNotFound, id)
	case err != nil:
		return orders.Order{}, fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	canceled, err := p.queued(ctx, account, id)
	if err != nil {
		// The cancel took effect; failing the call now would make the client
		// retry into a 409. Only the cancel time is lost (the row gets the
		// database's clock instead).
		canceled = order
		canceled.Status = orders.StatusCanceled
	}
	if p.history == nil {
		// No row to write: the queue's record is all there is.
		p.confirmCanceled(ctx, order.Symbol, id)
		return canceled, nil
	}
	stored, err := p.history.RecordCanceled(ctx, canceled)
	if err == nil {
		p.confirmCanceled(ctx, order.Symbol, id)
	}
	switch {
	case err != nil:
		return orders.Order{}, &orders.CancelNotRecordedError{Order: canceled, Err: err}
	case stored != orders.StatusCanceled:
		// Settlement recorded the order first (a worker whose lease had
		// expired settled it): the row is what happened to the money.
		return orders.Order{}, &orders.NotCancelableError{OrderID: id, Status: stored}
	}
	// Answer with the row as every later read shows it (its fill fields
	// on the instrument's grid); the queue's view stands if the read fails.
	if row, err := p.history.Order(ctx, account, id); err == nil {
		return withDefaults(row), nil
	}
	return canceled, nil
}

// cancelResting cancels the account's order, resting in the book: through
// its instrument's queue (cancelQueued) when the placer queues cancels, or
// else in PostgreSQL, under the instrument's lock, so a cancel and a match
// of the order take turns.
func (p *Placer) cancelResting(ctx context.Context, account string, order orders.Order) (orders.Order, error) {
	if p.cancelWait > 0 {
		return p.cancelQueued(ctx, account, order)
	}
	canceled, err := p.history.CancelResting(ctx, account, order.ID)
	return withDefaults(canceled), err
}

// cancelAllResting cancels the account's resting orders (of symbol, or of
// every instrument when empty) as cancelResting cancels one: through their
// instruments' queues (cancelAllQueued) when the placer queues cancels, or
// else in PostgreSQL under each instrument's lock.
func (p *Placer) cancelAllResting(ctx context.Context, account, symbol string) ([]orders.Order, error) {
	if p.cancelWait > 0 {
		return p.cancelAllQueued(ctx, account, symbol)
	}
	resting, err := p.history.CancelAllResting(ctx, account, symbol)
	for i := range resting {
		resting[i] = withDefaults(resting[i])
	}
	return resting, err
}

// symbolMember is the member of an order's queue payload (its JSON, the
// json tag of orders.Order.Symbol) that CancelAll matches a symbol on.
const symbolMember = "symbol"

// recordBatch is the most canceled rows CancelAll writes in one
// transaction: about as many orders as a settlement batch writes, so the
// order.canceled event each transaction appends stays as large as theirs.
const recordBatch = 500

// recordTimeout bounds the writing of one batch of canceled rows. It runs on
// even when the request's context ends (its client went away): the orders
// are withdrawn from the queue already, and only their rows make the
// cancels final.
const recordTimeout = 10 * time.Second

// PartialCancelError: CancelAll failed after canceling some orders. It wraps
// the failure (orders.ErrUnavailable when Redis or PostgreSQL did not
// answer); a second call cancels what is left.
type PartialCancelError struct {
	// Canceled are the orders canceled, each in status canceled.
	Canceled []orders.Order
	// Unconfirmed are orders withdrawn from the queue whose canceled rows
	// could not be written: until a row exists, a worker whose lease ran out
	// may still settle one (Cancel answers unavailable for the same reason).
	// GET tells what became of each, and writes its row.
	Unconfirmed []orders.Order
	Err         error
}

func (e *PartialCancelError) Error() string {
	return fmt.Sprintf("placement: cancel all: %d orders canceled and %d unconfirmed before it failed: %v", len(e.Canceled), len(e.Unconfirmed), e.Err)
}

func (e *PartialCancelError) Unwrap() error { return e.Err }

// CancelAll cancels every pending order of the account on the queues and
// every resting one in the book (only the symbol's, on its queue alone,
// unless symbol is empty: then on every instrument's queue in turn), and
// returns the orders it canceled, each once.
//
// Pending means wherever the queue keeps the order: in the account's lane,
// waiting out a retry backoff, or handed back to the front list by a
// stopping worker; emq.Queue.CancelGroup withdraws them in a few runs of one
// script, each bounded. Their canceled rows are then written in batches,
// each one transaction, and the resting orders are canceled in the book.
// Pending orders come first, so none of them can come to rest after the book
// was swept. An order a worker holds meanwhile is left out (it is no longer
// pending); it rests or finishes, and a second call cancels it if it rests.
//
// A failure midway returns a *PartialCancelError carrying what was
// canceled until then, unless nothing was.
func (p *Placer) CancelAll(ctx context.Context, account, symbol string) ([]orders.Order, error) {
	if p.history == nil {
		return nil, errors.New("orders: canceling all orders needs a Placer with a History")
	}
	var only *emq.PayloadMember
	if symbol != "" {
		only = &emq.PayloadMember{Name: symbolMember, Value: symbol}
	}
	symbols := []string{symbol}
	if symbol == "" {
		symbols = p.queues.Symbols()
	}
	// jobs are the orders withdrawn, commands the queued cancels withdrawn:
	// the resting orders those were for are canceled below.
	var jobs, commands []emq.JobInfo
	var failures []error
	for _, symbol := range symbols {
		withdrawn, err := p.queues.For(symbol).CancelGroup(ctx, account, only)
		if err != nil {
			failures = append(failures, fmt.Errorf("%w: %w", orders.ErrUnavailable, err))
		}
		// A queued command has no row to record: the sweep of the book
		// below, or its readmission, stands for it.
		var commandIDs []string
		for _, job := range withdrawn {
			if job.Kind != orders.KindPlace {
				commands = append(commands, job)
				commandIDs = append(commandIDs, job.ID)
				continue
			}
			jobs = append(jobs, job)
		}
		p.confirmCanceled(ctx, symbol, commandIDs...)
	}
	withdrawn := make([]orders.Order, 0, len(jobs))
	var unconfirmed []orders.Order
	for _, job := range jobs {
		order, err := orderOf(job)
		if err != nil {
			// Canceled in the queue, but no order can be recorded from it.
			failures = append(failures, err)
			unconfirmed = append(unconfirmed, orders.Order{ID: job.ID, Account: account, Status: orders.StatusCanceled})
			continue
		}
		withdrawn = append(withdrawn, order)
	}
	canceled := []orders.Order{}
	recorded := true
	for start := 0; start < len(withdrawn); start += recordBatch {
		batch := withdrawn[start:min(start+recordBatch, len(withdrawn))]
		if !recorded {
			unconfirmed = append(unconfirmed, batch...)
			continue
		}
		record, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
		rows, err := p.history.RecordAllCanceled(record, batch)
		cancel()
		if err != nil {
			// PostgreSQL failed: the rest are not written either, nor the
			// book swept. The call fails (503, with what it canceled and
			// withdrew): a 202 would promise a sweep nobody will do.
			recorded = false
			unconfirmed = append(unconfirmed, batch...)
			failures = append(failures, fmt.Errorf("%w: record the cancels of %d orders withdrawn from the queue: %w",
				orders.ErrUnavailable, len(batch), err))
			continue
		}
		for _, row := range rows {
			canceled = append(canceled, withDefaults(row))
		}
		p.confirmOrders(ctx, batch)
	}
	if !recorded {
		// The queued cancels withdrawn were to be replaced by the sweep of
		// the book: without it they go back on the queues.
		failures = append(failures, p.readmitCommands(ctx, commands)...)
	}
	var undecided *CancelUndecidedError
	if recorded {
		before := len(canceled)
		resting, err := p.cancelAllResting(ctx, account, symbol)
		canceled = append(canceled, resting...)
		if errors.As(err, &undecided) {
			undecided.Orders = slices.Concat(canceled[:before], undecided.Orders)
		} else if err != nil {
			failures = append(failures, err)
		}
	}
	if len(failures) == 0 {
		if undecided != nil {
			return canceled, undecided
		}
		return canceled, nil
	}
	err := errors.Join(failures...)
	if len(canceled) == 0 && len(unconfirmed) == 0 {
		return nil, err
	}
	return nil, &PartialCancelError{Canceled: canceled, Unconfirmed: unconfirmed, Err: err}
}

// confirmCanceled tells the queue of symbol that the cancels of ids are
// recorded (emq.Queue.ConfirmCanceled). A failure leaves them to
// RecordUnconfirmedCancels, which writes their rows again (a no-op) and
// confirms them.
func (p *Placer) confirmCanceled(ctx context.Context, symbol string, ids ...string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	_ = p.queues.For(symbol).ConfirmCanceled(ctx, ids...)
}

// confirmOrders confirms the cancels of orders, one call per instrument.
func (p *Placer) confirmOrders(ctx context.Context, list []orders.Order) {
	bySymbol := map[string][]string{}
	for _, order := range list {
		bySymbol[order.Symbol] = append(bySymbol[order.Symbol], order.ID)
	}
	for symbol, ids := range bySymbol {
		p.confirmCanceled(ctx, symbol, ids...)
	}
}

// confirmTimeout bounds a confirmation, which runs on after the request's
// context ends: a cancel already recorded should not be recorded again.
const confirmTimeout = 2 * time.Second

// RecordUnconfirmedCancels writes the rows of the orders the queues
// canceled at least olderThan ago whose cancel no caller confirmed (the
// row's write failed, or the cancel's reply was lost), as CancelAll writes
// them, and confirms them; it returns how many orders it recorded. Without
// it such an order's only record is the queue's finished one, which its
// retention trims. Recording is idempotent, so several gateways may run it
// at once. A job that is no order (a queued command) or that cannot be
// read as one is confirmed with nothing recorded: no retry makes it one.
func (p *Placer) RecordUnconfirmedCancels(ctx context.Context, olderThan time.Duration) (int, error) {
	if p.history == nil {
		return 0, errors.New("orders: recording cancels needs a Placer with a History")
	}
	recorded := 0
	var failures []error
	for _, symbol := range p.queues.Symbols() {
		queue := p.queues.For(symbol)
		for {
			jobs, err := queue.Unconfirmed(ctx, olderThan, recordBatch)
			if err != nil {
				failures = append(failures, err)
			}
			if len(jobs) == 0 {
				break
			}
			var list []orders.Order
			// skipped are the jobs with no row to write: confirmed as they are.
			var skipped []string
			for _, job := range jobs {
				if job.Kind != orders.KindPlace {
					skipped = append(skipped, job.ID)
					continue
				}
				order, err := orderOf(job)
				if err != nil {
					failures = append(failures, err)
					skipped = append(skipped, job.ID)
					continue
				}
				list = append(list, order)
			}
			record, cancel := context.WithTimeout(ctx, recordTimeout)
			_, err = p.history.RecordAllCanceled(record, list)
			cancel()
			if err != nil {
				// One order PostgreSQL refuses would hold back every
				// other one of the queue, pass after pass: write them
				// one by one, and confirm those that went.
				written, errs := p.recordOneByOne(ctx, list)
				failures = append(failures, errs...)
				recorded += len(written)
				if err := queue.ConfirmCanceled(ctx, append(written, skipped...)...); err != nil {
					failures = append(failures, err)
				}
				break
			}
			if err := queue.ConfirmCanceled(ctx, append(orderIDs(list), skipped...)...); err != nil {
				failures = append(failures, err)
				break
			}
			recorded += len(list)
			if len(jobs) < recordBatch {
				break
			}
		}
	}
	return recorded, errors.Join(failures...)
}

func orderIDs(list []orders.Order) []string {
	ids := make([]string, len(list))
	for i, order := range list {
		ids[i] = order.ID
	}
	return ids
}

// recordOneByOne writes the canceled rows of list one at a time, in an
// order of its own each call (so orders PostgreSQL refuses hold back no
// others for good), and returns the ids written and the failures. It ends
// after a few failures in a row: PostgreSQL down, rather than orders it
// refuses.
func (p *Placer) recordOneByOne(ctx context.Context, list []orders.Order) (written []string, failures []error) {
	list = slices.Clone(list)
	rand.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	inARow := 0
	for _, order := range list {
		record, cancel := context.WithTimeout(ctx, recordTimeout)
		_, err := p.history.RecordCanceled(record, order)
		cancel()
		if err != nil {
			failures = append(failures, fmt.Errorf("record the cancel of %s: %w", order.ID, err))
			if inARow++; inARow == oneByOneFailures {
				break
			}
			continue
		}
		inARow = 0
		written = append(written, order.ID)
	}
	return written, failures
}

// oneByOneFailures is how many failures in a row end recordOneByOne.
const oneByOneFailures = 3

// KeepRecordingCancels runs RecordUnconfirmedCancels every interval until
// ctx is cancelled, for the cancels older than UnconfirmedCancelAge.
func (p *Placer) KeepRecordingCancels(ctx context.Context, interval time.Duration, logger *slog.Logger) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		recorded, err := p.RecordUnconfirmedCancels(ctx, UnconfirmedCancelAge)
		if err != nil && ctx.Err() == nil {
			logger.Warn("recording the cancels left unrecorded failed; trying again next interval", "recorded", recorded, "err", err)
		} else if recorded > 0 {
			logger.Info("recorded cancels their callers left unrecorded", "orders", recorded)
		}
	}
}

// UnconfirmedCancelAge is how old a cancel no caller confirmed must be
// before RecordUnconfirmedCancels records it: older than a cancel's own
// request and its records take (CancelAll writes batches of recordTimeout
// each), so a cancel still being recorded is not recorded twice in vain.
const UnconfirmedCancelAge = time.Minute

// readmitCommands puts the instrument commands CancelAll withdrew back on
// their queues, a cancel under a key naming the one withdrawn (so a retry
// of its DELETE finds it), and returns what failed.
func (p *Placer) readmitCommands(ctx context.Context, jobs []emq.JobInfo) []error {
	var failures []error
	for _, job := range jobs {
		if job.Kind != orders.KindCommand {
			continue
		}
		cmd, err := orders.DecodeCommand(job.ID, job.Payload)
		if err != nil {
			failures = append(failures, err)
			continue
		}
		dedup := ""
		if cmd.Kind == orders.CommandCancel {
			dedup = orders.CancelDedupKey(cmd.OrderID)
		}
		if _, _, err := p.admitCommand(ctx, cmd, dedup); err != nil {
			failures = append(failures, err)
		}
	}
	return failures
}

// notCancelable turns the queue's refusal into the order status that caused
// it. The refusal names the job's state at the moment it was refused, except
// for a finished job, whose record tells whether it was accepted or canceled.
func (p *Placer) notCancelable(ctx context.Context, account, id string, refusal error) error {
	state, ok := emq.StateOf(refusal)
	if !ok {
		return fmt.Errorf("orders: cancel %s: %w", id, refusal)
	}
	// cancel.lua says "finished" for a job only its finished record holds. A
	// finished job's final status is in the orders table when settlement
	// ran, so it is read as GET reads it.
	if state == "finished" || state == emq.StateDone {
		final, err := p.Order(ctx, account, id)
		if err != nil {
			return err
		}
		return &orders.NotCancelableError{OrderID: id, Status: final.Status}
	}
	status, known := statusOf(state)
	if !known || status == orders.StatusPending {
		return fmt.Errorf("orders: cancel %s refused in queue state %q: %w", id, state, refusal)
	}
	return &orders.NotCancelableError{OrderID: id, Status: status}
}

// statusOf maps a queue state to what a client sees of an order without an
// orders row. A job waiting out a retry backoff is still pending to the
// client: nothing holds it and it can still be canceled. A finished job
// without a row is accepted: settlement writes the row before it completes
// the job, so only a worker that predates settlement leaves one. A dead job
// is failed, not rejected: the exchange gave up on it, the order itself was
// never refused.
func statusOf(state string) (orders.Status, bool) {
	switch state {
	case emq.StatePending, emq.StateDelayed:
		return orders.StatusPending, true
	case emq.StateActive:
		return orders.StatusActive, true
	case emq.StateDone:
		return orders.StatusAccepted, true
	case emq.StateCanceled:
		return orders.StatusCanceled, true
	case emq.StateDead:
		return orders.StatusFailed, true
	}
	return "", false
}
