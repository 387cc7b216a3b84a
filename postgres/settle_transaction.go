package postgres

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordergate/ordergate/orders"
)

// The batch transaction: its round trips, and the second decision when a
// balance row moved between the first and the locks.

var (
	//go:embed sql/settle_instruments.sql
	settleInstrumentsSQL string
	//go:embed sql/settle_existing.sql
	settleExistingSQL string
	//go:embed sql/settle_duplicates.sql
	settleDuplicatesSQL string
)

// sender sends a pipeline of statements (one round trip) on the batch's
// connection, inside its transaction.
type sender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Transaction control of a settlement batch, sent inside its pipelines so
// that opening and ending the transaction cost no round trip of their own.
const (
	beginSQL      = "BEGIN"
	commitSQL     = "COMMIT"
	savepointSQL  = "SAVEPOINT settle_decided"
	backToSQL     = "ROLLBACK TO SAVEPOINT settle_decided"
	staleCodeWord = "SETTLESTALE"
)

// settleTogether settles the batch in one transaction, as docs/market.md
// ("Settling one order") says, in two round trips when nothing raced it.
//
// The first opens the transaction, locks the batch's instruments in symbol
// order, finds the orders that have a row already (redeliveries: nothing
// changes for them), and reads what its takers can reach of the books
// (settle_book_reads.go) and its takers' balance rows, unlocked. It decides each
// order in the batch's order against the books and balances as the orders
// before it left them. The second locks, in (account, asset) order and in
// one statement, every balance row the decision writes and the takers' rows
// of their instruments' assets (a batch takes no balance lock before that
// statement, so two batches never wait on each other in a cycle), checks
// that the funds checks come out the same on the locked rows
// (settle_guard.sql), writes everything and commits. Balance rows are thus
// locked only while PostgreSQL runs that one pipeline, not across a round
// trip (apart from a new account's rows, opened and so locked in the first
// round trip), which is what lets instruments that share accounts settle
// side by side.
//
// If a row moved past what the decision needed (a withdrawal, another
// instrument's settlement), the pipeline rolls back to its savepoint, the
// rows are locked, the batch decides again on the locked values, and
// writes and commits in a third round trip. A row the new decision writes
// that is not locked yet is locked then, out of the one order: PostgreSQL
// would then break a cycle by failing this batch, whose orders then settle
// one by one.
//
// An order whose handler's context ended (its lease lost) by the time it is
// decided is left out of the writes, so no batch settles an order its worker
// no longer holds. A failure returned means nothing was committed, or,
// when the connection broke during the last round trip or its answers could
// not be read, that the commit's fate is unknown, as with any commit: the
// order's next attempt finds its row if it was.
func (s *Settler) settleTogether(ctx context.Context, batch []*settleRequest) ([]batchOutcome, error) {
	n := len(batch)
	fail := func(err error) ([]batchOutcome, error) {
		return nil, fmt.Errorf("postgres: settle a batch of %d: %w", n, ownedRefusal(err))
	}
	phase := s.metrics.now()
	select {
	case s.connections <- struct{}{}:
	case <-ctx.Done():
		return fail(context.Cause(ctx))
	}
	defer func() { <-s.connections }()
	pooled, err := s.db.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	// Rolls back whatever a failure left open.
	defer releaseAfterTx(pooled)
	conn := pooled.Conn()
	phase = s.metrics.phaseDone(phaseAcquire, phase)

	ids := make([]string, n)
	takerAccounts, takerSymbols, clientIDs := make([]string, n), make([]string, n), make([]string, n)
	var symbols []string
	for i, req := range batch {
		ids[i] = req.order.ID
		takerAccounts[i], takerSymbols[i], clientIDs[i] = req.order.Account, req.order.Symbol, req.order.ClientOrderID
		if !slices.Contains(symbols, req.order.Symbol) {
			symbols = append(symbols, req.order.Symbol)
		}
	}
	slices.Sort(symbols)

	instruments := make(map[string]orders.Instrument)
	existing := make(map[string]bool)
	reads := make(map[sideKey]*sideRead)
	snapshot := make(map[balanceKey]*lockedBalance)
	var readErr error
	first := &pgx.Batch{}
	first.Queue(beginSQL)
	first.Queue(settleInstrumentsSQL, symbols).Query(func(rows pgx.Rows) error {
		return scanInstruments(rows, instruments, &readErr)
	})
	first.Queue(settleUnownedSQL, symbols)
	first.Queue(settleExistingSQL, ids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			existing[id] = true
		}
		return rows.Err()
	})
	if requests := firstReads(batch); len(requests) > 0 {
		queueReads(first, requests, reads, &readErr)
	}
	holders := make(map[clientOrderKey]string)
	first.Queue(settleDuplicatesSQL, ids, takerAccounts, clientIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var pair clientOrderKey
			var holder string
			if err := rows.Scan(&pair.account, &pair.clientOrderID, &holder); err != nil {
				return err
			}
			holders[pair] = holder
		}
		return rows.Err()
	})
	readTakers := func(rows pgx.Rows) error { return scanBalances(rows, snapshot) }
	first.Queue(settleTakersSQL, takerAccounts, takerSymbols).Query(readTakers)
	if err := conn.SendBatch(ctx, first).Close(); err != nil {
		return fail(err)
	}
	if readErr != nil {
		return fail(readErr)
	}

	takerKeys, err := openTakerRows(ctx, conn, batch, instruments, existing, snapshot, takerAccounts, takerSymbols)
	if err != nil {
		return fail(err)
	}
	phase = s.metrics.phaseDone(phaseRead, phase)

	w, outcomes, err := decideBatch(ctx, conn, batch, instruments, reads, snapshot, existing, holders)
	if err != nil {
		return fail(err)
	}
	phase = s.metrics.phaseDone(phaseDecide, phase)
	if afterFirstDecision != nil {
		afterFirstDecision()
	}
	if len(w.takers) == 0 {
		// Nothing to write: redeliveries and refusals only.
		if _, err := conn.Exec(ctx, commitSQL); err != nil {
			return fail(err)
		}
		s.metrics.phaseDone(phaseWrite, phase)
		return outcomes, nil
	}
	lockSet := maps.Clone(takerKeys)
	for key := range w.written() {
		lockSet[key] = true
	}
	outbox, err := w.write(ctx, conn, slices.Collect(maps.Keys(lockSet)), snapshot, true, s.balances)
	phase = s.metrics.phaseDone(phaseWrite, phase)
	if isStale(err) {
		s.logger.Debug("a taker's balance moved past what the batch decided on; deciding again on the locked rows", "orders", n)
		s.metrics.observeRedecided()
		if _, err := conn.Exec(ctx, backToSQL); err != nil {
			return fail(err)
		}
		locked := make(map[balanceKey]*lockedBalance)
		if err := lockRows(ctx, conn, &lockedStatements, slices.Collect(maps.Keys(lockSet)), locked); err != nil {
			return fail(err)
		}
		if w, outcomes, err = decideBatch(ctx, conn, batch, instruments, reads, locked, existing, holders); err != nil {
			return fail(err)
		}
		var extra []balanceKey
		for key := range w.written() {
			if !lockSet[key] {
				extra = append(extra, key)
			}
		}
		outbox, err = w.write(ctx, conn, extra, locked, false, s.balances)
		s.metrics.phaseDone(phaseRedecide, phase)
	}
	if err != nil {
		return fail(err)
	}
	// The batch's outbox rows are relayed once, by the handler of its first
	// written order, right after this commit.
	for i := range outcomes {
		if outcomes[i].err == nil && !outcomes[i].alone && !outcomes[i].result.duplicate {
			outcomes[i].result.outbox = outbox
			break
		}
	}
	return outcomes, nil
}

