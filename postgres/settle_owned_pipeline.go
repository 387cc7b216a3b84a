package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
)

// The owner's batches (settle_owned.go): one driver goroutine per owned
// instrument decides them in turn, each while the write of the one before
// is in flight, and writes them one at a time.

// aloneTries bounds how often an order of a failed write settles alone
// again when its own write found the book or the instrument changed.
const aloneTries = 3

// Test hooks (tests only): ownedJoined runs when a request joined an
// owner's queue, beforeOwnedWrite before each write of an owner's batch.
var ownedJoined, beforeOwnedWrite func()

// settleOwned settles req as the owner of st's instrument. unowned: the
// settler gave the instrument up before deciding the order, which then
// settles under the instrument's lock.
func (s *Settler) settleOwned(ctx context.Context, st *ownedBook, req *settleRequest) (result settlement, unowned bool, err error) {
	// join's answer, not req.unowned: once req is queued, handBack may set
	// that field under the lock at any time until it closes req.done.
	if unowned, err := st.join(s, req); err != nil || unowned {
		return settlement{}, unowned, err
	}
	select {
	case <-req.done:
	case <-ctx.Done():
		if st.withdraw(req) {
			return settlement{}, false, fmt.Errorf("postgres: settle %s: waiting for a batch: %w", req.order.ID, context.Cause(ctx))
		}
		<-req.done
	}
	return req.result, req.unowned, req.err
}

// join queues req for the next batch and starts the driver if none runs.
// A fenced owner fails it; one giving up does not queue it (unowned).
func (st *ownedBook) join(s *Settler, req *settleRequest) (unowned bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.fenced != nil:
		return false, st.fenced
	case st.leaving:
		return true, nil
	}
	req.joined = s.metrics.now()
	st.waiting = append(st.waiting, req)
	if ownedJoined != nil {
		ownedJoined()
	}
	if !st.driving {
		st.driving, st.exited = true, make(chan struct{})
		go s.driveOwned(st)
	}
	select {
	case st.wake <- struct{}{}:
	default:
	}
	return false, nil
}

// withdraw takes a request out if no batch has taken it yet.
func (st *ownedBook) withdraw(req *settleRequest) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, list := range []*[]*settleRequest{&st.waiting, &st.redo} {
		if i := slices.Index(*list, req); i >= 0 {
			*list = slices.Delete(*list, i, i+1)
			return true
		}
	}
	return false
}

// handBack sends every request not decided yet back to the locked path;
// st.mu is held.
func (st *ownedBook) handBack() {
	for _, req := range slices.Concat(st.redo, st.waiting) {
		req.unowned = true
		close(req.done)
	}
	st.redo, st.waiting = nil, nil
}

// requeue puts requests back at the front: to settle one at a time
// (alone), or in the next batch.
func (st *ownedBook) requeue(batch []*settleRequest, alone bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if alone {
		st.redo = slices.Concat(batch, st.redo)
		return
	}
	st.waiting = slices.Concat(batch, st.waiting)
}

// next is what the driver decides next: a request to settle alone, or a
// batch of the waiting ones. None: the driver lands the write in flight
// (flying), or stops.
func (st *ownedBook) next(flying bool) (batch []*settleRequest, alone, stop bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.fenced != nil:
		for _, req := range slices.Concat(st.redo, st.waiting) {
			req.err = st.fenced
			close(req.done)
		}
		st.redo, st.waiting = nil, nil
	case st.leaving:
		st.handBack()
	case len(st.redo) > 0:
		req := st.redo[0]
		st.redo = st.redo[1:]
		taken([]*settleRequest{req})
		return []*settleRequest{req}, true, false
	case len(st.waiting) > 0:
		batch, st.waiting = nextBatch(st.waiting)
		taken(batch)
		return batch, false, false
	}
	if flying {
		return nil, false, false
	}
	st.driving = false
	close(st.exited)
	return nil, false, true
}

// taken marks when a batch took the requests measured.
func taken(batch []*settleRequest) {
	var now time.Time
	for _, req := range batch {
		if !req.joined.IsZero() {
			if now.IsZero() {
				now = time.Now()
			}
			req.taken = now
		}
	}
}

// decided marks when the requests measured were decided (at: zero when
// nothing is measured).
func decided(batch []*settleRequest, at time.Time) {
	for _, req := range batch {
		if !req.joined.IsZero() {
			req.decided = at
		}
	}
}

