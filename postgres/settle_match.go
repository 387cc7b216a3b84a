package postgres

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/settle_instruments.sql
	settleInstrumentsSQL string
	//go:embed sql/settle_existing.sql
	settleExistingSQL string
	//go:embed sql/settle_duplicates.sql
	settleDuplicatesSQL string
	//go:embed sql/settle_book.sql
	settleBookSQL string
	//go:embed sql/settle_open.sql
	settleOpenSQL string
	//go:embed sql/settle_lock.sql
	settleLockSQL string
	//go:embed sql/settle_draw.sql
	settleDrawSQL string
	//go:embed sql/settle_insert_orders.sql
	settleInsertOrdersSQL string
	//go:embed sql/settle_update_makers.sql
	settleUpdateMakersSQL string
	//go:embed sql/settle_insert_transactions.sql
	settleInsertTransactionsSQL string
	//go:embed sql/settle_insert_entries.sql
	settleInsertEntriesSQL string
	//go:embed sql/settle_move_balances.sql
	settleMoveBalancesSQL string
	//go:embed sql/settle_write_ledger.sql
	settleWriteLedgerSQL string
	//go:embed sql/settle_guard.sql
	settleGuardSQL string
	//go:embed sql/settle_outbox_reached.sql
	settleOutboxReachedSQL string
	//go:embed sql/settle_last_price.sql
	settleLastPriceSQL string
	//go:embed sql/settle_outbox.sql
	settleOutboxSQL string
)

// The parts of a balance a ledger entry names.
const (
	partAvailable = "available"
	partHeld      = "held"
)

// Kinds of the ledger transactions settlement and cancels write.
const (
	kindHold    = "hold"
	kindRelease = "release"
	kindTrade   = "trade"
)

// ledgerScale is the decimals a NUMERIC(38,18) column holds: an amount with
// more would be rounded by the insert, and money is never rounded silently.
const ledgerScale = 18

// errDecision: deciding one order of a batch failed (a planning error,
// not PostgreSQL's), so the batch is settled order by order and only that
// order meets it again.
var errDecision = errors.New("deciding an order failed")

// batchOutcome is what a batch decided for one of its orders.
type batchOutcome struct {
	result settlement
	err    error
	alone  bool
}

// balanceKey names a balance row.
type balanceKey struct{ account, asset string }

// clientOrderKey is an account's client order id, which one order holds.
type clientOrderKey struct{ account, clientOrderID string }

// lockedBalance is a balance row the transaction holds locked, and what the
// transaction did to it so far: exact rationals of the NUMERIC values, never
// floats, so the funds checks compare what PostgreSQL would.
//
// A row the decision only writes (a maker's, the venue's) is not read
// before it is locked: known is false, and available and held are then what
// the batch moved.
//
// A row the decision ran funds checks on keeps the bounds its locked
// available must fall in for every check to come out the same: at least
// atLeast (every hold that passed still passes) and below below (every hold
// refused is still refused); nil is no bound. start is the available the
// decision began from.
type lockedBalance struct {
	available, held  *big.Rat
	known            bool
	entries          int64
	name, asset, acc string

	start, atLeast, below *big.Rat
}

// funds runs a funds check of the decision: whether the row's available
// covers need, as the batch left it. It records what the check needs of
// the row's value when locked: the batch moved the row by available -
// start, so the check comes out the same while the locked available is at
// least need - that (passed) or below it (refused).
func (b *lockedBalance) funds(need *big.Rat) bool {
	threshold := new(big.Rat).Sub(need, new(big.Rat).Sub(b.available, b.start))
	if b.available.Cmp(need) < 0 {
		if b.below == nil || threshold.Cmp(b.below) < 0 {
			b.below = threshold
		}
		return false
	}
	if b.atLeast == nil || threshold.Cmp(b.atLeast) > 0 {
		b.atLeast = threshold
	}
	return true
}

// bookOrder is a resting order of a book the batch holds: one read from the
// table, or a taker of the batch that came to rest (taker is then its row,
// written at the end with what happened to it since).
type bookOrder struct {
	id, account string
	side        orders.Side
	price       decimal.Decimal
	remaining   decimal.Decimal
	hold        decimal.Decimal
	sequence    int64
	taker       *takerRow

	// What the batch did to an order read from the table, written as
	// deltas by settle_update_makers.sql.
	touched                         bool
	filled, notional, fees, givenUp decimal.Decimal
	status                          orders.Status
}

// instrumentBook is an instrument locked by the batch and its book, both
// sides best first.
type instrumentBook struct {
	in         orders.Instrument
	bids, asks []*bookOrder
	traded     bool
}

// side is the side of the book a resting order of side s rests on.
func (b *instrumentBook) side(s orders.Side) *[]*bookOrder {
	if s == orders.Buy {
		return &b.bids
	}
	return &b.asks
}

