package postgres

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/big"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordergate/ordergate/orders"
)

// A settlement batch is several orders settled in one PostgreSQL
// transaction. Every order locks the venue's balance rows, so settlements
// queue for them one after the other and each holds them through its commit;
// settling the orders that queued meanwhile in one transaction pays that
// commit, and the coherence jobs of the venue's balances, once per batch
// instead of once per order.

var (
	//go:embed sql/settle_batch_price.sql
	settleBatchPriceSQL string
	//go:embed sql/settle_batch_open.sql
	settleBatchOpenSQL string
	//go:embed sql/settle_batch_lock.sql
	settleBatchLockSQL string
	//go:embed sql/settle_batch_final.sql
	settleBatchFinalSQL string
	//go:embed sql/settle_batch_write.sql
	settleBatchWriteSQL string
)

// maxSettleBatch bounds the orders one transaction settles: its locks, its
// statement's arrays and the work a failed batch hands back to be redone
// one by one.
const maxSettleBatch = 32

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
}

// settleQueue holds the orders waiting for the settler's next transaction.
// At most one transaction of a settler is in flight: the orders that arrive
// meanwhile wait here and go together in the next one, so a lone order goes
// at once and a busy worker settles in batches without any timer.
type settleQueue struct {
	mu      sync.Mutex
	waiting []*settleRequest
	// busy: a transaction is in flight, and whoever runs it takes the
	// waiting orders when it ends.
	busy bool
}

// join makes the caller the runner when nothing is in flight (true) or
// queues the request for the next batch (false).
func (q *settleQueue) join(req *settleRequest) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.busy {
		q.busy = true
		return true
	}
	q.waiting = append(q.waiting, req)
	return false
}

// withdraw takes a request out of the queue if no batch has taken it yet.
func (q *settleQueue) withdraw(req *settleRequest) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.waiting, req)
	if i < 0 {
		return false
	}
	q.waiting = slices.Delete(q.waiting, i, i+1)
	return true
}

// take removes the next batch from the queue, oldest first, or reports
// there is none and ends the busy spell. A second request for an order
// already in the batch (two leases racing) stays for the next batch, which
// finds the order final.
func (q *settleQueue) take() []*settleRequest {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.busy = false
		return nil
	}
	batch := make([]*settleRequest, 0, min(len(q.waiting), maxSettleBatch))
	ids := make(map[string]bool, cap(batch))
	left := q.waiting[:0]
	for _, req := range q.waiting {
		if len(batch) == maxSettleBatch || ids[req.order.ID] {
			left = append(left, req)
			continue
		}
		ids[req.order.ID] = true
		batch = append(batch, req)
	}
	clear(q.waiting[len(left):])
	q.waiting = left
	return batch
}

// handOn is called by the runner of a transaction when it ends: the orders
// that queued meanwhile go next, on a goroutine of their own so the runner's
// handler can return.
func (s *Settler) handOn() {
	s.queue.mu.Lock()
	defer s.queue.mu.Unlock()
	if len(s.queue.waiting) == 0 {
		s.queue.busy = false
		return
	}
	go s.drive()
}

// drive settles batches until the queue is empty.
func (s *Settler) drive() {
	for {
		batch := s.queue.take()
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
			s.log.Error("settlement batch panicked; its orders are settled one by one",
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
		req.result, req.err = s.settle(req.ctx, req.order, req.token)
		return
	}
	s.settleBatch(batch)
}

// settleBatch runs the batch's transaction and sorts out a failure: when
// PostgreSQL refused a statement, one order may be at fault and nothing was
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
	case ctx.Err() == nil && refusedByServer(err):
		s.log.Warn("settlement batch refused; its orders are settled one by one", "orders", len(batch), "err", err)
		for _, req := range batch {
			req.alone = true
		}
	default:
		for _, req := range batch {
			req.err = fmt.Errorf("orders: settle %s in a batch of %d: %w", req.order.ID, len(batch), err)
		}
	}
}