// driveOwned decides and writes the instrument's batches until none is
// waiting and none in flight.
func (s *Settler) driveOwned(st *ownedBook) {
	var flight *ownedFlight
	for {
		batch, alone, stop := st.next(flight != nil)
		switch {
		case stop:
			return
		case batch == nil:
			// Nothing to decide: the write in flight lands, unless a
			// request comes first, to be decided while it is written.
			select {
			case <-flight.done:
				s.land(st, flight, nil, false)
				flight = nil
			case <-st.wake:
			}
			continue
		}
		// An order alone, or one the write in flight holds (a redelivery
		// racing it), is decided after that write landed; so is any batch
		// once that write is done: its orders are answered (and relayed)
		// now rather than after this batch's decision.
		if flight != nil && (alone || st.stale || flight.blocks(batch) || flight.landed()) {
			ok := s.land(st, flight, batch, alone)
			flight = nil
			if !ok {
				continue
			}
		}
		p, err := s.prepareOwned(st, batch, flight)
		if err != nil {
			s.failOwned(st, batch, alone, false, err)
			continue
		}
		if flight != nil {
			// The requests that join while the write before is in flight
			// join this batch, decided on top of it.
			if p = s.gather(st, p, flight); p == nil {
				continue
			}
			// Decided on a book the failed write left: decide again.
			ok := s.land(st, flight, p.batch, false)
			flight = nil
			if !ok {
				continue
			}
		}
		st.book, st.provisional = p.w.books[st.symbol], p.w.provisional
		s.metrics.observeBatch(len(p.batch))
		if alone {
			if err := s.writeOwned(st, p, true); err != nil {
				s.failOwned(st, batch, true, true, err)
				continue
			}
			st.book, st.provisional = p.w.books[st.symbol], p.w.provisional
			s.answer(st, p)
			continue
		}
		flight = p
		go func() {
			defer close(p.done)
			p.err = s.writeOwned(st, p, false)
		}()
	}
}

// gatherBelow is the batch size up to which requests that join while a
// write is in flight are decided into the next batch. Each extension is a
// read of its own; a batch this big is no low-load batch, and under a
// backlog the extra reads cost more orders a second (BenchmarkSettleOwnership
// on one hot instrument) than the wait they save.
const gatherBelow = 32

// landed reports whether the flight's write is done, without waiting.
func (f *ownedFlight) landed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// gather waits for the write in flight (flight) to land, and meanwhile
// decides the requests that join on top of p, the batch decided to be
// written next, into p, while p holds fewer than gatherBelow: an order
// arriving while a write is in flight then waits for that write and its
// own batch's, not also for a batch decided before it came. It returns p,
// or nil when p had to be dropped (deciding a request into it failed
// midway): p's requests and those then wait again, first, to be decided
// anew on the book as the flight leaves it.
func (s *Settler) gather(st *ownedBook, p, flight *ownedFlight) *ownedFlight {
	for len(p.batch) < gatherBelow {
		select {
		case <-flight.done:
			return p
		case <-st.wake:
		}
		more := st.more(p, flight)
		if len(more) == 0 {
			continue
		}
		err := s.extendOwned(st, p, flight, more)
		switch {
		case err == nil:
		case errors.Is(err, errDecision):
			s.logger.Warn("deciding requests into an owner's next batch failed; deciding it again",
				"symbol", st.symbol, "orders", len(p.batch)+len(more), "err", err)
			st.requeue(slices.Concat(p.batch, more), false)
			return nil
		default:
			// p stands; more waits for the batch after it.
			st.requeue(more, false)
			return p
		}
	}
	return p
}

// more takes, for p, the requests waiting at the front that p's batch may
// take: up to maxSettleBatch in all, none of an order p or the write in
// flight holds (a redelivery racing them), none while an order waits to
// settle alone or the owner stops.
func (st *ownedBook) more(p, flight *ownedFlight) []*settleRequest {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.fenced != nil || st.leaving || st.stale || len(st.redo) > 0 || flight.blocks(nil) {
		return nil
	}
	ids := make(map[string]bool, len(p.batch))
	for _, req := range p.batch {
		ids[req.order.ID] = true
	}
	n := batchFront(st.waiting, max(maxSettleBatch-len(p.batch), 0), ids, flight.ids)
	if n == 0 {
		return nil
	}
	more := slices.Clone(st.waiting[:n])
	st.waiting = slices.Delete(st.waiting, 0, n)
	taken(more)
	return more
}