// rest puts an order on its side behind every order of its price: its
// sequence is the newest.
func (b *instrumentBook) rest(o *bookOrder) {
	side := b.side(o.side)
	at := len(*side)
	for i, other := range *side {
		if o.side == orders.Buy && other.price.Cmp(o.price) < 0 || o.side == orders.Sell && other.price.Cmp(o.price) > 0 {
			at = i
			break
		}
	}
	*side = slices.Insert(*side, at, o)
}

// takerRow is the row of an order the batch took, as it will be inserted.
type takerRow struct {
	req          *settleRequest
	order        orders.Order
	timeInForce  orders.TimeInForce
	status       orders.Status
	rejectReason orders.RejectReason
	cancelReason orders.CancelReason
	filled       decimal.Decimal
	notional     decimal.Decimal
	fees         decimal.Decimal
	hold         decimal.Decimal
	// duplicateOf is the order that holds the order's client order id, when
	// another does.
	duplicateOf string
	// rests: the order is on the book when the batch ends. Takers come to
	// rest in the order they are decided, and their rows draw their
	// sequences in that order.
	rests bool
}

type ledgerEntry struct {
	account, asset, part string
	amount               decimal.Decimal
}

type ledgerTxn struct {
	// position is the transaction's place (1-based) in the batch's
	// decision order, which names it until settle_write_ledger.sql draws
	// its id.
	position int
	kind     string
	orderID  string
	entries  []ledgerEntry
}

type tradeRow struct {
	symbol, maker, taker, makerAccount, takerAccount string
	takerSide                                        orders.Side
	price, quantity, makerFee, takerFee              decimal.Decimal
	makerFeeBps, takerFeeBps                         decimal.Decimal
	txn                                              *ledgerTxn
}

