package emq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"time"

	"github.com/ordergate/ordergate/internal/outage"
)

// ErrHandOver is the cause of an OwnHandler's context when its worker gives
// the ownership up: to rebalance (another worker needs a share) or because
// Own stops. The lease is kept until the handler returns, then released.
var ErrHandOver = errors.New("emq: ownership handed over")

// FencedError is what an OwnHandler returns when a durable store it writes
// to refused its token because it saw Floor or a higher one already (a
// Redis failover lost acquisitions that raised the token counter). Own
// then takes the lease again at once under a token above Floor, without
// leaving the queue to the others for a Grace, and runs the handler again.
type FencedError struct {
	// Floor is the highest token the store saw.
	Floor int64
	Err   error
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("emq: ownership fenced at token %d: %v", e.Floor, e.Err)
}

func (e *FencedError) Unwrap() error { return e.Err }

// Owned is a queue this worker owns, as an OwnHandler gets it.
type Owned struct {
	Queue *Queue
	// Token is the ownership's fencing token: every write the owner makes
	// elsewhere carries it, so that one made under an older token is
	// refused there.
	Token int64
	// Held is the lease, kept by Own: its Deadline says how long the
	// ownership lasts without another extension. The handler must not
	// release it; it returns instead.
	Held *Held
}

// OwnHandler runs for as long as this worker owns the queue. Its context
// ends when the ownership is lost (context.Cause wraps ErrLeaseLost: the
// handler must stop acting as the owner at once; another may take over
// within Margin) or handed over (ErrHandOver: finish what is under way and
// return; the lease is kept until then). When it returns, for whatever
// reason, Own releases the lease; a handler that returns on its own (an
// error, say) leaves the queue to the other workers for a Grace, except
// with a *FencedError, which takes the lease again above its floor.
type OwnHandler func(ctx context.Context, owned Owned) error

// OwnOptions configures Client.Own; zero fields take their defaults.
type OwnOptions struct {
	// Worker names this worker (required). Own adds a random suffix, so
	// each run is a holder of its own: a restarted worker never holds a
	// token of its previous life.
	Worker string
	// Roster names the set of workers the queues are spread over (default
	// "owners"): the workers sharing one list of queues name the same one.
	Roster string
	// Lease is each ownership's lease (default DefaultOwnershipLease), and
	// how long a worker stays in the roster without a beat: a dead
	// worker's queues are taken within Lease + Poll.
	Lease time.Duration
	// Margin: see HoldOptions (default Lease/10).
	Margin time.Duration
	// Poll is how often the worker beats in the roster and, while it holds
	// less than its share, looks for free leases (default 250ms); at most
	// half the lease. For two Polls after it joins, it beats every fifth of
	// one (rosterJoin).
	Poll time.Duration
	// Grace is how long the worker holds more than its share before it
	// hands the excess over, and how long it leaves a queue it gave up to
	// the others (default Lease).
	Grace time.Duration
	// Logger (default slog.Default).
	Logger *slog.Logger
}

const (
	defaultOwnRoster = "owners"
	defaultOwnPoll   = 250 * time.Millisecond
)