// extendOwned decides more on top of p's batch, into it: read as a batch
// of its own would be (the write in flight, flight, taken into account),
// the balance rows p's batch has not read added to its own. An error
// matching errDecision leaves p half decided, to be dropped; any other
// leaves p as it was.
func (s *Settler) extendOwned(st *ownedBook, p, flight *ownedFlight, more []*settleRequest) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	defer func() {
		if recovered := recover(); recovered != nil {
			s.logger.Error("deciding requests into an owner's batch panicked", "orders", len(more), "panic", fmt.Sprint(recovered),
				"stack", string(debug.Stack()))
			err = fmt.Errorf("%w: panic: %v", errDecision, recovered)
		}
	}()
	r, err := s.readOwned(ctx, st, more, flight)
	if err != nil {
		return err
	}
	phase := s.metrics.now()
	w := p.w
	for id := range r.existing {
		p.existing[id] = true
	}
	for pair, holder := range r.holders {
		// p's own takers hold theirs already in w.holders.
		if _, ok := w.holders[pair]; !ok {
			w.holders[pair] = holder
		}
		if _, ok := p.holders[pair]; !ok {
			p.holders[pair] = holder
		}
	}
	for key := range r.takerKeys {
		p.takerKeys[key] = true
	}
	for key, read := range r.snapshot {
		if _, ok := p.snapshot[key]; ok {
			// Read for p's batch: w has it, moved by p's decisions.
			continue
		}
		p.snapshot[key] = read
		switch b := w.balances[key]; {
		case b == nil:
			w.balances[key] = &lockedBalance{available: new(ledgerAmount).set(read.available),
				held: new(ledgerAmount).set(read.held), known: true, name: read.name, asset: read.asset, acc: read.acc,
				start: read.available}
		case !b.known:
			// A maker's row p's batch moved without reading it: its value
			// now is what was read plus those moves.
			b.available.plus(read.available, &b.movedAvailable)
			b.held.plus(read.held, &b.movedHeld)
			b.known, b.start = true, read.available
		}
	}
	w.ctx = ctx
	outcomes, err := w.decideAll(more, p.existing)
	if err != nil {
		return err
	}
	p.batch, p.outcomes = append(p.batch, more...), append(p.outcomes, outcomes...)
	p.record()
	decided(more, s.metrics.phaseDone(phaseDecide, phase))
	s.owned.extended.Add(int64(len(more)))
	return nil
}

// land waits for the write in flight and answers its orders: true when it
// committed. When it failed, the book is loaded again before the next
// decision and its orders settle again (failOwned), ahead of behind, the
// requests that came after them (to settle alone when alone): time
// priority and which order holds a client order id stay as they arrived.
func (s *Settler) land(st *ownedBook, flight *ownedFlight, behind []*settleRequest, alone bool) bool {
	<-flight.done
	if flight.err != nil {
		if len(behind) > 0 {
			st.requeue(behind, alone)
		}
		s.failOwned(st, flight.batch, false, true, flight.err)
		return false
	}
	s.answer(st, flight)
	return true
}

// answer hands each request of a committed batch its outcome, its outbox
// to relay after the batch before's (the driver answers them in the order
// they committed).
func (s *Settler) answer(st *ownedBook, p *ownedFlight) {
	s.metrics.observeStages(p.batch, p.writing, p.committed)
	for i := range p.outcomes {
		if r := &p.outcomes[i].result; len(r.outbox) > 0 {
			relayed := make(chan struct{})
			r.relayAfter, r.relayed, st.relayed = st.relayed, relayed, relayed
		}
	}
	for i, req := range p.batch {
		req.result, req.err = p.outcomes[i].result, p.outcomes[i].err
		close(req.done)
	}
}

