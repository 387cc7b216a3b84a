package emq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Claim is a job leased to the caller. Token is the job's attempts after the
// claim: every later move of this lease presents it, and a move with an older
// token is refused with ErrStale.
type Claim struct {
	ID      string
	Kind    string
	Group   string
	Payload []byte
	Token   int64
	// Deadline is when the lease ends unless extended, by the server's clock.
	Deadline time.Time
}

// candidateSlack widens the candidate read so that claimers racing for the
// head of the queue still fill their batch from the ids behind it.
const candidateSlack = 2

// Claim leases up to n pending jobs, next in fair-lane order, for lease. It
// returns no jobs, and no error, when nothing is pending.
//
// Selection is read-then-move: the candidate ids are read first so the claim
// script can be handed every job key it touches; the script takes only the
// candidates still pending, so concurrent claimers never share a job.
func (q *Queue) Claim(ctx context.Context, n int, lease time.Duration) ([]Claim, error) {
	if n <= 0 {
		return nil, nil
	}
	for {
		candidates, err := q.client.rdb.ZRange(ctx, q.pendingKey(), 0, int64(n*candidateSlack-1)).Result()
		if err != nil {
			return nil, fmt.Errorf("emq: claim on %s: %w", q.name, err)
		}
		if len(candidates) == 0 {
			return nil, nil
		}
		keys := append(make([]string, 0, 4+len(candidates)), q.pendingKey(), q.activeKey(), q.lanesKey(), q.clockKey())
		args := append(make([]any, 0, 2+len(candidates)), lease.Milliseconds(), n)
		for _, id := range candidates {
			keys = append(keys, q.jobKey(id))
			args = append(args, id)
		}
		reply, err := claimScript.Run(ctx, q.client.rdb, keys, args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("emq: claim on %s: %w", q.name, scriptError(err))
		}
		claims, err := decodeClaims(reply)
		if err != nil {
			return nil, fmt.Errorf("emq: claim on %s: %w", q.name, err)
		}
		// Every candidate gone to other claimers while more wait behind them:
		// read again rather than report an empty queue.
		if len(claims) > 0 || len(candidates) < n*candidateSlack {
			return claims, nil
		}
	}
}

func decodeClaims(reply []any) ([]Claim, error) {
	if len(reply) == 0 || (len(reply)-1)%5 != 0 {
		return nil, fmt.Errorf("unexpected claim reply of %d values", len(reply))
	}
	deadline, ok := reply[0].(int64)
	if !ok {
		return nil, fmt.Errorf("unexpected claim deadline %T", reply[0])
	}
	claims := make([]Claim, 0, (len(reply)-1)/5)
	for i := 1; i < len(reply); i += 5 {
		id, _ := reply[i].(string)
		token, _ := reply[i+1].(int64)
		kind, _ := reply[i+2].(string)
		group, _ := reply[i+3].(string)
		payload, _ := reply[i+4].(string)
		claims = append(claims, Claim{
			ID: id, Token: token, Kind: kind, Group: group, Payload: []byte(payload),
			Deadline: time.UnixMilli(deadline),
		})
	}
	return claims, nil
}

// Extend renews the lease of a claimed job to lease from now and returns the
// new deadline; ErrStale when the lease was lost.
func (q *Queue) Extend(ctx context.Context, id string, token int64, lease time.Duration) (time.Time, error) {
	deadline, err := extendScript.Run(ctx, q.client.rdb, []string{q.jobKey(id), q.activeKey()},
		id, token, lease.Milliseconds()).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("emq: extend %s on %s: %w", id, q.name, scriptError(err))
	}
	return time.UnixMilli(deadline), nil
}

// Complete finishes a claimed job; ErrStale when the lease was lost, in which
// case the job is untouched and belongs to whoever holds it now.
func (q *Queue) Complete(ctx context.Context, id string, token int64) error {
	err := completeScript.Run(ctx, q.client.rdb, []string{q.jobKey(id), q.activeKey(), q.doneKey(), q.finishedKey()},
		id, token, q.retention).Err()
	if err != nil {
		return fmt.Errorf("emq: complete %s on %s: %w", id, q.name, scriptError(err))
	}
	return nil
}

// RetryPolicy says how often and how soon failed jobs run again.
type RetryPolicy struct {
	// MaxAttempts is how many attempts a job gets before it is dead.
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt; it doubles per attempt.
	BaseDelay time.Duration
	// MaxDelay caps the backoff.
	MaxDelay time.Duration
}

// DefaultRetryPolicy: 10 attempts, backoff from 1 s doubling to at most 5 min.
var DefaultRetryPolicy = RetryPolicy{MaxAttempts: 10, BaseDelay: time.Second, MaxDelay: 5 * time.Minute}

// Retried is where a failed job went.
type Retried struct {
	// Dead is true when the job's attempts are spent (or it failed for good).
	Dead bool
	// At is when the job runs again (delayed) or when it died.
	At time.Time
}

// Retry gives up a failed attempt: the job runs again after an exponential
// backoff with jitter, or is dead past the attempt limit. ErrStale when the
// lease was lost.
func (q *Queue) Retry(ctx context.Context, id string, token int64, cause error, policy RetryPolicy) (Retried, error) {
	return q.fail(ctx, id, token, cause, policy, false)
}

// Bury moves a claimed job to dead at once: its failure is permanent and
// retrying cannot help. ErrStale when the lease was lost.
func (q *Queue) Bury(ctx context.Context, id string, token int64, cause error) error {
	_, err := q.fail(ctx, id, token, cause, DefaultRetryPolicy, true)
	return err
}