// refusedByServer reports whether PostgreSQL answered err to a statement,
// which rolls the transaction back, for a reason that may be one order's: a
// constraint, a value out of range, a deadlock. A lost connection, a
// cancelled statement or a server shutting down is not, and the commit's
// fate may be unknown.
func refusedByServer(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:2] {
	case "08", "53", "57", "58":
		// connection, insufficient resources, operator intervention, system error
		return false
	}
	return true
}

// batchOutcome is what a batch decided for one of its orders.
type batchOutcome struct {
	result settlement
	err    error
	alone  bool
}

// pricedOrder is the first round trip's row for one order of a batch.
type pricedOrder struct {
	found, halted, exact bool
	base, quote          string
	fillPrice, quantity  string
	notional             string
	transaction          int64
}

// balanceKey names a balance row.
type balanceKey struct{ account, asset string }

// batchBalance is a balance row the batch holds locked, and what the batch's
// orders did to it so far.
type batchBalance struct {
	version int64
	// available is exact: a rational built from the NUMERIC text, never a
	// float, so the funds checks compare what PostgreSQL would.
	available *big.Rat
	entries   int64
}

// batchWrites collects the parallel arrays of the write statement.
type batchWrites struct {
	ids, accounts, clientOrderIDs, symbols, sides, types, quantities []string
	prices, statuses                                                 []*string
	reasons, fillPrices, notionals                                   []*string
	transactions                                                     []*int64
	tokens                                                           []int64
	createdAt                                                        []time.Time

	transactionIDs    []int64
	transactionOrders []string

	moveTransactions                      []int64
	moveAccounts, moveAssets, moveAmounts []string
}