// batchWork is what a batch decided so far, in memory, before one round
// trip writes it all.
type batchWork struct {
	// ctx and tx read more of a book when a taker needs it.
	ctx      context.Context
	tx       sender
	reads    map[sideKey]*sideRead
	books    map[string]*instrumentBook
	balances map[balanceKey]*lockedBalance
	takers   []*takerRow
	makers   []*bookOrder
	txns     []*ledgerTxn
	trades   []*tradeRow
	// holders are the orders holding their account's client order ids: as
	// read (another order's row), then each taker of the batch written as
	// the first with its pair.
	holders map[clientOrderKey]string
	// provisional is the next sequence of a taker coming to rest in the
	// batch's books: above every sequence drawn before, as the one it
	// draws when its row is inserted will be.
	provisional int64
}

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
// (settle_window.go) and its takers' balance rows, unlocked. It decides each
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
		return nil, fmt.Errorf("orders: settle a batch of %d: %w", n, err)
	}
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
		for rows.Next() {
			var in orders.Instrument
			var tick, reference, last, maker, taker, band string
			if err := rows.Scan(&in.Symbol, &in.Base, &in.Quote, &in.Halted, &tick, &reference, &last,
				&maker, &taker, &band); err != nil {
				return err
			}
			for _, field := range []struct {
				text   string
				target *decimal.Decimal
			}{{tick, &in.TickSize}, {reference, &in.ReferencePrice}, {last, &in.LastPrice},
				{maker, &in.MakerFeeBps}, {taker, &in.TakerFeeBps}, {band, &in.PriceBandPercent}} {
				if field.text == "" {
					continue
				}
				if *field.target, err = orders.ParseExact(field.text); err != nil {
					readErr = fmt.Errorf("instrument %s: %w", in.Symbol, err)
				}
			}
			instruments[in.Symbol] = in
		}
		return rows.Err()
	})
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

	// The takers' rows: opened where missing (a new account's first order),
	// as today, and read again.
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
		second := &pgx.Batch{}
		second.Queue(settleOpenSQL, accounts, assets)
		second.Queue(settleTakersSQL, takerAccounts, takerSymbols).Query(readTakers)
		if err := conn.SendBatch(ctx, second).Close(); err != nil {
			return fail(err)
		}
	}

	w, outcomes, err := decideBatch(ctx, conn, batch, instruments, reads, snapshot, existing, holders)
	if err != nil {
		return fail(err)
	}
	if afterFirstDecision != nil {
		afterFirstDecision()
	}
	if len(w.takers) == 0 {
		// Nothing to write: redeliveries and refusals only.
		if _, err := conn.Exec(ctx, commitSQL); err != nil {
			return fail(err)
		}
		return outcomes, nil
	}
	lockSet := maps.Clone(takerKeys)
	for key := range w.written() {
		lockSet[key] = true
	}
	outbox, err := w.write(ctx, conn, slices.Collect(maps.Keys(lockSet)), snapshot, true)
	if isStale(err) {
		s.log.Debug("a taker's balance moved past what the batch decided on; deciding again on the locked rows", "orders", n)
		s.metrics.observeRedecided()
		if _, err := conn.Exec(ctx, backToSQL); err != nil {
			return fail(err)
		}
		locked := make(map[balanceKey]*lockedBalance)
		if err := lockRows(ctx, conn, slices.Collect(maps.Keys(lockSet)), locked); err != nil {
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
		outbox, err = w.write(ctx, conn, extra, locked, false)
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

// afterFirstDecision, when set (by tests only), runs between a batch's
// first decision and its locks: what it changes is what a concurrent
// withdrawal or settlement would.
var afterFirstDecision func()

// isStale reports whether err is settle_guard.sql's: a balance row moved
// past what the batch decided on.
func isStale(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "P0001" && strings.HasPrefix(pgErr.Message, staleCodeWord)
}

// decideBatch decides every order of the batch in memory, on the books as
// read and the balances given (copied: the decision moves its own).
func decideBatch(ctx context.Context, tx sender, batch []*settleRequest, instruments map[string]orders.Instrument,
	reads map[sideKey]*sideRead, balances map[balanceKey]*lockedBalance, existing map[string]bool,
	holders map[clientOrderKey]string,
) (*batchWork, []batchOutcome, error) {
	w := &batchWork{
		ctx:         ctx,
		tx:          tx,
		reads:       reads,
		holders:     make(map[clientOrderKey]string, len(holders)),
		books:       make(map[string]*instrumentBook, len(instruments)),
		balances:    make(map[balanceKey]*lockedBalance, len(balances)),
		provisional: 1 << 62,
	}
	for symbol, in := range instruments {
		book := &instrumentBook{in: in}
		for _, side := range []orders.Side{orders.Buy, orders.Sell} {
			if r := reads[sideKey{symbol, side}]; r != nil {
				resting := make([]*bookOrder, len(r.rows))
				for i := range r.rows {
					o := r.rows[i]
					resting[i] = &o
				}
				*book.side(side) = resting
			}
		}
		w.books[symbol] = book
	}
	for key, b := range balances {
		w.balances[key] = &lockedBalance{available: new(big.Rat).Set(b.available),
			held: new(big.Rat).Set(b.held), known: true, name: b.name, asset: b.asset, acc: b.acc,
			start: b.available}
	}
	maps.Copy(w.holders, holders)
	outcomes := make([]batchOutcome, len(batch))
	for i, req := range batch {
		written := len(w.takers)
		outcome, err := w.decide(req, existing[req.order.ID])
		if err != nil {
			return nil, nil, fmt.Errorf("%w: order %s: %w", errDecision, req.order.ID, err)
		}
		outcomes[i] = outcome
		if len(w.takers) > written && w.takers[written].duplicateOf == "" {
			// Its row will hold its client order id: a later order of the
			// batch with the same is its duplicate.
			w.holders[clientOrderKey{req.order.Account, req.order.ClientOrderID}] = req.order.ID
		}
	}
	return w, outcomes, nil
}

// written is the balance rows the decision moves.
func (w *batchWork) written() map[balanceKey]bool {
	keys := make(map[balanceKey]bool)
	for key, b := range w.balances {
		if b.entries > 0 {
			keys[key] = true
		}
	}
	return keys
}

// lockRows opens and locks the balance rows keys in (account, asset)
// order, into locked, in one round trip.
func lockRows(ctx context.Context, tx sender, keys []balanceKey, locked map[balanceKey]*lockedBalance) error {
	if len(keys) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	queueLock(b, keys, nil, locked)
	return tx.SendBatch(ctx, b).Close()
}

// queueLock queues the opening of the rows keys that known does not hold
// (rows are never deleted, so one read once exists) and the lock of all of
// them, in (account, asset) order; the locked rows are read into locked
// (nil: not read).
func queueLock(b *pgx.Batch, keys []balanceKey, known map[balanceKey]*lockedBalance, locked map[balanceKey]*lockedBalance) {
	accounts, assets := sortedKeys(keys)
	var openAccounts, openAssets []string
	for i := range accounts {
		if known[balanceKey{accounts[i], assets[i]}] == nil {
			openAccounts, openAssets = append(openAccounts, accounts[i]), append(openAssets, assets[i])
		}
	}
	if len(openAccounts) > 0 {
		b.Queue(settleOpenSQL, openAccounts, openAssets)
	}
	lock := b.Queue(settleLockSQL, accounts, assets)
	if locked != nil {
		lock.Query(func(rows pgx.Rows) error { return scanBalances(rows, locked) })
	}
}

// sortedKeys lists keys in (account, asset) order, the order every balance
// lock is taken in, as parallel arrays.
func sortedKeys(keys []balanceKey) (accounts, assets []string) {
	slices.SortFunc(keys, func(a, b balanceKey) int {
		return cmp.Or(strings.Compare(a.account, b.account), strings.Compare(a.asset, b.asset))
	})
	keys = slices.Compact(keys)
	accounts, assets = make([]string, len(keys)), make([]string, len(keys))
	for i, key := range keys {
		accounts[i], assets[i] = key.account, key.asset
	}
	return accounts, assets
}

// scanBalances reads balance rows (account, asset, version, available,
// held) into into. The version is not kept: a batch's outbox rows read the
// version a move reaches from the row itself (settle_outbox_reached.sql).
func scanBalances(rows pgx.Rows, into map[balanceKey]*lockedBalance) error {
	var version int64
	for rows.Next() {
		var key balanceKey
		var available, held string
		b := &lockedBalance{known: true}
		if err := rows.Scan(&key.account, &key.asset, &version, &available, &held); err != nil {
			return err
		}
		var okA, okH bool
		b.available, okA = new(big.Rat).SetString(available)
		b.held, okH = new(big.Rat).SetString(held)
		if !okA || !okH {
			return fmt.Errorf("balance %s of %s reads %q, %q", key.asset, key.account, available, held)
		}
		b.acc, b.asset, b.name = key.account, key.asset, orders.BalanceName(key.account, key.asset)
		into[key] = b
	}
	return rows.Err()
}

// decide settles one order of the batch in memory. The outcome's err is the
// order's own failure (nothing of it is written); the error returned is the
// batch's, which nothing of the batch survives.
func (w *batchWork) decide(req *settleRequest, duplicate bool) (batchOutcome, error) {
	order := req.order
	book := w.books[order.Symbol]
	malformed := func(format string, args ...any) (batchOutcome, error) {
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: order %s: %s", orders.ErrMalformedOrder, order.ID,
			fmt.Sprintf(format, args...)))}, nil
	}
	switch {
	case duplicate:
		return batchOutcome{result: settlement{duplicate: true}}, nil
	case book == nil:
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrUnknownInstrument, order.Symbol, order.ID))}, nil
	}
	in := book.in
	baseRow, quoteRow := w.balances[balanceKey{order.Account, in.Base}], w.balances[balanceKey{order.Account, in.Quote}]
	if baseRow == nil || quoteRow == nil || !baseRow.known || !quoteRow.known {
		return batchOutcome{err: unsettleable(fmt.Errorf("%w: %s (order %s)", orders.ErrNoAccount, order.Account, order.ID))}, nil
	}
	if err := req.ctx.Err(); err != nil {
		return batchOutcome{err: fmt.Errorf("orders: settle %s: %w", order.ID, context.Cause(req.ctx))}, nil
	}

	row := &takerRow{req: req, order: order, timeInForce: order.TimeInForce}
	if row.timeInForce == "" {
		// A job admitted before the market names none: what it meant.
		row.timeInForce = orders.GTC
		if order.Type == orders.Market {
			row.timeInForce = orders.IOC
		}
	}
	if !order.Quantity.IsPos() || order.Quantity.Scale() > ledgerScale {
		return malformed("quantity %s", order.Quantity)
	}
	reject := func(reason orders.RejectReason) (batchOutcome, error) {
		row.status, row.rejectReason = orders.StatusRejected, reason
		w.takers = append(w.takers, row)
		return batchOutcome{result: settlement{status: orders.StatusRejected, reason: string(reason)}}, nil
	}
	pair := clientOrderKey{order.Account, order.ClientOrderID}
	if holder, taken := w.holders[pair]; taken {
		row.duplicateOf = holder
		return reject(orders.ReasonDuplicateClientOrderID)
	}
	if in.Halted {
		return reject(orders.ReasonInstrumentHalted)
	}

	taker := orders.Taker{Account: order.Account, Side: order.Side, Type: order.Type, TimeInForce: row.timeInForce,
		PostOnly: order.PostOnly, Quantity: order.Quantity}
	var worst decimal.Decimal // the limit or protection price: what the hold is at
	switch order.Type {
	case orders.Limit:
		if order.Price == nil || !order.Price.IsPos() || order.Price.Scale() > ledgerScale {
			return malformed("a limit order without a usable price")
		}
		inBand, err := in.InBand(*order.Price)
		if err != nil {
			return malformed("%v", err)
		}
		if !inBand {
			return reject(orders.ReasonPriceOutOfBand)
		}
		taker.Price, worst = *order.Price, *order.Price
	case orders.Market:
		if order.Price != nil {
			return malformed("a market order with a price")
		}
		low, high, err := in.Band()
		if err != nil {
			return malformed("%v", err)
		}
		taker.ProtectionPrice = low
		if order.Side == orders.Buy {
			taker.ProtectionPrice = high
		}
		if !taker.ProtectionPrice.IsPos() {
			return malformed("protection price %s", taker.ProtectionPrice)
		}
		worst = taker.ProtectionPrice
	default:
		return malformed("type %q", order.Type)
	}

	// The opposing side as the batch read it, and more of it if the taker
	// can reach past that.
	side := order.Side.Opposite()
	var result orders.MatchResult
	var byID map[string]*bookOrder
	for {
		opposing, complete := w.window(book, side, worst)
		resting := make([]orders.Resting, len(opposing))
		byID = make(map[string]*bookOrder, len(opposing))
		for i, o := range opposing {
			resting[i] = orders.Resting{OrderID: o.id, Account: o.account, Price: o.price, Remaining: o.remaining, Sequence: o.sequence}
			byID[o.id] = o
		}
		var err error
		result, err = orders.Match(taker, orders.Book{Resting: resting, Complete: complete})
		if errors.Is(err, orders.ErrIncompleteBook) {
			if err := w.readMore(book, side, worst, order.Quantity); err != nil {
				return batchOutcome{}, err
			}
			continue
		}
		if err != nil {
			return malformed("%v", err)
		}
		break
	}
	if result.Outcome == orders.OutcomeRejected {
		// Post-only that would take: decided before any hold.
		return reject(result.RejectReason)
	}

	// The hold: the worst case the whole quantity can cost.
	holdAsset, holdRow := in.Base, baseRow
	if order.Side == orders.Buy {
		holdAsset, holdRow = in.Quote, quoteRow
	}
	hold, err := orders.Hold(order.Side, order.Quantity, worst, in.TakerFeeBps)
	if err != nil || hold.Scale() > ledgerScale {
		return malformed("hold %s: %v", hold, err)
	}
	if !holdRow.funds(orders.Rational(hold)) {
		return reject(orders.ReasonInsufficientFunds)
	}
	if len(result.Fills) == 0 && result.Outcome == orders.OutcomeCanceled {
		// Nothing filled and nothing rests: a hold would be released at
		// once, so neither is written.
		row.status, row.cancelReason = orders.StatusCanceled, result.CancelReason
		w.takers = append(w.takers, row)
		return batchOutcome{result: settlement{status: orders.StatusCanceled, reason: string(result.CancelReason)}}, nil
	}

	// Plan every amount first, so that a fee or hold that does not fit
	// fails the order before anything of it is applied.
	type planned struct {
		fill               orders.Fill
		maker              *bookOrder
		notional           decimal.Decimal
		makerFee, takerFee decimal.Decimal
		makerGivesUp       decimal.Decimal // the maker's hold the fill consumes
		makerRelease       decimal.Decimal // the maker's hold released as it leaves the book
	}
	plan := make([]planned, len(result.Fills))
	consumed := decimal.Zero
	var notionalSum, feeSum decimal.Decimal
	for i, fill := range result.Fills {
		p := planned{fill: fill, maker: byID[fill.MakerOrderID]}
		if p.maker == nil {
			return batchOutcome{}, fmt.Errorf("match filled %s, which is not in the book", fill.MakerOrderID)
		}
		var errs [8]error
		p.notional, errs[0] = fill.Notional()
		p.takerFee, errs[1] = orders.Fee(p.notional, in.TakerFeeBps)
		p.makerFee, errs[2] = orders.Fee(p.notional, in.MakerFeeBps)
		if order.Side == orders.Buy {
			var takerCost decimal.Decimal
			takerCost, errs[3] = orders.ExactAdd(p.notional, p.takerFee)
			consumed, errs[4] = orders.ExactAdd(consumed, takerCost)
			p.makerGivesUp = fill.Quantity
		} else {
			consumed, errs[3] = orders.ExactAdd(consumed, fill.Quantity)
			p.makerGivesUp, errs[4] = orders.ExactAdd(p.notional, p.makerFee)
		}
		notionalSum, errs[5] = orders.ExactAdd(notionalSum, p.notional)
		feeSum, errs[6] = orders.ExactAdd(feeSum, p.takerFee)
		if err := errors.Join(errs[:]...); err != nil {
			return malformed("fill of %s at %s: %v", fill.Quantity, fill.Price, err)
		}
		for _, amount := range []decimal.Decimal{p.notional, p.takerFee, p.makerFee, p.makerGivesUp} {
			if amount.Scale() > ledgerScale {
				return malformed("fill amount %s has more decimals than the ledger holds", amount)
			}
		}
		plan[i] = p
	}
	left, err := orders.ExactSub(hold, consumed)
	if err != nil || left.IsNeg() {
		return batchOutcome{}, fmt.Errorf("fills consume %s of a hold of %s", consumed, hold)
	}
	rests := result.Outcome == orders.OutcomeOpen || result.Outcome == orders.OutcomePartiallyFilled
	keep := decimal.Zero
	if rests {
		if keep, err = orders.Hold(order.Side, result.Remaining, worst, in.TakerFeeBps); err != nil || keep.Scale() > ledgerScale {
			return malformed("hold %s of the remainder: %v", keep, err)
		}
	}
	release, err := orders.ExactSub(left, keep)
	if err != nil || release.IsNeg() {
		return batchOutcome{}, fmt.Errorf("the remainder needs %s of %s left held", keep, left)
	}

	// Apply: nothing below can fail for the order's sake.
	base, quote := in.Base, in.Quote
	holdTxn := w.txn(kindHold, order.ID)
	w.move(holdTxn, order.Account, holdAsset, partAvailable, hold.Neg())
	w.move(holdTxn, order.Account, holdAsset, partHeld, hold)
	for _, p := range plan {
		maker, fill := p.maker, p.fill
		feesToVenue := mustAdd(p.takerFee, p.makerFee)
		t := w.txn(kindTrade, order.ID)
		if order.Side == orders.Buy {
			w.move(t, order.Account, quote, partHeld, mustAdd(p.notional, p.takerFee).Neg())
			w.move(t, order.Account, base, partAvailable, fill.Quantity)
			w.move(t, maker.account, base, partHeld, fill.Quantity.Neg())
			w.move(t, maker.account, quote, partAvailable, mustSub(p.notional, p.makerFee))
		} else {
			w.move(t, order.Account, base, partHeld, fill.Quantity.Neg())
			w.move(t, order.Account, quote, partAvailable, mustSub(p.notional, p.takerFee))
			w.move(t, maker.account, quote, partHeld, mustAdd(p.notional, p.makerFee).Neg())
			w.move(t, maker.account, base, partAvailable, fill.Quantity)
		}
		w.move(t, orders.VenueAccount, quote, partAvailable, feesToVenue)
		w.trades = append(w.trades, &tradeRow{
			symbol: in.Symbol, maker: maker.id, taker: order.ID, makerAccount: maker.account, takerAccount: order.Account,
			takerSide: order.Side, price: fill.Price, quantity: fill.Quantity, makerFee: p.makerFee, takerFee: p.takerFee,
			makerFeeBps: in.MakerFeeBps, takerFeeBps: in.TakerFeeBps, txn: t,
		})
		if err := w.fillMaker(book, maker, fill, p.notional, p.makerFee, p.makerGivesUp); err != nil {
			return batchOutcome{}, err
		}
		book.in.LastPrice, book.traded = fill.Price, true
	}
	if release.IsPos() {
		t := w.txn(kindRelease, order.ID)
		w.move(t, order.Account, holdAsset, partHeld, release.Neg())
		w.move(t, order.Account, holdAsset, partAvailable, release)
	}

	row.status = orders.Status(result.Outcome)
	row.cancelReason = result.CancelReason
	row.filled, row.notional, row.fees, row.hold = result.Filled, notionalSum, feeSum, keep
	w.takers = append(w.takers, row)
	if rests {
		row.rests = true
		book.rest(&bookOrder{id: order.ID, account: order.Account, side: order.Side, price: *order.Price,
			remaining: result.Remaining, hold: keep, sequence: w.provisional, taker: row})
		w.provisional++
	}
	return batchOutcome{result: settlement{status: row.status, reason: string(row.cancelReason), trades: len(plan)}}, nil
}

