package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordergate/ordergate/orders"
)

// The settle queue groups concurrent Settle calls into batches, per
// instrument. A settlement batch is several orders of one instrument settled
// in one PostgreSQL transaction. Orders of one instrument queue for its lock one
// after the other and each holds it through its commit; settling the orders
// that queued meanwhile in one transaction pays that commit, and the outbox
// rows of the balances they move, once per batch instead of once per order.
// Each instrument has its own queue, so a worker settles several
// instruments at once and a batch never holds one instrument's lock while
// it waits on another's. A lone order is a batch of one: settleTogether
// (settle_transaction.go) is the one path.

// maxSettleBatch bounds the orders one transaction settles: its locks, its
// statement's arrays and the work a failed batch hands back to be redone
// one by one. Batches grow to it only under a backlog, where bigger batches
// settle more orders a second (settlement.DefaultConfig has the figures).
const maxSettleBatch = 128

// settleRequest is one Settle call waiting for a batch to settle its order.
// The outcome fields are written before done is closed.
type settleRequest struct {
	// ctx is the handler's, bounded by settleTimeout: it ends when the
	// lease is lost or the order waited too long.
	ctx   context.Context
	order orders.Order
	token int64
	done  chan struct{}

	result settlement
	err    error
	// alone: the batch could not settle the order; its handler settles it
	// by itself.
	alone bool
	// unowned: the settler gave the order's instrument up before deciding
	// it (GiveUp); its handler settles it under the instrument's lock.
	unowned bool
	// tries counts the owner's attempts of the order alone (settle_owned.go).
	tries int
	// command, when set, makes the request an instrument command
	// (settle_command.go) rather than an order: order then carries only
	// what the batch keys it by (the order it acts on, or the command's id,
	// its account and instrument).
	command *orders.Command
	// joined, taken and decided are when the request joined its owner's
	// queue, a batch took it and decided it (the stages' metrics; zero
	// when unmeasured).
	joined, taken, decided time.Time
}

// settleQueue holds, per instrument, the orders waiting for the settler's
// next transaction of that instrument. At most one transaction of a
// settler is in flight per instrument: the orders that arrive meanwhile
// wait here and go together in the next one, so a lone order goes at once
// and a busy worker settles in batches without any timer. An instrument
// with nothing in flight has no entry, so the map holds only the
// instruments being settled.
type settleQueue struct {
	mu       sync.Mutex
	inFlight map[string]*symbolQueue
}

// symbolQueue is one instrument's part of the settle queue: a transaction
// is in flight, and whoever runs it takes the waiting orders when it ends.
type symbolQueue struct {
	waiting []*settleRequest
}

// join makes the caller the runner when nothing of its instrument is in
// flight (true) or queues the request for the instrument's next batch
// (false).
func (q *settleQueue) join(req *settleRequest) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	symbol := req.order.Symbol
	if sq := q.inFlight[symbol]; sq != nil {
		sq.waiting = append(sq.waiting, req)
		return false
	}
	if q.inFlight == nil {
		q.inFlight = make(map[string]*symbolQueue)
	}
	q.inFlight[symbol] = &symbolQueue{}
	return true
}

// withdraw takes a request out of the queue if no batch has taken it yet.
func (q *settleQueue) withdraw(req *settleRequest) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.inFlight[req.order.Symbol]
	if sq == nil {
		return false
	}
	i := slices.Index(sq.waiting, req)
	if i < 0 {
		return false
	}
	sq.waiting = slices.Delete(sq.waiting, i, i+1)
	return true
}

// take removes the instrument's next batch from the queue, oldest first,
// or reports there is none and ends its busy spell.
func (q *settleQueue) take(symbol string) []*settleRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	sq := q.inFlight[symbol]
	if sq == nil || len(sq.waiting) == 0 {
		delete(q.inFlight, symbol)
		return nil
	}
	var batch []*settleRequest
	batch, sq.waiting = nextBatch(sq.waiting)
	return batch
}