// settleTogether settles the batch in one transaction of two round trips,
// as settle does for one order. The first locks every balance row the batch
// moves and reads which orders are final already; the second writes all the
// orders decided in between and commits.
//
// The guarantees of a lone settlement hold order by order: an order with a
// final row is answered as a duplicate and written nothing (a second settler
// of it locks its balance rows too, so it committed before the locks were
// granted or waits until this commit, and then finds the row); the funds
// checks run in the batch's order on the locked amounts, each seeing what
// the orders before it moved; each settled order has its own balanced
// ledger transaction and its own token in its row; each moved balance's
// version rises by its number of entries. An order whose handler's context
// ended (its lease lost) by the time the writes are sent is left out of
// them, so no batch settles an order its worker no longer holds, any more
// than a lone settlement whose statement was cancelled would.
func (s *Settler) settleTogether(ctx context.Context, batch []*settleRequest) ([]batchOutcome, error) {
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("orders: settle a batch: %w", err)
	}
	defer releaseAfterTx(conn)

	n := len(batch)
	ids, accounts, symbols, quantities := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	prices := make([]*string, n)
	for i, req := range batch {
		ids[i], accounts[i], symbols[i] = req.order.ID, req.order.Account, req.order.Symbol
		quantities[i] = req.order.Quantity.String()
		if req.order.Price != nil {
			text := req.order.Price.String()
			prices[i] = &text
		}
	}

	priced := make([]pricedOrder, n)
	locked := make(map[balanceKey]*batchBalance, 2*n+2)
	final := make(map[string]bool)
	first := &pgx.Batch{}
	first.Queue(`BEGIN`)
	first.Queue(settleBatchPriceSQL, symbols, prices, quantities).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var at int
			var p pricedOrder
			if err := rows.Scan(&at, &p.found, &p.halted, &p.base, &p.quote, &p.fillPrice, &p.quantity,
				&p.notional, &p.exact, &p.transaction); err != nil {
				return err
			}
			if at < 1 || at > n {
				return fmt.Errorf("priced order %d of a batch of %d", at, n)
			}
			priced[at-1] = p
		}
		return rows.Err()
	})
	first.Queue(settleBatchOpenSQL, accounts, symbols, orders.VenueAccount)
	first.Queue(settleBatchLockSQL, accounts, symbols, orders.VenueAccount).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var key balanceKey
			var available string
			b := &batchBalance{}
			if err := rows.Scan(&key.account, &key.asset, &b.version, &available); err != nil {
				return err
			}
			var ok bool
			if b.available, ok = new(big.Rat).SetString(available); !ok {
				return fmt.Errorf("balance %s of %s reads %q", key.asset, key.account, available)
			}
			locked[key] = b
		}
		return rows.Err()
	})
	first.Queue(settleBatchFinalSQL, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			final[id] = true
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, first).Close(); err != nil {
		return nil, fmt.Errorf("orders: settle a batch of %d: %w", n, err)
	}

	outcomes := make([]batchOutcome, n)
	var w batchWrites
	for i, req := range batch {
		outcomes[i] = s.decide(req, priced[i], locked, final, &w)
	}

	// One journal row per moved balance, at the version it reaches: the
	// coherence consumer acts only on a version newer than the one it
	// applied, and then reads the balance as it is, so the versions the
	// batch passed through on the way need no row of their own.
	var moved []balanceKey
	for key, b := range locked {
		if b.entries > 0 {
			moved = append(moved, key)
		}
	}
	slices.SortFunc(moved, func(a, b balanceKey) int {
		return cmp.Or(strings.Compare(a.account, b.account), strings.Compare(a.asset, b.asset))
	})
	var names, payloads []string
	var versions []int64
	for _, key := range moved {
		version := locked[key].version + locked[key].entries
		name := orders.BalanceName(key.account, key.asset)
		names, versions = append(names, name), append(versions, version)
		payloads = append(payloads, fmt.Sprintf("%s@%d", name, version))
	}

	var journal []orders.JournalEntry
	second := &pgx.Batch{}
	if len(w.ids) > 0 {
		second.Queue(settleBatchWriteSQL,
			w.ids, w.accounts, w.clientOrderIDs, w.symbols, w.sides, w.types, w.quantities, w.prices, w.statuses,
			w.reasons, w.fillPrices, w.notionals, w.transactions, w.tokens, w.createdAt,
			nonNil(w.transactionIDs), nonNil(w.transactionOrders),
			nonNil(w.moveTransactions), nonNil(w.moveAccounts), nonNil(w.moveAssets), nonNil(w.moveAmounts),
			nonNil(names), nonNil(versions), nonNil(payloads)).Query(func(rows pgx.Rows) error {
			var err error
			journal, err = pgx.CollectRows(rows, pgx.RowToStructByPos[orders.JournalEntry])
			return err
		})
	}
	committed := false
	second.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		// COMMIT of a failed transaction answers ROLLBACK, not an error.
		committed = tag.String() == "COMMIT"
		return nil
	})
	if err := conn.SendBatch(ctx, second).Close(); err != nil {
		return nil, fmt.Errorf("orders: settle a batch of %d: %w", n, err)
	}
	if !committed {
		return nil, fmt.Errorf("orders: settle a batch of %d: the transaction rolled back at commit", n)
	}
	// The batch's journal rows are relayed once, by the handler of its first
	// settled order, right after this commit as a lone settlement's are.
	for i := range outcomes {
		if outcomes[i].err == nil && !outcomes[i].alone && outcomes[i].result.status == orders.StatusFilled {
			outcomes[i].result.journal = journal
			break
		}
	}
	return outcomes, nil
}