func (q *Queue) fail(ctx context.Context, id string, token int64, cause error, policy RetryPolicy, permanent bool) (Retried, error) {
	message := "failed"
	if cause != nil {
		message = cause.Error()
	}
	bury := "0"
	if permanent {
		bury = "1"
	}
	reply, err := retryScript.Run(ctx, q.client.rdb,
		[]string{q.jobKey(id), q.activeKey(), q.delayedKey(), q.deadKey()},
		id, token, message, policy.MaxAttempts, policy.BaseDelay.Milliseconds(), policy.MaxDelay.Milliseconds(),
		strconv.FormatFloat(rand.Float64(), 'f', 6, 64), bury).Slice()
	if err != nil {
		return Retried{}, fmt.Errorf("emq: retry %s on %s: %w", id, q.name, scriptError(err))
	}
	where, _ := reply[0].(string)
	at, _ := reply[1].(int64)
	return Retried{Dead: where == StateDead, At: time.UnixMilli(at)}, nil
}

// Release hands a claimed job back unfinished: it is claimable at once and
// the attempt does not count toward the limit. ErrStale when the lease was lost.
func (q *Queue) Release(ctx context.Context, id string, token int64) error {
	err := releaseScript.Run(ctx, q.client.rdb,
		[]string{q.jobKey(id), q.activeKey(), q.pendingKey(), q.lanesKey(), q.clockKey()}, id, token).Err()
	if err != nil {
		return fmt.Errorf("emq: release %s on %s: %w", id, q.name, scriptError(err))
	}
	return nil
}

// Promote moves up to limit delayed jobs whose time has come into their lanes
// and returns how many it moved.
func (q *Queue) Promote(ctx context.Context, limit int) (int, error) {
	candidates, err := q.due(ctx, q.delayedKey(), limit)
	if err != nil || len(candidates) == 0 {
		return 0, wrapRead("promote", q.name, err)
	}
	keys := []string{q.delayedKey(), q.pendingKey(), q.lanesKey(), q.tagsKey(), q.clockKey()}
	args := make([]any, 0, len(candidates))
	for _, id := range candidates {
		keys = append(keys, q.jobKey(id))
		args = append(args, id)
	}
	promoted, err := promoteScript.Run(ctx, q.client.rdb, keys, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("emq: promote on %s: %w", q.name, scriptError(err))
	}
	return promoted, nil
}

// Reaped counts what Reap did.
type Reaped struct {
	// Requeued jobs are pending again, at the front of the rotation.
	Requeued int
	// Dead jobs had spent their attempts.
	Dead int
}

// Reap takes back up to limit jobs whose lease ran out: pending again, or
// dead once maxAttempts are spent. Many workers may reap at once.
func (q *Queue) Reap(ctx context.Context, maxAttempts, limit int) (Reaped, error) {
	candidates, err := q.due(ctx, q.activeKey(), limit)
	if err != nil || len(candidates) == 0 {
		return Reaped{}, wrapRead("reap", q.name, err)
	}
	keys := []string{q.activeKey(), q.pendingKey(), q.lanesKey(), q.clockKey(), q.deadKey()}
	args := append(make([]any, 0, 1+len(candidates)), maxAttempts)
	for _, id := range candidates {
		keys = append(keys, q.jobKey(id))
		args = append(args, id)
	}
	counts, err := reapScript.Run(ctx, q.client.rdb, keys, args...).Int64Slice()
	if err != nil {
		return Reaped{}, fmt.Errorf("emq: reap on %s: %w", q.name, scriptError(err))
	}
	return Reaped{Requeued: int(counts[0]), Dead: int(counts[1])}, nil
}

// due reads up to limit ids of a set scored by time whose time has come by
// the server's clock, read in the same round trip. Most reaper and promoter
// ticks find nothing due and end here, without running a script; the script
// still checks each candidate against the clock as it moves it.
func (q *Queue) due(ctx context.Context, key string, limit int) ([]string, error) {
	pipe := q.client.rdb.Pipeline()
	now := pipe.Time(ctx)
	earliest := pipe.ZRangeWithScores(ctx, key, 0, int64(limit-1))
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	cutoff := float64(now.Val().UnixMilli())
	var ids []string
	for _, member := range earliest.Val() {
		if member.Score > cutoff {
			break
		}
		ids = append(ids, member.Member.(string))
	}
	return ids, nil
}

func wrapRead(move, queue string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("emq: %s on %s: %w", move, queue, err)
}

// Cancel withdraws a job no worker holds (pending, or delayed for a retry).
// An active, dead or finished job is refused with ErrState; a missing one with
// ErrNotFound.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	err := cancelScript.Run(ctx, q.client.rdb,
		[]string{q.jobKey(id), q.pendingKey(), q.delayedKey(), q.lanesKey(), q.doneKey(), q.finishedKey()},
		id, q.retention).Err()
	if err != nil {
		return fmt.Errorf("emq: cancel %s on %s: %w", id, q.name, scriptError(err))
	}
	return nil
}

// Requeue puts a dead job back at the end of its lane with a fresh attempt
// budget; ErrState when it is not dead.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	err := requeueScript.Run(ctx, q.client.rdb,
		[]string{q.jobKey(id), q.deadKey(), q.pendingKey(), q.lanesKey(), q.tagsKey(), q.clockKey()}, id).Err()
	if err != nil {
		return fmt.Errorf("emq: requeue %s on %s: %w", id, q.name, scriptError(err))
	}
	return nil
}

// StateOf returns the state word a refusal carries ("active", "finished", …)
// when err is an ErrState refusal.
func StateOf(err error) (string, bool) {
	var scriptErr *ScriptError
	if !errors.As(err, &scriptErr) || scriptErr.Code != "EMQSTATE" {
		return "", false
	}
	return scriptErr.State, true
}