// nextBatch splits waiting into the next batch, oldest first and at most
// maxSettleBatch, and what is left, in place.
func nextBatch(waiting []*settleRequest) (batch, left []*settleRequest) {
	n := batchFront(waiting, maxSettleBatch)
	batch = slices.Clone(waiting[:n])
	left = slices.Delete(waiting, 0, n)
	return batch, left
}

// batchFront counts the requests at the front of waiting that one batch
// may take: at most room. A second request for an order already in the
// batch or in one of held (two leases racing, or a cancel keyed by the
// order it cancels) ends the batch: it and every request behind it wait
// for the next, so none is decided before a request that came first (a
// cancel overtaken by an order that fills the order it cancels).
func batchFront(waiting []*settleRequest, room int, held ...map[string]bool) int {
	ids := make(map[string]bool, min(len(waiting), room))
	n := 0
	for _, req := range waiting {
		if n == room || ids[req.order.ID] || slices.ContainsFunc(held, func(h map[string]bool) bool { return h[req.order.ID] }) {
			break
		}
		ids[req.order.ID] = true
		n++
	}
	return n
}

// handOn is called by the runner of a transaction when it ends: the orders
// of its instrument that queued meanwhile go next, on a goroutine of their
// own so the runner's handler can return.
func (s *Settler) handOn(symbol string) {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	sq := s.queue.inFlight[symbol]
	if sq == nil || len(sq.waiting) == 0 {
		delete(s.queue.inFlight, symbol)
		return
	}
	go s.drive(symbol)
}

// drive settles the instrument's batches until its queue is empty.
func (s *Settler) drive(symbol string) {
	for {
		batch := s.queue.take(symbol)
		if batch == nil {
			return
		}
		s.runBatch(batch)
	}
}

// runBatch settles a batch and hands each request its outcome. A panic is
// caught here, where no worker runtime would catch it: the orders not yet
// answered are settled alone.
func (s *Settler) runBatch(batch []*settleRequest) {
	defer func() {
		if recovered := recover(); recovered != nil {
			s.logger.Error("settlement batch panicked; its orders are settled one by one",
				"orders", len(batch), "panic", fmt.Sprint(recovered), "stack", string(debug.Stack()))
			for _, req := range batch {
				req.result, req.err, req.alone = settlement{}, nil, true
			}
		}
		for _, req := range batch {
			close(req.done)
		}
	}()
	s.metrics.observeBatch(len(batch))
	if len(batch) == 1 {
		req := batch[0]
		req.result, req.err = s.settleAlone(req.ctx, req)
		return
	}
	s.settleBatch(batch)
}

// settleBatch runs the batch's transaction and sorts out a failure: when
// PostgreSQL refused a statement, or deciding one of its orders failed, one
// order may be at fault and nothing was
// committed, so each order is settled alone as if there had been no batch;
// any other failure (the server unreachable, a timeout) is no order's fault,
// and each order returns it for the queue to retry, as it would alone.
func (s *Settler) settleBatch(batch []*settleRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	outcomes, err := s.settleTogether(ctx, batch)
	switch {
	case err == nil:
		for i, req := range batch {
			req.result, req.err, req.alone = outcomes[i].result, outcomes[i].err, outcomes[i].alone
		}
	case ctx.Err() == nil && (refusedByServer(err) || len(batch) > 1 && errors.Is(err, errDecision)):
		s.logger.Warn("settlement batch refused; its orders are settled one by one", "orders", len(batch), "err", err)
		for _, req := range batch {
			req.alone = true
		}
	default:
		for _, req := range batch {
			req.err = fmt.Errorf("postgres: settle %s in a batch of %d: %w", req.order.ID, len(batch), err)
		}
	}
}

// refusedByServer reports whether PostgreSQL answered err to a statement,
// which rolls the transaction back, for a reason that may be one order's: a
// constraint, a value out of range, a deadlock. A lost connection, a
// cancelled statement or a server shutting down is not, and the commit's
// fate may be unknown. Nor is an owned instrument's refusal
// (SETTLEOWNED): its orders wait for the owner, not for one by one.
func refusedByServer(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || isOwned(err) {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "53", "57", "58":
		// connection, insufficient resources, operator intervention, system error
		return false
	}
	return true
}
