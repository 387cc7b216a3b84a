package emq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/internal/scriptpipe"
)

// Ownership is a queue's ownership lease: one holder at a time, for a lease
// it extends, under a fencing token (docs/protocol.md, ownership). What the
// owner does with the queue is its own business; emq only says who owns it
// and under which token, so that the owner's writes elsewhere can be fenced
// by that token.
//
// The lease lives at OwnerKey(queue), under the queue's hash tag: on a
// Redis Cluster a queue and its ownership share a slot. Time is the
// server's. The token is a counter kept beside the lease that rises on
// every acquisition and is never reset by a release, so a later holder's
// token is higher than any earlier one's, as long as Redis keeps its writes
// (a failover that loses writes can hand a token out again: see
// docs/protocol.md).
type Ownership struct {
	queue *Queue
}

// Ownership is the queue's ownership lease.
func (q *Queue) Ownership() *Ownership { return &Ownership{queue: q} }

// Queue is the queue the ownership is of.
func (o *Ownership) Queue() *Queue { return o.queue }

func (o *Ownership) key() string { return OwnerKey(o.queue.name) }

// ErrReleased is the cause of a Held's context once its holder released it.
var ErrReleased = errors.New("emq: ownership released")

// OwnerState is a queue's ownership lease as the server holds it.
type OwnerState struct {
	// Holder is who took the lease last; empty when nobody took it since
	// it was released, or ever.
	Holder string
	// Token is the holder's token; without a holder, the last token handed
	// out (0 when none ever was).
	Token int64
	// Deadline is when the lease ends unless extended, and Since when the
	// holder took it, by the server's clock; zero without a holder.
	Deadline, Since time.Time
	// Held is true while the lease has a holder and its deadline is ahead.
	// A holder whose deadline passed has lost it, whoever takes it next.
	Held bool
	// At is the server's time of the read.
	At time.Time
}

func checkOwnership(holder string, lease time.Duration) error {
	if holder == "" {
		return errors.New("no holder")
	}
	if lease < minLease {
		return fmt.Errorf("lease %s is under the minimum %s", lease, minLease)
	}
	return nil
}

// Acquire takes the queue's ownership lease for holder, for lease from now,
// when nobody holds it (never taken, released, or its deadline passed by the
// server's clock), and answers the new token. A lease another holder has
// is refused: acquired false, no error. A holder acquiring a lease it holds
// gets a new token, which makes its earlier token stale: a holder name must
// be unique to one process life (the roster's are, see Own).
func (o *Ownership) Acquire(ctx context.Context, holder string, lease time.Duration) (token int64, acquired bool, err error) {
	return o.AcquireAbove(ctx, holder, lease, 0)
}

// AcquireAbove is Acquire with a token above floor: for an owner that found
// a durable store fenced with a token as high as the one Redis gave (a
// failover lost the acquisitions that raised the counter), which asks for
// one above what the store saw.
func (o *Ownership) AcquireAbove(ctx context.Context, holder string, lease time.Duration, floor int64) (token int64, acquired bool, err error) {
	token, _, acquired, err = o.acquire(ctx, holder, lease, floor)
	return token, acquired, err
}

// acquire also answers the lease's deadline by the server's clock.
func (o *Ownership) acquire(ctx context.Context, holder string, lease time.Duration, floor int64) (int64, time.Time, bool, error) {
	if err := checkOwnership(holder, lease); err != nil {
		return 0, time.Time{}, false, fmt.Errorf("emq: acquire ownership of %s: %w", o.queue.name, err)
	}
	reply, err := ownershipAcquireScript.Run(ctx, o.queue.client.rdb, []string{o.key()},
		holder, lease.Milliseconds(), max(floor, 0)).Slice()
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("emq: acquire ownership of %s: %w", o.queue.name, scriptError(err))
	}
	taken, _ := reply[0].(int64)
	if taken == 1 && len(reply) == 3 {
		token, ok := reply[1].(int64)
		deadline, ok2 := reply[2].(int64)
		if ok && ok2 {
			return token, time.UnixMilli(deadline), true, nil
		}
	}
	if taken == 0 && len(reply) == 4 {
		return 0, time.Time{}, false, nil
	}
	return 0, time.Time{}, false, fmt.Errorf("emq: acquire ownership of %s: unexpected reply %v", o.queue.name, reply)
}