func (o OwnOptions) withDefaults() OwnOptions {
	if o.Roster == "" {
		o.Roster = defaultOwnRoster
	}
	if o.Lease <= 0 {
		o.Lease = DefaultOwnershipLease
	}
	if o.Margin <= 0 {
		o.Margin = o.Lease / 10
	}
	if o.Poll <= 0 {
		o.Poll = defaultOwnPoll
	}
	if o.Grace <= 0 {
		o.Grace = o.Lease
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Own spreads the ownership of queues over the workers running it, one
// owner per queue at a time, and runs handler for each queue this worker
// owns, until ctx is cancelled (docs/protocol.md, spreading ownership).
//
// Every Poll the worker beats in the roster (a sorted set of live workers on
// {emq}, each membership ending Lease after its last beat) and learns how
// many workers are live and what each holds; for two Polls after it
// joined, every fifth of a Poll, and in the first of them it takes at most
// one queue at a beat, at a beat that counted as many members as the one
// before (rosterJoin). Its share is ceil(queues / live workers). Below it,
// it takes free or expired leases, when no live worker holds fewer than it
// does (the neediest go first) or a lease stayed free for a Grace. Above
// it for a Grace (a worker joined), it hands the excess over; with every
// queue owned and some worker holding two fewer than the most, the first
// of those holding the most hands one over. A handed-over handler's
// context ends with ErrHandOver, and the lease is released once it
// returns. Every lease goes through one script, so workers racing for one
// queue never both own it.
//
// When ctx is cancelled the worker leaves the roster, hands every
// ownership over, waits for the handlers to return and releases their
// leases, then returns nil.
func (c *Client) Own(ctx context.Context, queues []*Queue, handler OwnHandler, opts OwnOptions) error {
	opts = opts.withDefaults()
	switch {
	case handler == nil:
		return errors.New("emq: own: no handler")
	case opts.Worker == "":
		return errors.New("emq: own: no worker name")
	case len(queues) == 0:
		return errors.New("emq: own: no queues")
	case opts.Lease < minLease:
		return fmt.Errorf("emq: own: lease %s is under the minimum %s", opts.Lease, minLease)
	case opts.Margin >= opts.Lease:
		return fmt.Errorf("emq: own: margin %s is not under the lease %s", opts.Margin, opts.Lease)
	case 2*opts.Poll > opts.Lease:
		// A membership lasts a lease from the last beat.
		return fmt.Errorf("emq: own: poll %s is over half the lease %s", opts.Poll, opts.Lease)
	}
	seen := make(map[string]bool, len(queues))
	for _, queue := range queues {
		if queue.client != c {
			return fmt.Errorf("emq: own: queue %s is another client's", queue.name)
		}
		if seen[queue.name] {
			return fmt.Errorf("emq: own: queue %s is listed twice", queue.name)
		}
		seen[queue.name] = true
	}
	s := &spread{
		queues:    queues,
		handler:   handler,
		options:   opts,
		holder:    fmt.Sprintf("%s/%08x", opts.Worker, rand.Uint32()),
		owned:     make(map[string]*ownedQueue),
		finished:  make(chan *ownedQueue, len(queues)),
		cooldown:  make(map[string]time.Time),
		freeSince: make(map[string]time.Time),
	}
	s.logger = opts.Logger.With("worker", s.holder, "roster", opts.Roster)
	return s.run(ctx)
}

// spread is one worker's run of Own. Only its loop touches its fields; the
// handlers' goroutines report their end on finished.
type spread struct {
	queues  []*Queue
	handler OwnHandler
	options OwnOptions
	holder  string
	logger  *slog.Logger

	owned    map[string]*ownedQueue
	finished chan *ownedQueue
	// acquisitions numbers the ownerships taken, so the newest go first
	// when some are handed over.
	acquisitions int
	// cooldown holds queues given up lately, until when they are left to
	// the others.
	cooldown map[string]time.Time
	// freeSince is when a queue was first seen free, of those seen free
	// at the last look.
	freeSince map[string]time.Time
	// giveSince is since when the worker holds more than it should.
	giveSince time.Time
	// nextSweep is when the worker looks for free leases next even though
	// the roster says every queue is owned.
	nextSweep time.Time
}

// ownedQueue is an ownership this worker holds, from its acquisition until
// its handler returned.
type ownedQueue struct {
	queue       *Queue
	held        *Held
	cancel      context.CancelCauseFunc
	number      int
	handingOver bool
	err         error
}

// lost: the lease went (refused, or ran out) before the worker gave it up.
func (o *ownedQueue) lost() bool { return errors.Is(context.Cause(o.held.Context()), ErrLeaseLost) }

// rosterMember is a live worker as the roster lists it.
type rosterMember struct {
	worker string
	held   int
}

func (s *spread) run(ctx context.Context) error {
	trouble := outage.Tracker{Loop: "ownership roster"}
	tick := time.NewTimer(0)
	defer tick.Stop()
	var joining rosterJoin
	for {
		select {
		case <-ctx.Done():
			return s.drain()
		case owned := <-s.finished:
			s.forget(owned)
			continue
		case <-tick.C:
		}
		members, err := s.beat(ctx, s.options.Lease)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			trouble.Fail(s.logger, err)
			tick.Reset(trouble.Backoff(s.options.Poll))
			continue
		}
		trouble.Recover(s.logger)
		switch joining.step(members, s.options.Poll) {
		case joinWaiting:
			tick.Reset(outage.Jittered(s.options.Poll / joinBeats))
		case joinTakingOne:
			s.balance(ctx, members, 1)
			tick.Reset(outage.Jittered(s.options.Poll / joinBeats))
		case joinTaking:
			s.balance(ctx, members, 0)
			tick.Reset(outage.Jittered(s.options.Poll / joinBeats))
		default:
			s.balance(ctx, members, 0)
			tick.Reset(outage.Jittered(s.options.Poll))
		}
	}
}

// joinBeats is how many beats a poll holds while a worker joins.
const joinBeats = 5

// rosterJoin is what a joining worker saw of the roster, for two polls
// from its first beat, while it beats every poll / joinBeats. In the
// first poll it takes one queue (when it is among the neediest) at a beat
// that counted as many members as the one before, and nothing at one that
// did not: workers started together see each other before any takes a
// queue, and own their first ones after two or three short beats rather
// than a poll; a worker alone in the roster for a few short beats, the
// others it was started with still coming, takes a queue a short beat
// rather than every queue. In the second poll it takes up to its share at
// every short beat, so that one the neediest rule held back (the others'
// counts are a beat old) takes the rest a short beat later, not a poll.
type rosterJoin struct {
	first   time.Time
	members int
}

// joinStep is what a joining worker does at a beat.
type joinStep int

const (
	joinWaiting   joinStep = iota // take nothing; beat again a short beat later
	joinTakingOne                 // take at most one queue; a short beat later
	joinTaking                    // take up to the share; a short beat later
	joinDone                      // balance every poll from now on
)

// step records a beat's members and says what the worker does.
func (r *rosterJoin) step(members []rosterMember, poll time.Duration) joinStep {
	now := time.Now()
	if r.first.IsZero() {
		r.first, r.members = now, len(members)
		return joinWaiting
	}
	still := len(members) == r.members
	r.members = len(members)
	switch since := now.Sub(r.first); {
	case since >= 2*poll:
		return joinDone
	case since >= poll:
		return joinTaking
	case still:
		return joinTakingOne
	default:
		return joinWaiting
	}
}

// beat renews this worker's membership (ttl 0 leaves the roster) with the
// ownerships it holds, and answers the live members.
func (s *spread) beat(ctx context.Context, ttl time.Duration) ([]rosterMember, error) {
	held := 0
	for _, owned := range s.owned {
		if !owned.lost() {
			held++
		}
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.options.Lease/3)
	defer cancel()
	client := s.queues[0].client
	reply, err := ownershipRosterScript.Run(callCtx, client.rdb,
		[]string{RosterKey(s.options.Roster), rosterHeldKey(s.options.Roster)},
		s.holder, ttl.Milliseconds(), held).Slice()
	if err != nil {
		return nil, fmt.Errorf("emq: beat in roster %s: %w", s.options.Roster, scriptError(err))
	}
	if len(reply)%2 != 1 {
		return nil, fmt.Errorf("emq: beat in roster %s: unexpected reply %v", s.options.Roster, reply)
	}
	members := make([]rosterMember, 0, len(reply)/2)
	for i := 1; i < len(reply); i += 2 {
		worker, _ := reply[i].(string)
		held, _ := reply[i+1].(int64)
		members = append(members, rosterMember{worker: worker, held: int(held)})
	}
	return members, nil
}

// balance hands over what this worker holds beyond its share, or takes
// free leases up to it: at most limit of them, when limit is above 0.
func (s *spread) balance(ctx context.Context, members []rosterMember, limit int) {
	keeping := 0
	for _, owned := range s.owned {
		if !owned.handingOver && !owned.lost() {
			keeping++
		}
	}
	// This worker's own count is the one it knows now, not the one it said.
	live, sum := 1, keeping
	most, fewest, fewestOthers := keeping, keeping, -1
	firstOfMost := s.holder
	for _, member := range members {
		if member.worker == s.holder {
			continue
		}
		live++
		sum += member.held
		if fewestOthers < 0 || member.held < fewestOthers {
			fewestOthers = member.held
		}
		fewest = min(fewest, member.held)
		if member.held > most || (member.held == most && member.worker < firstOfMost) {
			most, firstOfMost = member.held, member.worker
		}
	}
	total := len(s.queues)
	share := (total + live - 1) / live

	give := 0
	switch {
	case keeping > share:
		give = keeping - share
	case sum >= total && most-fewest >= 2 && firstOfMost == s.holder:
		give = 1
	}
	now := time.Now()
	if give > 0 {
		if s.giveSince.IsZero() {
			s.giveSince = now
		}
		if now.Sub(s.giveSince) >= s.options.Grace {
			s.handOver(give)
			s.giveSince = time.Time{}
		}
		return
	}
	s.giveSince = time.Time{}
	if keeping >= share || (sum >= total && now.Before(s.nextSweep)) {
		return
	}
	want := share - keeping
	if limit > 0 {
		want = min(want, limit)
	}
	s.take(ctx, want, fewestOthers < 0 || keeping <= fewestOthers)
}

// take acquires up to want free leases: any, when this worker is among the
// neediest; otherwise only those free for a Grace.
func (s *spread) take(ctx context.Context, want int, neediest bool) {
	now := time.Now()
	s.nextSweep = now.Add(s.options.Lease)
	var candidates []*Queue
	for _, queue := range s.queues {
		if _, owned := s.owned[queue.name]; owned {
			continue
		}
		if until, ok := s.cooldown[queue.name]; ok {
			if now.Before(until) {
				continue
			}
			delete(s.cooldown, queue.name)
		}
		candidates = append(candidates, queue)
	}
	if len(candidates) == 0 {
		return
	}
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.options.Lease/3)
	states, err := ownerStates(callCtx, candidates)
	cancel()
	if err != nil {
		s.logger.Warn("cannot read the ownerships", "err", err)
		return
	}
	var free []*Queue
	for i, queue := range candidates {
		// A lease this holder has but no handler runs for (the worker
		// lost sight of it while Redis was unreachable) is taken again
		// under a new token.
		if states[i].Held && states[i].Holder != s.holder {
			delete(s.freeSince, queue.name)
			continue
		}
		since, ok := s.freeSince[queue.name]
		if !ok {
			since = now
			s.freeSince[queue.name] = now
		}
		if neediest || now.Sub(since) >= s.options.Grace {
			free = append(free, queue)
		}
	}
	rand.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	for _, queue := range free {
		if want == 0 || ctx.Err() != nil {
			return
		}
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.options.Lease/3)
		held, acquired, err := queue.Ownership().Hold(callCtx, s.holder,
			HoldOptions{Lease: s.options.Lease, Margin: s.options.Margin, Logger: s.options.Logger})
		cancel()
		if err != nil {
			s.logger.Warn("cannot acquire an ownership", "queue", queue.name, "err", err)
			continue
		}
		delete(s.freeSince, queue.name)
		if !acquired {
			continue // another worker was first
		}
		want--
		s.start(queue, held)
	}
}