// fillMaker applies one fill to a resting order: what it filled, paid and
// gave up of its hold; a filled maker leaves the book, and a filled buy
// releases what is left of its hold (it held its fee at the taker rate).
func (w *batchWork) fillMaker(book *instrumentBook, maker *bookOrder, fill orders.Fill, notional, fee, givesUp decimal.Decimal) error {
	var errs [3]error
	maker.remaining = fill.MakerRemaining
	maker.hold, errs[0] = orders.ExactSub(maker.hold, givesUp)
	if err := errors.Join(errs[:]...); err != nil || maker.hold.IsNeg() {
		return fmt.Errorf("maker %s holds less than its fill consumes (%s): %v", maker.id, givesUp, err)
	}
	status := orders.StatusPartiallyFilled
	release := decimal.Zero
	if maker.remaining.IsZero() {
		status, release, maker.hold = orders.StatusFilled, maker.hold, decimal.Zero
		side := book.side(maker.side)
		*side = slices.DeleteFunc(*side, func(o *bookOrder) bool { return o == maker })
	}
	if release.IsPos() {
		asset := book.in.Base
		if maker.side == orders.Buy {
			asset = book.in.Quote
		}
		t := w.txn(kindRelease, maker.id)
		w.move(t, maker.account, asset, partHeld, release.Neg())
		w.move(t, maker.account, asset, partAvailable, release)
	}
	if row := maker.taker; row != nil {
		// A taker of this batch, resting since: its row is still to be
		// inserted, with all of this in it.
		row.status, row.hold = status, maker.hold
		row.filled = mustAdd(row.filled, fill.Quantity)
		row.notional = mustAdd(row.notional, notional)
		row.fees = mustAdd(row.fees, fee)
		if status == orders.StatusFilled {
			row.rests = false
		}
		return nil
	}
	if !maker.touched {
		maker.touched = true
		w.makers = append(w.makers, maker)
	}
	maker.status = status
	maker.filled = mustAdd(maker.filled, fill.Quantity)
	maker.notional = mustAdd(maker.notional, notional)
	maker.fees = mustAdd(maker.fees, fee)
	maker.givenUp = mustAdd(maker.givenUp, mustAdd(givesUp, release))
	return nil
}