// Extend renews the lease for lease from now and answers its new deadline by
// the server's clock, only while holder holds it under token and its
// deadline has not passed; otherwise an error wrapping ErrStale, and the
// holder must stop acting as the owner.
func (o *Ownership) Extend(ctx context.Context, holder string, token int64, lease time.Duration) (time.Time, error) {
	if err := checkOwnership(holder, lease); err != nil {
		return time.Time{}, fmt.Errorf("emq: extend ownership of %s: %w", o.queue.name, err)
	}
	deadline, err := ownershipExtendScript.Run(ctx, o.queue.client.rdb, []string{o.key()},
		holder, token, lease.Milliseconds()).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("emq: extend ownership of %s: %w", o.queue.name, scriptError(err))
	}
	return time.UnixMilli(deadline), nil
}

// Release gives the lease up, so another may take it at once, when holder
// holds it under token. A lease lost already (expired, or taken by another
// since) is left as it is, without an error: the holder has nothing to give
// up. The holder must have stopped acting as the owner first.
func (o *Ownership) Release(ctx context.Context, holder string, token int64) error {
	if err := ownershipReleaseScript.Run(ctx, o.queue.client.rdb, []string{o.key()}, holder, token).Err(); err != nil {
		return fmt.Errorf("emq: release ownership of %s: %w", o.queue.name, scriptError(err))
	}
	return nil
}

// Owner reads who holds the lease, under which token and until when.
func (o *Ownership) Owner(ctx context.Context) (OwnerState, error) {
	state, err := ownerState(ownershipReadScript.Run(ctx, o.queue.client.rdb, []string{o.key()}).Slice())
	if err != nil {
		return OwnerState{}, fmt.Errorf("emq: read ownership of %s: %w", o.queue.name, scriptError(err))
	}
	return state, nil
}

// ownerStates reads the ownership of many queues of one client in one round
// trip (on a cluster, one per node): one ownership_read call each.
func ownerStates(ctx context.Context, queues []*Queue) ([]OwnerState, error) {
	if len(queues) == 0 {
		return nil, nil
	}
	calls := make([]scriptpipe.Call, len(queues))
	for i, queue := range queues {
		calls[i] = scriptpipe.Call{Keys: []string{OwnerKey(queue.name)}}
	}
	cmds, err := scriptpipe.Run(ctx, queues[0].client.rdb, ownershipReadScript, calls)
	if err != nil {
		return nil, fmt.Errorf("emq: read ownerships: %w", err)
	}
	states := make([]OwnerState, len(queues))
	for i, cmd := range cmds {
		if states[i], err = ownerState(cmd.Slice()); err != nil {
			return nil, fmt.Errorf("emq: read ownership of %s: %w", queues[i].name, scriptError(err))
		}
	}
	return states, nil
}

// ownerState reads ownership_read's reply: {now, holder, token, deadline, since}.
func ownerState(reply []any, err error) (OwnerState, error) {
	if err != nil {
		return OwnerState{}, err
	}
	if len(reply) != 5 {
		return OwnerState{}, fmt.Errorf("unexpected reply %v", reply)
	}
	at, _ := reply[0].(int64)
	holder, _ := reply[1].(string)
	token, _ := reply[2].(int64)
	deadline, _ := reply[3].(int64)
	since, _ := reply[4].(int64)
	state := OwnerState{Holder: holder, Token: token, Held: holder != "" && deadline > at, At: time.UnixMilli(at)}
	if holder != "" {
		state.Deadline, state.Since = time.UnixMilli(deadline), time.UnixMilli(since)
	}
	return state, nil
}

// DefaultOwnershipLease is the ownership lease Hold and Own take when none
// is given: a dead owner's queue waits this long (and Own's poll) for
// another owner.
const DefaultOwnershipLease = 5 * time.Second

// HoldOptions configures Ownership.Hold; zero fields take their defaults.
type HoldOptions struct {
	// Lease is the ownership lease (default DefaultOwnershipLease),
	// extended every Lease/3.
	Lease time.Duration
	// Margin is how much sooner than the server the holder gives the lease
	// up when no extension comes through (default Lease/10): the time the
	// owner has, once told, to stop acting before another may take over.
	Margin time.Duration
	// Floor asks for a token above it (see AcquireAbove).
	Floor int64
	// Logger logs failed extensions (default slog.Default).
	Logger *slog.Logger
}