// failOwned sorts out a batch that failed, reading or writing (its write
// may have committed when the connection broke). A refusal of the owner
// fences it for good; otherwise the book is loaded again, and the orders
// settle again: as a batch once when the book or a balance moved behind
// the owner (SETTLESTALE), one at a time when PostgreSQL refused the batch
// otherwise (one order may be at fault) or refused it again; or they
// return the failure for the queue to retry (the server unreachable).
func (s *Settler) failOwned(st *ownedBook, batch []*settleRequest, alone, wrote bool, err error) {
	if wrote {
		st.stale = true
	}
	if isFenced(err) || errors.Is(err, ErrFenced) {
		fenced := s.fencedError(st, err)
		s.logger.Warn("another owner took the instrument over; this settler owns it no more",
			"symbol", st.symbol, "epoch", st.epoch, "owner_epoch", fenced.Epoch)
		st.mu.Lock()
		st.fenced = fenced
		st.mu.Unlock()
		for _, req := range batch {
			req.err = fmt.Errorf("postgres: settle %s: %w", req.order.ID, fenced)
			close(req.done)
		}
		return
	}
	refused := refusedByServer(err) || errors.Is(err, errDecision)
	if isStale(err) && !alone && !slices.ContainsFunc(batch, func(req *settleRequest) bool { return req.tries > 0 }) {
		// The book or a balance moved behind the owner, no order's fault:
		// the batch goes again whole, once, on the book loaded again.
		s.logger.Info("owner's batch found the book or a balance moved; deciding it again on the book loaded again",
			"symbol", st.symbol, "orders", len(batch), "err", err)
		for _, req := range batch {
			req.tries = 1
		}
		st.requeue(batch, false)
		return
	}
	if refused && !alone {
		s.logger.Warn("owner's batch refused; its orders settle one by one on the book loaded again",
			"symbol", st.symbol, "orders", len(batch), "err", err)
		st.requeue(batch, true)
		return
	}
	for _, req := range batch {
		if alone && isStale(err) && req.tries < aloneTries {
			req.tries++
			st.requeue([]*settleRequest{req}, true)
			continue
		}
		if alone {
			req.err = classify(req.order, err)
		} else {
			req.err = fmt.Errorf("postgres: settle %s in a batch of %d: %w", req.order.ID, len(batch), err)
		}
		close(req.done)
	}
}

// fencedError is the refusal as a *FencedError, with the epoch PostgreSQL
// holds.
func (s *Settler) fencedError(st *ownedBook, err error) *FencedError {
	var fenced *FencedError
	if errors.As(err, &fenced) {
		return fenced
	}
	fenced = &FencedError{Symbol: st.symbol}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var terms string
	if err := s.db.QueryRow(ctx, settleOwnedEpochSQL, st.symbol).Scan(&fenced.Epoch, &terms); err != nil {
		fenced.Epoch = 0
	}
	return fenced
}

// passFence runs the owner's fence alone, for a batch that writes nothing
// yet is answered: a cancel decided as nothing on a book a newer owner
// moved since (it rested the order) would otherwise complete its job with
// the order open, and the gateway's retries find that done job.
func (s *Settler) passFence(ctx context.Context, fence *ownedFence) error {
	pooled, release, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	_, err = pooled.Exec(ctx, settleOwnedFenceSQL, fence.symbol, fence.epoch, fence.terms)
	return err
}

// isFenced reports whether err is settle_owned_fence.sql's refusal.
func isFenced(err error) bool { return raisedWith(err, fencedCodeWord) }

// isFundsStale reports whether err is settle_guard.sql's: a balance, not
// the book, moved.
func isFundsStale(err error) bool {
	var pgErr *pgconn.PgError
	return isStale(err) && errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Message, staleCodeWord+": balance")
}

// holdsAny reports whether the batch has an order the flight writes.
func (f *ownedFlight) holdsAny(batch []*settleRequest) bool {
	for _, req := range batch {
		if f.ids[req.order.ID] {
			return true
		}
	}
	return false
}

// acquire takes one of the settler's connections from the pool.
func (s *Settler) acquire(ctx context.Context) (*pgxpool.Conn, func(), error) {
	select {
	case s.connections <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, context.Cause(ctx)
	}
	pooled, err := s.db.Acquire(ctx)
	if err != nil {
		<-s.connections
		return nil, nil, err
	}
	return pooled, func() { releaseAfterTx(pooled); <-s.connections }, nil
}

// prepareOwned reads what the batch needs besides the book, outside any
// transaction, and decides it on the owner's book as the batch before left
// it (flight: in flight, its changes to the takers' balances added unless
// the read saw them committed).
func (s *Settler) prepareOwned(st *ownedBook, batch []*settleRequest, flight *ownedFlight) (p *ownedFlight, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	defer func() {
		if recovered := recover(); recovered != nil {
			s.logger.Error("deciding an owner's batch panicked", "orders", len(batch), "panic", fmt.Sprint(recovered),
				"stack", string(debug.Stack()))
			p, err = nil, fmt.Errorf("%w: panic: %v", errDecision, recovered)
		}
	}()
	if st.stale {
		if err := s.loadOwned(ctx, st, false); err != nil {
			return nil, err
		}
	}
	r, err := s.readOwned(ctx, st, batch, flight)
	if err != nil {
		return nil, err
	}
	phase := s.metrics.now()
	p = &ownedFlight{batch: batch, base: st.book, baseProvisional: st.provisional, existing: r.existing,
		holders: r.holders, snapshot: r.snapshot, takerKeys: r.takerKeys, done: make(chan struct{})}
	if err := s.decideOwned(ctx, st, p, r.snapshot); err != nil {
		return nil, err
	}
	decided(batch, s.metrics.phaseDone(phaseDecide, phase))
	if flight != nil {
		select {
		case <-flight.done:
		default:
			s.owned.overlaps.Add(1)
		}
	}
	return p, nil
}