// start runs the handler for an ownership just acquired.
func (s *spread) start(queue *Queue, held *Held) {
	s.acquisitions++
	ctx, cancel := context.WithCancelCause(held.Context())
	owned := &ownedQueue{queue: queue, held: held, cancel: cancel, number: s.acquisitions}
	s.owned[queue.name] = owned
	s.logger.Info("took the ownership of a queue", "queue", queue.name, "token", held.Token())
	go func() {
		owned.err = s.call(ctx, owned)
		cancel(nil)
		releaseCtx, cancelRelease := context.WithTimeout(context.Background(), s.options.Lease/3)
		if err := held.Release(releaseCtx); err != nil {
			s.logger.Warn("cannot release an ownership; it ends with its lease", "queue", queue.name,
				"token", held.Token(), "err", err)
		}
		cancelRelease()
		s.finished <- owned
	}()
}

func (s *spread) call(ctx context.Context, owned *ownedQueue) (err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			s.logger.Error("ownership handler panicked", "queue", owned.queue.name, "panic", fmt.Sprint(recovered),
				"stack", string(debug.Stack()))
			err = fmt.Errorf("emq: ownership handler panicked: %v", recovered)
		}
	}()
	return s.handler(ctx, Owned{Queue: owned.queue, Token: owned.held.Token(), Held: owned.held})
}