// decide settles or rejects one order of a batch against the balances as
// the orders before it left them, and adds its writes to w. It answers at
// once the orders the batch writes nothing for.
func (s *Settler) decide(req *settleRequest, p pricedOrder, locked map[balanceKey]*batchBalance,
	final map[string]bool, w *batchWrites) batchOutcome {
	order := req.order
	switch {
	case final[order.ID]:
		return batchOutcome{result: settlement{duplicate: true}}
	case !p.found:
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrUnknownInstrument, order.Symbol, order.ID))}
	case !p.exact:
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: order %s: notional %s has more decimals than the ledger holds",
			orders.ErrMalformedOrder, order.ID, p.notional))}
	}
	mine := struct{ base, quote *batchBalance }{locked[balanceKey{order.Account, p.base}], locked[balanceKey{order.Account, p.quote}]}
	venue := struct{ base, quote *batchBalance }{locked[balanceKey{orders.VenueAccount, p.base}], locked[balanceKey{orders.VenueAccount, p.quote}]}
	quantity, quantityOK := new(big.Rat).SetString(p.quantity)
	notional, notionalOK := new(big.Rat).SetString(p.notional)
	if mine.base == nil || mine.quote == nil || venue.base == nil || venue.quote == nil || !quantityOK || !notionalOK {
		// No balances means no account; alone, the order is refused as it
		// always was.
		return batchOutcome{alone: true}
	}
	if err := req.ctx.Err(); err != nil {
		return batchOutcome{err: fmt.Errorf("orders: settle %s: %w", order.ID, context.Cause(req.ctx))}
	}

	reason := orders.Rejection(p.halted, order.Side,
		orders.Funds{Base: mine.base.available, Quote: mine.quote.available}, orders.Funds{Base: venue.base.available, Quote: venue.quote.available},
		quantity, notional)

	var price *string
	if order.Price != nil {
		text := order.Price.String()
		price = &text
	}
	w.ids = append(w.ids, order.ID)
	w.accounts = append(w.accounts, order.Account)
	w.clientOrderIDs = append(w.clientOrderIDs, order.ClientOrderID)
	w.symbols = append(w.symbols, order.Symbol)
	w.sides = append(w.sides, string(order.Side))
	w.types = append(w.types, string(order.Type))
	w.quantities = append(w.quantities, order.Quantity.String())
	w.prices = append(w.prices, price)
	w.tokens = append(w.tokens, req.token)
	w.createdAt = append(w.createdAt, order.CreatedAt)
	if reason != "" {
		status := string(orders.StatusRejected)
		w.statuses = append(w.statuses, &status)
		w.reasons = append(w.reasons, &reason)
		w.fillPrices, w.notionals, w.transactions = append(w.fillPrices, nil), append(w.notionals, nil), append(w.transactions, nil)
		return batchOutcome{result: settlement{status: orders.StatusRejected, reason: reason}}
	}

	status := string(orders.StatusFilled)
	w.statuses = append(w.statuses, &status)
	w.reasons = append(w.reasons, nil)
	w.fillPrices = append(w.fillPrices, &p.fillPrice)
	w.notionals = append(w.notionals, &p.notional)
	w.transactions = append(w.transactions, &p.transaction)
	w.transactionIDs = append(w.transactionIDs, p.transaction)
	w.transactionOrders = append(w.transactionOrders, order.ID)
	type step struct {
		balance        *batchBalance
		account, asset string
		amount         *big.Rat
		text           string
	}
	steps := []step{
		{mine.quote, order.Account, p.quote, new(big.Rat).Neg(notional), "-" + p.notional},
		{mine.base, order.Account, p.base, quantity, p.quantity},
		{venue.quote, orders.VenueAccount, p.quote, notional, p.notional},
		{venue.base, orders.VenueAccount, p.base, new(big.Rat).Neg(quantity), "-" + p.quantity},
	}
	if order.Side == orders.Sell {
		steps = []step{
			{mine.base, order.Account, p.base, new(big.Rat).Neg(quantity), "-" + p.quantity},
			{mine.quote, order.Account, p.quote, notional, p.notional},
			{venue.base, orders.VenueAccount, p.base, quantity, p.quantity},
			{venue.quote, orders.VenueAccount, p.quote, new(big.Rat).Neg(notional), "-" + p.notional},
		}
	}
	for _, m := range steps {
		m.balance.available = new(big.Rat).Add(m.balance.available, m.amount)
		m.balance.entries++
		w.moveTransactions = append(w.moveTransactions, p.transaction)
		w.moveAccounts = append(w.moveAccounts, m.account)
		w.moveAssets = append(w.moveAssets, m.asset)
		w.moveAmounts = append(w.moveAmounts, m.text)
	}
	return batchOutcome{result: settlement{status: orders.StatusFilled, transaction: p.transaction}}
}

// nonNil makes an empty list an empty array rather than NULL.
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