// ownedRead is what a batch of an owner reads besides the book: which of
// its orders have a row, who holds their client order ids, its takers'
// balances (as the write in flight leaves them) and the balance rows its
// takers lock.
type ownedRead struct {
	existing  map[string]bool
	holders   map[clientOrderKey]string
	snapshot  map[balanceKey]*lockedBalance
	takerKeys map[balanceKey]bool
}

// readOwned reads, outside any transaction, what batch needs besides the
// book (flight: the write in flight, its changes to the takers' balances
// added unless the read saw them committed).
func (s *Settler) readOwned(ctx context.Context, st *ownedBook, batch []*settleRequest, flight *ownedFlight) (ownedRead, error) {
	phase := s.metrics.now()
	pooled, release, err := s.acquire(ctx)
	if err != nil {
		return ownedRead{}, err
	}
	defer func() {
		if release != nil {
			release()
		}
	}()
	phase = s.metrics.phaseDone(phaseAcquire, phase)

	n := len(batch)
	ids := make([]string, n)
	takerAccounts, takerSymbols, clientIDs := make([]string, n), make([]string, n), make([]string, n)
	for i, req := range batch {
		ids[i] = req.order.ID
		takerAccounts[i], takerSymbols[i], clientIDs[i] = req.order.Account, req.order.Symbol, req.order.ClientOrderID
	}
	existing := make(map[string]bool)
	holders := make(map[clientOrderKey]string)
	snapshot := make(map[balanceKey]*lockedBalance)
	committed := false
	read := &pgx.Batch{}
	// Generic plans for the reads below, until the batch's end.
	read.Queue(settleReadPlansSQL)
	read.Queue(ownedStatements.existing, ids).Query(func(rows pgx.Rows) error {
		var id string
		_, err := pgx.ForEachRow(rows, []any{&id}, func() error { existing[id] = true; return nil })
		return err
	})
	read.Queue(ownedStatements.duplicates, ids, takerAccounts, clientIDs).Query(func(rows pgx.Rows) error {
		var pair clientOrderKey
		var holder string
		_, err := pgx.ForEachRow(rows, []any{&pair.account, &pair.clientOrderID, &holder}, func() error {
			holders[pair] = holder
			return nil
		})
		return err
	})
	if flight != nil && flight.probe != "" {
		// Read before the balances: when the flight's row is there, so are
		// its balance moves.
		read.Queue(ownedStatements.existing, []string{flight.probe}).Query(func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, []any{new(string)}, func() error { committed = true; return nil })
			return err
		})
	}
	readTakers := func(rows pgx.Rows) error { return scanBalances(rows, snapshot) }
	read.Queue(ownedStatements.takers, takerAccounts, takerSymbols).Query(readTakers)
	if err := pooled.SendBatch(ctx, read).Close(); err != nil {
		return ownedRead{}, err
	}
	in := st.book.in
	takerKeys, err := openTakerRows(ctx, pooled, batch, map[string]orders.Instrument{in.Symbol: in},
		existing, snapshot, takerAccounts, takerSymbols)
	if err != nil {
		return ownedRead{}, err
	}
	release()
	release = nil
	s.metrics.phaseDone(phaseRead, phase)

	if flight != nil {
		if !committed {
			for key, delta := range flight.deltas {
				if b := snapshot[key]; b != nil {
					b.available.plus(b.available, delta[0])
					b.held.plus(b.held, delta[1])
				}
			}
		}
		for pair, holder := range flight.pendingHolders {
			if _, ok := holders[pair]; !ok {
				holders[pair] = holder
			}
		}
	}
	return ownedRead{existing: existing, holders: holders, snapshot: snapshot, takerKeys: takerKeys}, nil
}

