package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

// settleTimeout bounds one settlement. The handler's context ends only when
// the lease is lost, and the heartbeat keeps the lease while Redis answers,
// so without a bound a hung PostgreSQL would hold the job forever instead of
// failing it into a retry.
const settleTimeout = 10 * time.Second

// Settler settles claimed orders in PostgreSQL: one transaction matches
// them in their instruments' books, moves the money through the ledger
// (holds, trades, releases), versions the balances, records the orders'
// rows and writes the outbox. It also cancels resting orders
// (CancelResting), under the same locks.
type Settler struct {
	db      *pgxpool.Pool
	relay   orders.Relayer
	logger  *slog.Logger
	metrics *SettlementMetrics
	queue   settleQueue
	// balances is the form of the outbox rows of the balances a write moves.
	balances balancesForm
	// connections holds one token per connection settlement holds, at most
	// SettlerConnections.
	connections chan struct{}
	// owned are the instruments the settler owns (TakeOver).
	owned ownedState
}

// SettlerConnections bounds the connections a settler holds at once: one
// per instrument with a batch in flight, and, when PostgreSQL refuses a
// batch, one per order of it settling alone. Whatever else shares the pool
// (a worker's coherence consumer and outbox sweep) keeps the rest; the
// orders of a refused batch queue for these instead.
const SettlerConnections = 32

// NewSettler settles on db and hands each committed settlement's outbox
// entries to relay (nil: nobody is told; the relay's sweep finds the rows).
func NewSettler(db *pgxpool.Pool, relay orders.Relayer, logger *slog.Logger) *Settler {
	if logger == nil {
		logger = slog.Default()
	}
	return &Settler{db: db, relay: relay, logger: logger, connections: make(chan struct{}, SettlerConnections),
		balances: balancesForm{row: orders.BalancesWriteName, values: true}}
}

// WithBalanceRowEach has s's writes insert an outbox row per balance they
// move, as releases before the one row a write (orders.BalancesWriteName)
// did: their relays, which read only that form, may sweep what s wrote
// while they still run in a rolling deploy (COHERENCE_JOB_SIZE=1).
func (s *Settler) WithBalanceRowEach() *Settler {
	s.balances.row = ""
	return s
}

// WithoutBalanceValues has s's writes list their moved balances as
// "<name>@<version>" alone, as releases before the amounts did: their
// coherence consumers, which refuse a line with amounts, may take the jobs
// of what s wrote while they still run in a rolling deploy
// (COHERENCE_BALANCE_AMOUNTS=false). Their consumers then read each balance
// back from PostgreSQL.
func (s *Settler) WithoutBalanceValues() *Settler {
	s.balances.values = false
	return s
}

// balancesForm is the form of a write's outbox rows of balances
// (settle_balances.sql).
type balancesForm struct {
	// row names the one row a write lists its moved balances in; "" for a
	// row per balance (WithBalanceRowEach), which never carries amounts.
	row string
	// values has each line of the one row carry the balance's amounts
	// after its version, "<name>@<version> <available> <held>", so the
	// coherence consumer fills the cache without reading the balance.
	values bool
}

// ErrUnsettleable matches every failure no retry can cure: an order of an
// unknown account or instrument, or one the ledger cannot hold. The worker
// buries such an order's job instead of retrying it.
var ErrUnsettleable = errors.New("postgres: the order can never settle")

// unsettleableError keeps err's text and what it wraps, and adds
// ErrUnsettleable.
type unsettleableError struct{ err error }

func (e *unsettleableError) Error() string        { return e.err.Error() }
func (e *unsettleableError) Unwrap() error        { return e.err }
func (e *unsettleableError) Is(target error) bool { return target == ErrUnsettleable }

func unsettleable(err error) error { return &unsettleableError{err: err} }

// Settle settles the order in one PostgreSQL transaction under the lease
// whose fencing token is token, as docs/market.md ("Settling one order")
// says: it is matched against the book of its instrument and rests, fills,
// is canceled or rejected; then the outbox entries are relayed. Concurrent
// calls share transactions: while one of the settler's transactions of an
// instrument is in flight, the orders of that instrument that arrive wait
// and then settle together in the next
// (see settleTogether), each with its own outcome; a lone order is a batch
// of one.
//
// An order with a row already (a redelivery, or a stale worker whose lease
// passed on) is left alone and Settle returns nil, so the job completes. An
// order naming an unknown account or instrument fails with ErrUnsettleable.
// Every other failure is returned as it is, for the queue to retry: an order
// is never rejected because PostgreSQL was unreachable.
func (s *Settler) Settle(ctx context.Context, order orders.Order, token int64) error {
	began := time.Now()
	result, err := s.settleJoined(ctx, order, token)
	if err != nil {
		return err
	}
	s.metrics.observe(result, time.Since(began))
	logger := s.logger.With("order_id", order.ID, "account", order.Account, "token", token)
	switch {
	case result.duplicate:
		// Worth seeing: it means two leases ran the order, or a completion was lost.
		logger.Info("order already settled; nothing changed")
		return nil
	case result.status == orders.StatusRejected:
		logger.Info("order rejected", "reason", result.reason)
	default:
		logger.Info("order settled", "status", result.status, "reason", result.reason, "trades", result.trades)
	}
	s.relayInOrder(ctx, result)
	return nil
}

