package emq

import (
	"context"
	"errors"
	"fmt"
	"time"
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