// decideOwned decides p's batch on p.base with the balances given, and
// records what a batch decided after it must know.
func (s *Settler) decideOwned(ctx context.Context, st *ownedBook, p *ownedFlight, balances map[balanceKey]*lockedBalance) error {
	st.generation++
	w := newBatchWork(ctx, nil, nil, balances, p.holders)
	fence := st.fence
	w.owned, w.generation, w.provisional = &fence, st.generation, p.baseProvisional
	w.books[st.symbol] = p.base.share()
	outcomes, err := w.decideAll(p.batch, p.existing)
	if err != nil {
		return err
	}
	p.w, p.outcomes = w, outcomes
	p.record()
	return nil
}

// record sets what a batch decided after p, before p commits, must know.
func (p *ownedFlight) record() {
	w := p.w
	p.ids = make(map[string]bool, len(w.takers))
	p.pendingHolders = make(map[clientOrderKey]string, len(w.takers))
	for _, row := range w.takers {
		p.ids[row.order.ID] = true
		if row.duplicateOf == "" {
			p.pendingHolders[clientOrderKey{row.order.Account, row.order.ClientOrderID}] = row.order.ID
		}
	}
	p.probe = ""
	if len(w.takers) > 0 {
		p.probe = w.takers[0].order.ID
	}
	// Every move of the batch, holds and releases included (they are no
	// ledger transactions since holds left the ledger).
	p.deltas = make(map[balanceKey][2]*ledgerAmount, len(w.balances))
	for key, b := range w.balances {
		if b.movedAvailable.sign() == 0 && b.movedHeld.sign() == 0 {
			continue
		}
		p.deltas[key] = [2]*ledgerAmount{new(ledgerAmount).set(&b.movedAvailable), new(ledgerAmount).set(&b.movedHeld)}
	}
}

// writeOwned writes p's batch in one transaction behind the owner's fence
// and commits it. mayRedecide (an order alone, nothing decided after it):
// when a taker's balance moved past what the decision needed, the batch is
// decided again on the locked rows in the same transaction, as on the
// locked path.
func (s *Settler) writeOwned(st *ownedBook, p *ownedFlight, mayRedecide bool) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if len(p.w.takers) == 0 && len(p.w.makers) == 0 {
		// Only a command's answer rests on the book being the owner's: an
		// order found settled already is so whoever owns the instrument.
		if !slices.ContainsFunc(p.batch, func(req *settleRequest) bool { return req.command != nil }) {
			return nil
		}
		return s.passFence(ctx, p.w.owned)
	}
	defer func() {
		if recovered := recover(); recovered != nil {
			s.logger.Error("writing an owner's batch panicked", "orders", len(p.batch), "panic", fmt.Sprint(recovered),
				"stack", string(debug.Stack()))
			err = fmt.Errorf("%w: panic: %v", errDecision, recovered)
		}
	}()
	if beforeOwnedWrite != nil {
		beforeOwnedWrite()
	}
	phase := s.metrics.now()
	p.writing = phase
	pooled, release, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer release()
	lockSet := maps.Clone(p.takerKeys)
	for key := range p.w.written() {
		lockSet[key] = true
	}
	outbox, err := p.w.write(ctx, pooled, slices.Collect(maps.Keys(lockSet)), p.snapshot, true, s.balances)
	phase = s.metrics.phaseDone(phaseWrite, phase)
	if mayRedecide && isFundsStale(err) {
		s.metrics.observeRedecided()
		if _, err := pooled.Exec(ctx, backToSQL); err != nil {
			return err
		}
		locked := make(map[balanceKey]*lockedBalance)
		if err := lockRows(ctx, pooled, p.w.statements(), slices.Collect(maps.Keys(lockSet)), locked); err != nil {
			return err
		}
		if err := s.decideOwned(ctx, st, p, locked); err != nil {
			return err
		}
		p.w.owned.opened = true
		var extra []balanceKey
		for key := range p.w.written() {
			if !lockSet[key] {
				extra = append(extra, key)
			}
		}
		outbox, err = p.w.write(ctx, pooled, extra, locked, false, s.balances)
		s.metrics.phaseDone(phaseRedecide, phase)
	}
	if err != nil {
		return err
	}
	p.committed = s.metrics.now()
	for i := range p.outcomes {
		if p.outcomes[i].err == nil && !p.outcomes[i].result.duplicate {
			p.outcomes[i].result.outbox = outbox
			break
		}
	}
	return nil
}