// txn starts a ledger transaction of the kind for the order.
func (w *batchWork) txn(kind, orderID string) *ledgerTxn {
	t := &ledgerTxn{position: len(w.txns) + 1, kind: kind, orderID: orderID}
	w.txns = append(w.txns, t)
	return t
}

// move adds one entry to t and applies it to the balance. A zero amount is
// no entry (the ledger refuses those). settleTogether locks every balance
// moved before it writes.
func (w *batchWork) move(t *ledgerTxn, account, asset, part string, amount decimal.Decimal) {
	if amount.IsZero() {
		return
	}
	key := balanceKey{account, asset}
	b := w.balances[key]
	if b == nil {
		b = &lockedBalance{available: new(big.Rat), held: new(big.Rat), name: orders.BalanceName(account, asset),
			asset: asset, acc: account}
		w.balances[key] = b
	}
	target := b.available
	if part == partHeld {
		target = b.held
	}
	target.Add(target, orders.Rational(amount))
	b.entries++
	t.entries = append(t.entries, ledgerEntry{account: account, asset: asset, part: part, amount: amount})
}

// write sends, in one round trip, the locks of the balance rows keys
// (opening those known does not hold), when guarded the check that the
// funds checks still come out the same on them (settle_guard.sql, after a
// savepoint to go back to if not), everything the batch decided, and the
// commit. It returns the outbox rows.
func (w *batchWork) write(ctx context.Context, tx sender, keys []balanceKey, known map[balanceKey]*lockedBalance, guarded bool) ([]orders.OutboxEntry, error) {
	batch := &pgx.Batch{}
	if guarded {
		batch.Queue(savepointSQL)
	}
	if len(keys) > 0 {
		queueLock(batch, keys, known, nil)
	}
	if guarded {
		var accounts, assets []string
		var atLeast, below []*string
		for key, b := range w.balances {
			if b.atLeast == nil && b.below == nil {
				continue
			}
			accounts, assets = append(accounts, key.account), append(assets, key.asset)
			atLeast, below = append(atLeast, ratText(b.atLeast)), append(below, ratText(b.below))
		}
		if len(accounts) > 0 {
			batch.Queue(settleGuardSQL, accounts, assets, atLeast, below)
		}
	}

	var o struct {
		ids, accounts, clientIDs, symbols, sides, types, tifs []string
		postOnly, rests                                       []bool
		quantities                                            []string
		prices, statuses                                      []*string
		rejects, cancels                                      []*string
		filled, notionals, fees, holds                        []string
		tokens                                                []int64
		created                                               []time.Time
		duplicateOf                                           []*string
	}
	for _, row := range w.takers {
		order := row.order
		o.ids = append(o.ids, order.ID)
		o.accounts = append(o.accounts, order.Account)
		o.clientIDs = append(o.clientIDs, order.ClientOrderID)
		o.symbols = append(o.symbols, order.Symbol)
		o.sides = append(o.sides, string(order.Side))
		o.types = append(o.types, string(order.Type))
		o.tifs = append(o.tifs, string(row.timeInForce))
		o.postOnly = append(o.postOnly, order.PostOnly)
		o.quantities = append(o.quantities, order.Quantity.String())
		o.prices = append(o.prices, decimalText(order.Price))
		status := string(row.status)
		o.statuses = append(o.statuses, &status)
		o.rejects = append(o.rejects, optionalText(string(row.rejectReason)))
		o.cancels = append(o.cancels, optionalText(string(row.cancelReason)))
		o.filled = append(o.filled, row.filled.String())
		o.notionals = append(o.notionals, row.notional.String())
		o.fees = append(o.fees, row.fees.String())
		o.holds = append(o.holds, row.hold.String())
		o.rests = append(o.rests, row.rests)
		o.tokens = append(o.tokens, row.req.token)
		o.created = append(o.created, order.CreatedAt)
		o.duplicateOf = append(o.duplicateOf, optionalText(row.duplicateOf))
	}
	batch.Queue(settleInsertOrdersSQL, o.ids, o.accounts, o.clientIDs, o.symbols, o.sides, o.types, o.tifs,
		o.postOnly, o.quantities, o.prices, o.statuses, o.rejects, o.cancels, o.filled, o.notionals, o.fees, o.holds,
		o.rests, o.tokens, o.created, o.duplicateOf)

	if len(w.makers) > 0 {
		var ids, filled, notionals, fees, givenUp, statuses []string
		for _, m := range w.makers {
			ids = append(ids, m.id)
			filled = append(filled, m.filled.String())
			notionals = append(notionals, m.notional.String())
			fees = append(fees, m.fees.String())
			givenUp = append(givenUp, m.givenUp.String())
			statuses = append(statuses, string(m.status))
		}
		batch.Queue(settleUpdateMakersSQL, ids, filled, notionals, fees, givenUp, statuses)
	}

	if len(w.txns) > 0 {
		var kinds, orderIDs []string
		var eTxns []int64
		var eAccounts, eAssets, eAmounts, eParts []string
		for _, t := range w.txns {
			kinds, orderIDs = append(kinds, t.kind), append(orderIDs, t.orderID)
			for _, e := range t.entries {
				eTxns = append(eTxns, int64(t.position))
				eAccounts, eAssets = append(eAccounts, e.account), append(eAssets, e.asset)
				eAmounts, eParts = append(eAmounts, e.amount.String()), append(eParts, e.part)
			}
		}
		var tTxns []int64
		var symbols, makers, takers, makerAccounts, takerAccounts, sides, prices, quantities, makerFees, takerFees, makerRates, takerRates []string
		for _, t := range w.trades {
			tTxns = append(tTxns, int64(t.txn.position))
			symbols, makers, takers = append(symbols, t.symbol), append(makers, t.maker), append(takers, t.taker)
			makerAccounts, takerAccounts = append(makerAccounts, t.makerAccount), append(takerAccounts, t.takerAccount)
			sides, prices = append(sides, string(t.takerSide)), append(prices, t.price.String())
			quantities = append(quantities, t.quantity.String())
			makerFees, takerFees = append(makerFees, t.makerFee.String()), append(takerFees, t.takerFee.String())
			makerRates, takerRates = append(makerRates, t.makerFeeBps.String()), append(takerRates, t.takerFeeBps.String())
		}
		batch.Queue(settleWriteLedgerSQL, kinds, orderIDs, eTxns, eAccounts, eAssets, eAmounts, eParts,
			tTxns, symbols, makers, takers, makerAccounts, takerAccounts, sides, prices, quantities,
			makerFees, takerFees, makerRates, takerRates)
		batch.Queue(settleMoveBalancesSQL, eAccounts, eAssets, eAmounts, eParts)
	}
	if len(w.trades) > 0 {
		var traded, lastPrices []string
		for symbol, book := range w.books {
			if book.traded {
				traded, lastPrices = append(traded, symbol), append(lastPrices, book.in.LastPrice.String())
			}
		}
		batch.Queue(settleLastPriceSQL, traded, lastPrices)
	}
	// One outbox row per moved balance, at the version it reaches: the
	// coherence consumer acts only on a version newer than the one it
	// applied, and then reads the balance as it is, so the versions the
	// batch passed through on the way need no row of their own.
	var moved []*lockedBalance
	for _, b := range w.balances {
		if b.entries > 0 {
			moved = append(moved, b)
		}
	}
	var outbox []orders.OutboxEntry
	if len(moved) > 0 {
		slices.SortFunc(moved, func(a, b *lockedBalance) int {
			return cmp.Or(strings.Compare(a.acc, b.acc), strings.Compare(a.asset, b.asset))
		})
		names, accounts, assets := make([]string, len(moved)), make([]string, len(moved)), make([]string, len(moved))
		for i, b := range moved {
			names[i], accounts[i], assets[i] = b.name, b.acc, b.asset
		}
		// Every moved row exists: its entries' foreign key says so.
		batch.Queue(settleOutboxReachedSQL, names, accounts, assets).Query(func(rows pgx.Rows) error {
			var err error
			outbox, err = pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
			return err
		})
	}
	// The batch's events, one outbox row per account and instrument, after
	// every write they snapshot.
	touched := make([]string, 0, len(w.takers)+len(w.makers))
	takers := make([]string, 0, len(w.takers))
	for _, row := range w.takers {
		touched, takers = append(touched, row.order.ID), append(takers, row.order.ID)
	}
	for _, m := range w.makers {
		touched = append(touched, m.id)
	}
	var events []orders.OutboxEntry
	batch.Queue(settleEventsSQL, touched, takers).Query(func(rows pgx.Rows) error {
		var err error
		events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
		return err
	})
	batch.Queue(commitSQL).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != commitSQL {
			return fmt.Errorf("the commit answered %s", tag)
		}
		return nil
	})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	return append(outbox, events...), nil
}

// ratText is r as exact decimal text for a NUMERIC parameter (nil: NULL).
// Every bound is a sum of decimals of at most ledgerScale places, so its
// decimal expansion ends there.
func ratText(r *big.Rat) *string {
	if r == nil {
		return nil
	}
	text := r.FloatString(ledgerScale)
	return &text
}

// mustAdd and mustSub are for sums of amounts already checked to fit; a
// failure is a bug.
func mustAdd(a, b decimal.Decimal) decimal.Decimal {
	got, err := orders.ExactAdd(a, b)
	if err != nil {
		panic(fmt.Sprintf("postgres: settle: %s + %s: %v", a, b, err))
	}
	return got
}

func mustSub(a, b decimal.Decimal) decimal.Decimal {
	got, err := orders.ExactSub(a, b)
	if err != nil {
		panic(fmt.Sprintf("postgres: settle: %s - %s: %v", a, b, err))
	}
	return got
}

func decimalText(d *decimal.Decimal) *string {
	if d == nil {
		return nil
	}
	text := d.String()
	return &text
}

func optionalText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