// scanInstruments reads settle_instruments.sql's rows into instruments; a
// value that does not parse goes to *readErr.
func scanInstruments(rows pgx.Rows, instruments map[string]orders.Instrument, readErr *error) error {
	for rows.Next() {
		var in orders.Instrument
		var tick, reference, last, maker, taker, band, lot, minNotional string
		if err := rows.Scan(&in.Symbol, &in.Base, &in.Quote, &in.Halted, &tick, &reference, &last,
			&maker, &taker, &band, &lot, &minNotional); err != nil {
			return err
		}
		for _, field := range []struct {
			text   string
			target *decimal.Decimal
		}{{tick, &in.TickSize}, {reference, &in.ReferencePrice}, {last, &in.LastPrice},
			{maker, &in.MakerFeeBps}, {taker, &in.TakerFeeBps}, {band, &in.PriceBandPercent},
			{lot, &in.LotSize}, {minNotional, &in.MinNotional}} {
			if field.text == "" {
				continue
			}
			var err error
			if *field.target, err = orders.ParseExact(field.text); err != nil {
				*readErr = fmt.Errorf("instrument %s: %w", in.Symbol, err)
			}
		}
		instruments[in.Symbol] = in
	}
	return rows.Err()
}

// afterFirstDecision, when set (by tests only), runs between a batch's
// first decision and its locks: what it changes is what a concurrent
// withdrawal or settlement would.
var afterFirstDecision func()

// isStale reports whether err is settle_guard.sql's: a balance row moved
// past what the batch decided on.
func isStale(err error) bool { return raisedWith(err, staleCodeWord) }

// raisedWith reports whether err is a RAISE EXCEPTION (SQLSTATE P0001) of
// one of the project's SQL whose message starts with codeWord.
func raisedWith(err error, codeWord string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "P0001" && strings.HasPrefix(pgErr.Message, codeWord)
}

// openTakerRows is the balance rows the batch's new takers draw on (their
// instrument's base and quote), with those missing (a new account's first
// order) opened and the takers' rows read into snapshot again: a second
// round trip only when a row was missing.
func openTakerRows(ctx context.Context, tx sender, batch []*settleRequest, instruments map[string]orders.Instrument,
	existing map[string]bool, snapshot map[balanceKey]*lockedBalance, takerAccounts, takerSymbols []string) (map[balanceKey]bool, error) {
	takerKeys := make(map[balanceKey]bool)
	for _, req := range batch {
		if in, ok := instruments[req.order.Symbol]; ok && !existing[req.order.ID] {
			takerKeys[balanceKey{req.order.Account, in.Base}] = true
			takerKeys[balanceKey{req.order.Account, in.Quote}] = true
		}
	}
	var missing []balanceKey
	for key := range takerKeys {
		if snapshot[key] == nil {
			missing = append(missing, key)
		}
	}
	if len(missing) > 0 {
		accounts, assets := sortedKeys(missing)
		open := &pgx.Batch{}
		open.Queue(settleOpenSQL, accounts, assets)
		open.Queue(settleTakersSQL, takerAccounts, takerSymbols).Query(func(rows pgx.Rows) error {
			return scanBalances(rows, snapshot)
		})
		if err := tx.SendBatch(ctx, open).Close(); err != nil {
			return nil, err
		}
	}
	return takerKeys, nil
}