// relayInOrder relays a settlement's outbox, an owner's batch's after the
// batch before it relayed, and lets the next one go. An events row relayed
// before its source's previous one finds a gap in the account's log, and
// fills it from the outbox row by row. A relay that hangs holds the next
// back for a while at most; what it left, the sweep relays.
//
// A relay that can keep the line itself (orders.TurnRelayer) lets the next
// batch go as soon as its events are in line behind the batch before's,
// not once they reached Redis: a batch's relay then waits for no round
// trip of the one before.
func (s *Settler) relayInOrder(ctx context.Context, result settlement) {
	var letNext func()
	if result.relayed != nil {
		var once sync.Once
		letNext = func() { once.Do(func() { close(result.relayed) }) }
		defer letNext()
	}
	if s.relay == nil || len(result.outbox) == 0 {
		return
	}
	if turns, ok := s.relay.(orders.TurnRelayer); ok && result.relayed != nil {
		turns.RelayInTurn(ctx, result.outbox, result.relayAfter, letNext)
		return
	}
	if result.relayAfter != nil {
		timer := time.NewTimer(relayOrderWait)
		select {
		case <-result.relayAfter:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	s.relay.Relay(ctx, result.outbox)
}

// relayOrderWait bounds how long an owner's batch waits for the batch
// before it to relay before it relays anyway.
const relayOrderWait = 5 * time.Second

// settleJoined settles the order at once when none of the settler's
// transactions of its instrument is in flight, and otherwise waits for the
// instrument's next batch. An order
// the batch could not settle is settled alone, as if there were no batch.
func (s *Settler) settleJoined(ctx context.Context, order orders.Order, token int64) (settlement, error) {
	settleCtx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if st := s.ownedBookOf(settleCtx, order.Symbol); st != nil {
		req := &settleRequest{ctx: settleCtx, order: order, token: token, done: make(chan struct{})}
		result, unowned, err := s.settleOwned(settleCtx, st, req)
		if !unowned {
			return result, err
		}
		// Given up before it was decided: under the instrument's lock,
		// once PostgreSQL no longer says the instrument has an owner.
		select {
		case <-st.released:
		case <-settleCtx.Done():
		}
	}
	req := &settleRequest{ctx: settleCtx, order: order, token: token, done: make(chan struct{})}
	if s.queue.join(req) {
		// Deferred: a panicking settlement must still hand the queue on, or
		// the orders waiting in it would wait for good.
		defer s.handOn(order.Symbol)
		s.metrics.observeBatch(1)
		return s.settleAlone(settleCtx, req)
	}
	select {
	case <-req.done:
	case <-settleCtx.Done():
		if s.queue.withdraw(req) {
			return settlement{}, fmt.Errorf("postgres: settle %s: waiting for a batch: %w", order.ID, context.Cause(settleCtx))
		}
		// A batch holds the order: its outcome is what happened to it.
		<-req.done
	}
	if req.alone {
		aloneCtx, cancel := context.WithTimeout(ctx, settleTimeout)
		defer cancel()
		s.metrics.observeBatch(1)
		alone := *req
		alone.ctx = aloneCtx
		return s.settleAlone(aloneCtx, &alone)
	}
	return req.result, req.err
}

// settleAlone settles one order as a batch of one: the same code as a
// batch, so a lone order and a batched one cannot differ.
func (s *Settler) settleAlone(ctx context.Context, req *settleRequest) (settlement, error) {
	outcomes, err := s.settleTogether(ctx, []*settleRequest{req})
	if err != nil {
		return settlement{}, classify(req.order, err)
	}
	return outcomes[0].result, outcomes[0].err
}

// settlement is what settling did to one order.
type settlement struct {
	// duplicate: the order had a row already; nothing was written.
	duplicate bool
	status    orders.Status
	// reason is the reject reason of a rejected order, the cancel reason of
	// one the market canceled.
	reason string
	// trades is how many trades the order took part in as the taker.
	trades int
	outbox []orders.OutboxEntry
	// An owner's batches relay their outboxes in the order they committed
	// (settle_owned_pipeline.go, chainRelays): relayAfter is closed once
	// the batch before relayed, relayed is to close once this one did.
	// Both nil on the locked path.
	relayAfter <-chan struct{}
	relayed    chan struct{}
	// canceled are the resting orders an instrument command canceled.
	canceled []string
}

// classify sorts a failure: an order whose account does not exist, or whose
// fields the schema refuses, can never settle; anything else (the server
// down, a deadlock, a timeout) may pass.
func classify(order orders.Order, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.ConstraintName == "balances_account_id_fkey" || pgErr.ConstraintName == "orders_account_id_fkey":
			return unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrNoAccount, order.Account, order.ID))
		case pgErr.Code == "23514" && pgErr.TableName == "orders" || strings.HasPrefix(pgErr.Code, "22"):
			// a CHECK of the orders row, or a value out of a column's range
			return unsettleable(fmt.Errorf("%w: order %s: %w", orders.ErrMalformedOrder, order.ID, err))
		}
	}
	return fmt.Errorf("postgres: settle %s: %w", order.ID, err)
}

// releaseAfterTx hands the connection back with no transaction open: a
// settlement that failed midway leaves one, which ROLLBACK ends, and a
// connection that cannot be rolled back is closed by the pool on release.
func releaseAfterTx(conn *pgxpool.Conn) {
	pg := conn.Conn().PgConn()
	if !pg.IsClosed() && pg.TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = conn.Exec(ctx, `ROLLBACK`)
		cancel()
	}
	conn.Release()
}