// handOver asks the handlers of the n newest ownerships to give them up.
func (s *spread) handOver(n int) {
	var keeping []*ownedQueue
	for _, owned := range s.owned {
		if !owned.handingOver && !owned.lost() {
			keeping = append(keeping, owned)
		}
	}
	slices.SortFunc(keeping, func(a, b *ownedQueue) int { return b.number - a.number })
	for _, owned := range keeping[:min(n, len(keeping))] {
		owned.handingOver = true
		owned.cancel(ErrHandOver)
		s.logger.Info("handing the ownership of a queue over", "queue", owned.queue.name, "token", owned.held.Token())
	}
}

// forget drops an ownership whose handler returned. One given up, rather
// than lost, is left to the others for a Grace.
func (s *spread) forget(owned *ownedQueue) {
	delete(s.owned, owned.queue.name)
	lost := owned.lost()
	switch {
	case lost:
		s.logger.Warn("lost the ownership of a queue", "queue", owned.queue.name, "token", owned.held.Token(),
			"cause", context.Cause(owned.held.Context()).Error())
	case errors.As(owned.err, new(*FencedError)):
		s.logger.Info("ownership fenced by a store; taking it again above the store's token", "queue", owned.queue.name,
			"token", owned.held.Token(), "err", owned.err)
	case owned.err != nil && !errors.Is(owned.err, context.Canceled):
		s.logger.Warn("ownership handler failed; the queue is left to the others for a while", "queue", owned.queue.name,
			"token", owned.held.Token(), "err", owned.err)
	}
	var fenced *FencedError
	if !lost && !owned.handingOver && errors.As(owned.err, &fenced) {
		s.reacquire(owned.queue, fenced.Floor)
		return
	}
	if !lost {
		s.cooldown[owned.queue.name] = time.Now().Add(s.options.Grace)
	}
}

// reacquire takes a queue's lease again, under a token above floor, after
// its handler found a store fenced at floor. Another worker may have taken
// the lease meanwhile (it was released when the handler returned); then
// that one owns it, and meets the same fence.
func (s *spread) reacquire(queue *Queue, floor int64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.options.Lease/3)
	defer cancel()
	held, acquired, err := queue.Ownership().Hold(ctx, s.holder,
		HoldOptions{Lease: s.options.Lease, Margin: s.options.Margin, Floor: floor, Logger: s.options.Logger})
	switch {
	case err != nil:
		s.logger.Warn("cannot take a fenced ownership again", "queue", queue.name, "floor", floor, "err", err)
	case acquired:
		s.start(queue, held)
	}
}

// drain leaves the roster, hands every ownership over and waits for the
// handlers, whose leases are released as they return.
func (s *spread) drain() error {
	if _, err := s.beat(context.Background(), 0); err != nil {
		s.logger.Warn("cannot leave the roster; the membership ends with its ttl", "err", err)
	}
	for _, owned := range s.owned {
		if !owned.handingOver {
			owned.handingOver = true
			owned.cancel(ErrHandOver)
		}
	}
	for len(s.owned) > 0 {
		s.forget(<-s.finished)
	}
	return nil
}
