package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/settle_price.sql
	settlePriceSQL string
	//go:embed sql/settle_open.sql
	settleOpenSQL string
	//go:embed sql/settle_lock.sql
	settleLockSQL string
	//go:embed sql/settle_reject.sql
	settleRejectSQL string
	//go:embed sql/settle_write.sql
	settleWriteSQL string
)

// settleTimeout bounds one settlement. The handler's context ends only when
// the lease is lost, and the heartbeat keeps the lease while Redis answers,
// so without a bound a hung PostgreSQL would hold the job forever instead of
// failing it into a retry.
const settleTimeout = 10 * time.Second

// Settler settles claimed orders in PostgreSQL: one transaction moves the
// money through the ledger, versions the balances, records the order's final
// state and writes the journal outbox.
type Settler struct {
	db      *pgxpool.Pool
	relay   orders.Relayer
	log     *slog.Logger
	metrics *SettlementMetrics
	queue   settleQueue
}

// NewSettler settles on db and hands each committed settlement's journal
// entries to relay (nil: nobody is told; the relay's sweep finds the rows).
func NewSettler(db *pgxpool.Pool, relay orders.Relayer, log *slog.Logger) *Settler {
	if log == nil {
		log = slog.Default()
	}
	return &Settler{db: db, relay: relay, log: log}
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
// whose fencing token is token, then relays the journal entries. Concurrent
// calls share transactions: while one of the settler's settlements is in
// flight, the orders that arrive wait and then settle together in the next
// (see settleTogether), each with its own outcome.
//
// An order settled before (a redelivery, or a stale worker whose lease passed
// on) is left alone and Settle returns nil, so the job completes. An order
// naming an unknown account or instrument fails with ErrUnsettleable. Every
// other failure is returned as it is, for the queue to retry: an order is
// never rejected because PostgreSQL was unreachable.
func (s *Settler) Settle(ctx context.Context, order orders.Order, token int64) error {
	began := time.Now()
	result, err := s.settleJoined(ctx, order, token)
	if err != nil {
		return err
	}
	s.metrics.observe(result, time.Since(began))
	log := s.log.With("order_id", order.ID, "account", order.Account, "token", token)
	switch {
	case result.duplicate:
		// Worth seeing: it means two leases ran the order, or a completion was lost.
		log.Info("order already settled; nothing changed")
		return nil
	case result.status == orders.StatusRejected:
		log.Info("order rejected", "reason", result.reason)
	default:
		log.Info("order settled", "ledger_transaction_id", result.transaction)
	}
	if s.relay != nil && len(result.journal) > 0 {
		s.relay.Relay(ctx, result.journal)
	}
	return nil
}

// settleJoined settles the order at once when none of the settler's
// transactions is in flight, and otherwise waits for the next batch. An order
// the batch could not settle is settled alone, as if there were no batch.
func (s *Settler) settleJoined(ctx context.Context, order orders.Order, token int64) (settlement, error) {
	settleCtx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	req := &settleRequest{ctx: settleCtx, order: order, token: token, done: make(chan struct{})}
	if s.queue.join(req) {
		// Deferred: a panicking settlement must still hand the queue on, or
		// the orders waiting in it would wait for good.
		defer s.handOn()
		s.metrics.observeBatch(1)
		return s.settle(settleCtx, order, token)
	}
	select {
	case <-req.done:
	case <-settleCtx.Done():
		if s.queue.withdraw(req) {
			return settlement{}, fmt.Errorf("orders: settle %s: waiting for a batch: %w", order.ID, context.Cause(settleCtx))
		}
		// A batch holds the order: its outcome is what happened to it.
		<-req.done
	}
	if req.alone {
		aloneCtx, cancel := context.WithTimeout(ctx, settleTimeout)
		defer cancel()
		s.metrics.observeBatch(1)
		return s.settle(aloneCtx, order, token)
	}
	return req.result, req.err
}

type settlement struct {
	// duplicate: the order had a final row already; nothing was written.
	duplicate   bool
	status      orders.Status
	reason      string
	transaction int64
	journal     []orders.JournalEntry
}

// lockedBalance is one of the four balance rows a settlement holds locked.
type lockedBalance struct {
	account, asset string
	version        int64
	available      *big.Rat
}

// move is one ledger entry of a settlement: a signed amount on a balance.
type move struct {
	account, asset string
	amount         string
	balance        *lockedBalance
}

// settle runs the transaction in two round trips: the BEGIN rides in the
// first batch (read, lock) and the COMMIT in the second (one statement for
// all the writes), so a settlement holds the hot venue rows for about one
// round trip and the server runs as few statements as it can.
//
// Two settlers of one order lock the same four rows, so the second waits for
// the first to commit; its orders insert then finds the row and, being the
// statement every write hangs on, writes nothing.
func (s *Settler) settle(ctx context.Context, order orders.Order, token int64) (result settlement, err error) {
	conn, err := s.db.Acquire(ctx)
	if err != nil {
		return settlement{}, fmt.Errorf("orders: settle %s: %w", order.ID, err)
	}
	defer releaseAfterTx(conn)

	var price *string
	if order.Price != nil {
		text := order.Price.String()
		price = &text
	}
	quantity := order.Quantity.String()

	var (
		found         bool
		halted, exact bool
		base, quote   string
		fillPrice     string
		notional      string
		locked        []lockedBalance
	)
	first := &pgx.Batch{}
	first.Queue(`BEGIN`)
	first.Queue(settlePriceSQL, order.Symbol, price, quantity).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			found = true
			if err := rows.Scan(&halted, &base, &quote, &fillPrice, &notional, &exact); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	first.Queue(settleOpenSQL, order.Account, orders.VenueAccount, order.Symbol)
	first.Queue(settleLockSQL, order.Account, orders.VenueAccount, order.Symbol).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var b lockedBalance
			var available string
			if err := rows.Scan(&b.account, &b.asset, &b.version, &available); err != nil {
				return err
			}
			var ok bool
			if b.available, ok = new(big.Rat).SetString(available); !ok {
				return fmt.Errorf("balance %s of %s reads %q", b.asset, b.account, available)
			}
			locked = append(locked, b)
		}
		return rows.Err()
	})
	if err := conn.SendBatch(ctx, first).Close(); err != nil {
		return settlement{}, classify(order, err)
	}
	switch {
	case !found:
		return settlement{}, unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrUnknownInstrument, order.Symbol, order.ID))
	case !exact:
		return settlement{}, unsettleable(fmt.Errorf("%w: order %s: notional %s has more decimals than the ledger holds",
			orders.ErrMalformedOrder, order.ID, notional))
	case len(locked) != 4:
		return settlement{}, fmt.Errorf("orders: settle %s: locked %d balance rows, want 4", order.ID, len(locked))
	}

	balance := func(account, asset string) *lockedBalance {
		for i := range locked {
			if locked[i].account == account && locked[i].asset == asset {
				return &locked[i]
			}
		}
		return nil
	}
	mine := struct{ base, quote *lockedBalance }{balance(order.Account, base), balance(order.Account, quote)}
	venue := struct{ base, quote *lockedBalance }{balance(orders.VenueAccount, base), balance(orders.VenueAccount, quote)}
	if mine.base == nil || mine.quote == nil || venue.base == nil || venue.quote == nil {
		return settlement{}, fmt.Errorf("orders: settle %s: the locked rows are not the order's four balances", order.ID)
	}

	exactQuantity, quantityOK := new(big.Rat).SetString(quantity)
	exactNotional, notionalOK := new(big.Rat).SetString(notional)
	if !quantityOK || !notionalOK {
		return settlement{}, fmt.Errorf("orders: settle %s: quantity %q or notional %q is no number", order.ID, quantity, notional)
	}
	reason := orders.Rejection(halted, order.Side,
		orders.Funds{Base: mine.base.available, Quote: mine.quote.available}, orders.Funds{Base: venue.base.available, Quote: venue.quote.available},
		exactQuantity, exactNotional)
	var moves []move
	switch {
	case reason != "":
	case order.Side == orders.Buy:
		moves = []move{
			{order.Account, quote, "-" + notional, mine.quote},
			{order.Account, base, quantity, mine.base},
			{orders.VenueAccount, quote, notional, venue.quote},
			{orders.VenueAccount, base, "-" + quantity, venue.base},
		}
	default:
		moves = []move{
			{order.Account, base, "-" + quantity, mine.base},
			{order.Account, quote, notional, mine.quote},
			{orders.VenueAccount, base, quantity, venue.base},
			{orders.VenueAccount, quote, "-" + notional, venue.quote},
		}
	}

	inserted := false
	second := &pgx.Batch{}
	if reason != "" {
		result = settlement{status: orders.StatusRejected, reason: reason}
		second.Queue(settleRejectSQL,
			order.ID, order.Account, order.ClientOrderID, order.Symbol, string(order.Side), string(order.Type),
			quantity, price, reason, token, order.CreatedAt).Exec(func(tag pgconn.CommandTag) error {
			inserted = tag.RowsAffected() == 1
			return nil
		})
	} else {
		result = settlement{status: orders.StatusFilled}
		accounts, assets, amounts := make([]string, 4), make([]string, 4), make([]string, 4)
		names, payloads, versions := make([]string, 4), make([]string, 4), make([]int64, 4)
		for i, m := range moves {
			accounts[i], assets[i], amounts[i] = m.account, m.asset, m.amount
			// The row is locked, so its next version is exactly one more.
			versions[i] = m.balance.version + 1
			names[i] = orders.BalanceName(m.account, m.asset)
			payloads[i] = fmt.Sprintf("%s@%d", names[i], versions[i])
		}
		second.Queue(settleWriteSQL,
			order.ID, order.Account, order.ClientOrderID, order.Symbol, string(order.Side), string(order.Type),
			quantity, price, fillPrice, notional, token, order.CreatedAt,
			accounts, assets, amounts, names, versions, payloads).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var entry orders.JournalEntry
				if err := rows.Scan(&entry.ID, &entry.Name, &entry.Version, &entry.Payload, &result.transaction); err != nil {
					return err
				}
				result.journal = append(result.journal, entry)
			}
			inserted = len(result.journal) > 0
			return rows.Err()
		})
	}
	committed := false
	second.Queue(`COMMIT`).Exec(func(tag pgconn.CommandTag) error {
		// COMMIT of a failed transaction answers ROLLBACK, not an error.
		committed = tag.String() == "COMMIT"
		return nil
	})
	if err := conn.SendBatch(ctx, second).Close(); err != nil {
		return settlement{}, classify(order, err)
	}
	if !committed {
		return settlement{}, fmt.Errorf("orders: settle %s: the transaction rolled back at commit", order.ID)
	}
	if !inserted {
		return settlement{duplicate: true}, nil
	}
	return result, nil
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
	return fmt.Errorf("orders: settle %s: %w", order.ID, err)
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