func (o HoldOptions) withDefaults() HoldOptions {
	if o.Lease <= 0 {
		o.Lease = DefaultOwnershipLease
	}
	if o.Margin <= 0 {
		o.Margin = o.Lease / 10
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Held is an ownership lease acquired by Hold and kept alive: it extends the
// lease every Lease/3 and ends its context the moment the holder must count
// the ownership lost.
type Held struct {
	ownership *Ownership
	holder    string
	token     int64
	options   HoldOptions
	logger    *slog.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu sync.Mutex
	// deadline is the local end of the lease, on this process's monotonic
	// clock: the send time of the last acquisition or extension the server
	// accepted, plus the lease, minus the margin.
	deadline time.Time
	expiry   *time.Timer
}

// Hold acquires the queue's ownership lease for holder, as Acquire does, and
// keeps it: the lease is extended every Lease/3 until it is released or
// lost. It answers nil and false when another holds the lease.
//
// The Held's context (not ctx, which bounds the acquisition alone) ends the
// moment the ownership is lost, with context.Cause wrapping ErrLeaseLost:
// when an extension is refused (wrapping ErrStale too: released, or taken
// under a newer token), or when no extension came through by the local
// deadline (Redis unreachable): the send time of the last acquisition or
// extension the server accepted, plus the lease, minus the margin, measured
// on this process's monotonic clock. The server's deadline is later than
// that by at least the margin, so the owner stops before another can take
// over. A failing extension is sent again with backoff until then.
func (o *Ownership) Hold(ctx context.Context, holder string, opts HoldOptions) (*Held, bool, error) {
	opts = opts.withDefaults()
	if opts.Margin >= opts.Lease {
		return nil, false, fmt.Errorf("emq: hold ownership of %s: margin %s is not under the lease %s", o.queue.name, opts.Margin, opts.Lease)
	}
	sentAt := time.Now()
	token, _, acquired, err := o.acquire(ctx, holder, opts.Lease, opts.Floor)
	if err != nil || !acquired {
		return nil, false, err
	}
	h := &Held{ownership: o, holder: holder, token: token, options: opts,
		logger: opts.Logger.With("queue", o.queue.name, "holder", holder, "token", token)}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	h.mu.Lock()
	h.deadline = sentAt.Add(opts.Lease - opts.Margin)
	h.expiry = time.AfterFunc(time.Until(h.deadline), h.expire)
	h.mu.Unlock()
	go h.keep()
	return h, true, nil
}

// Token is the lease's fencing token.
func (h *Held) Token() int64 { return h.token }

// Holder is who holds it.
func (h *Held) Holder() string { return h.holder }

// Ownership is the ownership held.
func (h *Held) Ownership() *Ownership { return h.ownership }

// Context ends when the ownership is lost (context.Cause wraps
// ErrLeaseLost) or released (ErrReleased).
func (h *Held) Context() context.Context { return h.ctx }

// Deadline is the local end of the lease as the last accepted extension
// set it (see Hold): an owner may decline to start work it cannot finish
// by then.
func (h *Held) Deadline() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// Release stops extending the lease, ends the context (ErrReleased, unless
// lost already) and gives the lease up in Redis, so another may take it at
// once. The holder must have stopped acting as the owner first. Releasing a
// lease lost already changes nothing and is no error.
func (h *Held) Release(ctx context.Context) error {
	h.cancel(ErrReleased)
	h.mu.Lock()
	h.expiry.Stop()
	h.mu.Unlock()
	return h.ownership.Release(ctx, h.holder, h.token)
}

// keep extends the lease every Lease/3, sooner again after a failure, until
// the context ends.
func (h *Held) keep() {
	interval := h.options.Lease / 3
	trouble := outage.Tracker{Loop: "ownership of " + h.ownership.queue.name}
	wait := interval
	for outage.Sleep(h.ctx, wait) {
		left := time.Until(h.Deadline())
		if left <= 0 {
			return // the expiry ends the context
		}
		ctx, cancel := context.WithTimeout(context.Background(), min(interval, left))
		sentAt := time.Now()
		_, err := h.ownership.Extend(ctx, h.holder, h.token, h.options.Lease)
		cancel()
		switch {
		case err == nil:
			trouble.Recover(h.logger)
			h.renewed(sentAt)
			wait = interval
		case errors.Is(err, ErrStale):
			h.lose(fmt.Errorf("%w: %w", ErrLeaseLost, err))
			return
		default:
			if h.ctx.Err() != nil {
				return
			}
			trouble.Fail(h.logger, err)
			wait = min(trouble.Backoff(h.options.Lease/10), interval)
		}
	}
}

// renewed moves the local deadline after an extension sent at sentAt.
func (h *Held) renewed(sentAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return // lost or released meanwhile: it stays so
	}
	if deadline := sentAt.Add(h.options.Lease - h.options.Margin); deadline.After(h.deadline) {
		h.deadline = deadline
		h.expiry.Reset(time.Until(deadline))
	}
}

// expire ends the ownership when its local deadline passed without an
// extension; an extension that moved the deadline meanwhile reset the timer.
func (h *Held) expire() {
	if time.Until(h.Deadline()) > 0 {
		return
	}
	h.lose(fmt.Errorf("%w: no extension of the ownership lease came through by its deadline", ErrLeaseLost))
}

func (h *Held) lose(cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		return
	}
	h.cancel(cause)
	h.logger.Warn("ownership lost; the owner must stop", "cause", cause.Error())
}
