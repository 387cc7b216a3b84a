package postgres

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordergate/ordergate/orders"
)

// The writes of a batch: one pipeline that inserts the orders, trades and
// ledger, moves the balances, writes the outbox and commits.

var (
	//go:embed sql/settle_insert_orders.sql
	settleInsertOrdersSQL string
	//go:embed sql/settle_update_makers.sql
	settleUpdateMakersSQL string
	//go:embed sql/settle_write_ledger.sql
	settleWriteLedgerSQL string
	//go:embed sql/settle_balances.sql
	settleBalancesSQL string
)

// write sends, in one round trip, the locks of the balance rows keys
// (opening those known does not hold), when guarded the check that the
// funds checks still come out the same on them (settle_guard.sql, after a
// savepoint to go back to if not), everything the batch decided, and the
// commit. It returns the outbox rows.
func (w *batchWork) write(ctx context.Context, tx sender, keys []balanceKey, known map[balanceKey]*lockedBalance, guarded bool,
	form balancesForm,
) ([]orders.OutboxEntry, error) {
	batch := &pgx.Batch{}
	sql := w.statements()
	if w.owned != nil {
		// The owner's transaction opens here, behind its fence.
		w.owned.queueOpening(batch)
	}
	if guarded {
		batch.Queue(savepointSQL)
	}
	// The balance rows are locked last, just before they are written and
	// the commit: the rows the batch inserts reference them, checked per
	// statement without a lock (migration 0016), so another instrument's
	// batch that moves the same accounts waits only for this one's balance
	// updates, events and commit, not its inserts.
	if len(keys) > 0 {
		queueOpen(batch, sql, keys, known)
	}
	lockAndGuard := func() {
		if len(keys) > 0 {
			accounts, assets := sortedKeys(keys)
			batch.Queue(sql.lock, accounts, assets)
		}
		if !guarded {
			return
		}
		var accounts, assets []string
		atLeast, below := numericArrayOf(len(w.balances)), numericArrayOf(len(w.balances))
		for key, b := range w.balances {
			if b.atLeast == nil && b.below == nil {
				continue
			}
			accounts, assets = append(accounts, key.account), append(assets, key.asset)
			atLeast.optionalAmount(b.atLeast)
			below.optionalAmount(b.below)
		}
		if len(accounts) > 0 {
			batch.Queue(sql.guard, accounts, assets, atLeast.param(), below.param())
		}
	}

	n := len(w.takers)
	o := struct {
		ids, accounts, clientIDs, symbols, sides, types, tifs, statuses []string
		postOnly, rests                                                 []bool
		rejects, cancels, duplicateOf                                   []*string
		tokens                                                          []int64
		created                                                         []time.Time
	}{
		ids: make([]string, 0, n), accounts: make([]string, 0, n), clientIDs: make([]string, 0, n),
		symbols: make([]string, 0, n), sides: make([]string, 0, n), types: make([]string, 0, n),
		tifs: make([]string, 0, n), statuses: make([]string, 0, n),
		postOnly: make([]bool, 0, n), rests: make([]bool, 0, n),
		rejects: make([]*string, 0, n), cancels: make([]*string, 0, n), duplicateOf: make([]*string, 0, n),
		tokens: make([]int64, 0, n), created: make([]time.Time, 0, n),
	}
	quantities, prices, protections := numericArrayOf(n), numericArrayOf(n), numericArrayOf(n)
	filled, notionals, fees, holds := numericArrayOf(n), numericArrayOf(n), numericArrayOf(n), numericArrayOf(n)
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
		quantities.decimal(order.Quantity)
		prices.optionalDecimal(order.Price)
		o.statuses = append(o.statuses, string(row.status))
		o.rejects = append(o.rejects, optionalText(string(row.rejectReason)))
		o.cancels = append(o.cancels, optionalText(string(row.cancelReason)))
		filled.amount(&row.filled)
		notionals.amount(&row.notional)
		fees.amount(&row.fees)
		holds.decimal(row.hold)
		o.rests = append(o.rests, row.rests)
		o.tokens = append(o.tokens, row.req.token)
		o.created = append(o.created, order.CreatedAt)
		o.duplicateOf = append(o.duplicateOf, optionalText(row.duplicateOf))
		var protection *decimal.Decimal
		if row.protection.IsPos() {
			protection = &row.protection
		}
		protections.optionalDecimal(protection)
	}
	batch.Queue(sql.insertOrders, o.ids, o.accounts, o.clientIDs, o.symbols, o.sides, o.types, o.tifs,
		o.postOnly, quantities.param(), prices.param(), o.statuses, o.rejects, o.cancels, filled.param(),
		notionals.param(), fees.param(), holds.param(), o.rests, o.tokens, o.created, o.duplicateOf, protections.param())

	if w.owned != nil {
		w.owned.queueMakersGuard(batch, w)
	}
	if len(w.makers) > 0 {
		n := len(w.makers)
		ids, statuses, cancels := make([]string, 0, n), make([]string, 0, n), make([]*string, 0, n)
		filled, notionals, fees, givenUp := numericArrayOf(n), numericArrayOf(n), numericArrayOf(n), numericArrayOf(n)
		for _, m := range w.makers {
			ids = append(ids, m.id)
			filled.amount(&m.filled)
			notionals.amount(&m.notional)
			fees.amount(&m.fees)
			givenUp.amount(&m.givenUp)
			statuses = append(statuses, string(m.status))
			cancels = append(cancels, optionalText(string(m.cancelReason)))
		}
		batch.Queue(sql.updateMakers, ids, filled.param(), notionals.param(), fees.param(), givenUp.param(), statuses, cancels)
	}

	if len(w.txns) > 0 {
		kinds, orderIDs := make([]string, 0, len(w.txns)), make([]string, 0, len(w.txns))
		entries := 0
		for _, t := range w.txns {
			entries += len(t.Moves)
		}
		eTxns, eAmounts := make([]int64, 0, entries), numericArrayOf(entries)
		eAccounts, eAssets, eParts := make([]string, 0, entries), make([]string, 0, entries), make([]string, 0, entries)
		for _, t := range w.txns {
			kinds, orderIDs = append(kinds, string(t.Kind)), append(orderIDs, t.OrderID)
			for _, m := range t.Moves {
				eTxns = append(eTxns, int64(t.position))
				eAccounts, eAssets = append(eAccounts, m.Account), append(eAssets, m.Asset)
				eAmounts.decimal(m.Amount)
				eParts = append(eParts, string(m.Part))
			}
		}
		n := len(w.trades)
		tTxns := make([]int64, 0, n)
		symbols, makers, takers := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		makerAccounts, takerAccounts, sides := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		prices, quantities := numericArrayOf(n), numericArrayOf(n)
		makerFees, takerFees, makerRates, takerRates := numericArrayOf(n), numericArrayOf(n), numericArrayOf(n), numericArrayOf(n)
		for _, t := range w.trades {
			tTxns = append(tTxns, int64(t.txn.position))
			symbols, makers, takers = append(symbols, t.symbol), append(makers, t.maker), append(takers, t.taker)
			makerAccounts, takerAccounts = append(makerAccounts, t.makerAccount), append(takerAccounts, t.takerAccount)
			sides = append(sides, string(t.takerSide))
			prices.decimal(t.price)
			quantities.decimal(t.quantity)
			makerFees.decimal(t.makerFee)
			takerFees.decimal(t.takerFee)
			makerRates.decimal(t.makerFeeBps)
			takerRates.decimal(t.takerFeeBps)
		}
		traded, lastPrices := []string{}, numericArrayOf(len(w.books))
		for symbol, book := range w.books {
			if book.traded {
				traded = append(traded, symbol)
				lastPrices.decimal(book.in.LastPrice)
			}
		}
		batch.Queue(sql.writeLedger, kinds, orderIDs, eTxns, eAccounts, eAssets, eAmounts.param(), eParts,
			tTxns, symbols, makers, takers, makerAccounts, takerAccounts, sides, prices.param(), quantities.param(),
			makerFees.param(), takerFees.param(), makerRates.param(), takerRates.param(), traded, lastPrices.param())
	}
	// The batch's events, one outbox row per account and instrument, after
	// every write they snapshot (the orders, makers and trades: no balance);
	// the takers' rows are the ones it inserts (an order settled before is
	// not decided again), so their order.accepted events come with it.
	// Before the balance locks: the heaviest statement of the write, it
	// would otherwise hold other instruments' batches that move the same
	// accounts for its whole run.
	touched := make([]string, 0, len(w.takers)+len(w.makers))
	takers := make([]string, 0, len(w.takers))
	for _, row := range w.takers {
		touched, takers = append(touched, row.order.ID), append(takers, row.order.ID)
	}
	for _, m := range w.makers {
		touched = append(touched, m.id)
	}
	var events []orders.OutboxEntry
	batch.Queue(sql.events, touched, takers, takers).Query(func(rows pgx.Rows) error {
		var err error
		events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
		return err
	})
	lockAndGuard()
	// Each moved balance by what the batch moved its parts by, and one
	// outbox row listing every moved balance at the version it reaches:
	// the coherence consumer acts only on a version newer than the one it
	// applied, and then reads the balance as it is, so the versions the
	// batch passed through on the way need no line of their own.
	var moved []*lockedBalance
	for _, b := range w.balances {
		if b.changes > 0 {
			moved = append(moved, b)
		}
	}
	var outbox []orders.OutboxEntry
	if len(moved) > 0 {
		slices.SortFunc(moved, func(a, b *lockedBalance) int {
			return cmp.Or(strings.Compare(a.acc, b.acc), strings.Compare(a.asset, b.asset))
		})
		n := len(moved)
		names, accounts, assets := make([]string, n), make([]string, n), make([]string, n)
		available, held, changes := numericArrayOf(n), numericArrayOf(n), make([]int64, n)
		for i, b := range moved {
			names[i], accounts[i], assets[i] = b.name, b.acc, b.asset
			available.amount(&b.movedAvailable)
			held.amount(&b.movedHeld)
			changes[i] = b.changes
		}
		// Every moved row exists: the batch locked it (settle_lock.sql).
		batch.Queue(sql.balances, names, accounts, assets, available.param(), held.param(), changes,
			form.row, form.values).Query(func(rows pgx.Rows) error {
			var err error
			outbox, err = pgx.CollectRows(rows, pgx.RowToStructByPos[orders.OutboxEntry])
			return err
		})
	}
	batch.Queue(commitSQL).Exec(func(tag pgconn.CommandTag) error {
		if tag.String() != commitSQL {
			return fmt.Errorf("the commit answered %s", tag)
		}
		return nil
	})
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return nil, err
	}
	// In the order of their ids, as the sweep relays them.
	return append(events, outbox...), nil
}

func optionalText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
