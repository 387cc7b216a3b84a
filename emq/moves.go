package emq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
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
	// admitted is when the job was admitted, by the server's clock: the
	// start of its first wait to be claimed.
	admitted time.Time
}

// laneSlack widens the lanes a claim names: n claims in fair-lane order take
// from at most the first n lanes of the rotation, and the lanes behind them
// keep a claim going when racing claimers empty some of those first.
const laneSlack = 2

// headsListed is the fewest groups a claim's reply lists for the next claim
// to name: enough for a worker's usual batch, which varies from one claim to
// the next with the jobs that finished meanwhile.
const headsListed = 64

// Claim leases up to n pending jobs, next in fair-lane order, for lease. It
// returns no jobs, and no error, when nothing is pending.
//
// Each lane is a list named after its group, and every key a script touches
// is passed in KEYS, so the claim script is handed the lanes at the head of
// the rotation as the previous claim's reply listed them. A lane not handed
// over that joined since (an admission to an idle group) is passed over
// while lanes handed over of the same tag follow it, which are as due; when
// the rotation has moved on to a lane not handed over otherwise, the script
// stops there and lists the lanes now at the head, and the claim goes on
// with those: one round trip while the rotation stays where the last claim
// left it, two when it moved. Without the pass, a claim under a backlog
// stopped at every lane admitted during its last round trip, a few jobs a
// run (docs/performance.md, "A claim under a backlog").
// Concurrent claimers pop different jobs off the lists: they never share one.
func (q *Queue) Claim(ctx context.Context, n int, lease time.Duration) ([]Claim, error) {
	claims, _, err := q.claim(ctx, n, lease, nil)
	return claims, err
}

// dueMoves is what a claim saw the maintenance moves had to do, by server
// time as its first script run began: its zero value, nothing.
type dueMoves struct {
	// seen: the claim's first run answered, so the fields below are known.
	seen bool
	// promote: a delayed job was due.
	promote bool
	// reap: a lease had run out.
	reap bool
	// promoteIn and reapIn are how long until a delayed job is due and a
	// lease runs out, negative when there was none: the moves have nothing
	// to do before then, unless a job is delayed or leased meanwhile.
	promoteIn, reapIn time.Duration
}

// claim is Claim that also reports what the maintenance moves had to do
// (claim.lua's due), which the worker's loops go by (maintenance.go).
//
// hints are groups its first run names beside the heads: the groups of
// the admissions whose wake woke the worker (a wake token, admit.lua; or
// the client's own admissions, localWake). A claim after the queue ran
// empty knows no heads, so it used to spend a run only to learn the lane
// an admission started, and a second to take its job: with the hint one
// run takes it. A wrong hint costs nothing but its key; the rotation
// still decides the order.
func (q *Queue) claim(ctx context.Context, n int, lease time.Duration, hints []string) ([]Claim, dueMoves, error) {
	var claims []Claim
	var due dueMoves
	for len(claims) < n {
		var groups []string
		if heads := q.heads.Load(); heads != nil {
			groups = *heads
		}
		want := n - len(claims)
		groups = groups[:min(len(groups), want*laneSlack)]
		for _, hint := range hints {
			if !slices.Contains(groups, hint) {
				groups = append(groups[:len(groups):len(groups)], hint)
			}
		}
		hints = nil
		keys := append(make([]string, 0, 9+len(groups)),
			q.jobsKey(), q.frontKey(), q.rotationKey(), q.lanesKey(), q.clockKey(), q.activeKey(), q.tagsKey(), q.wakeKey(),
			q.delayedKey())
		args := append(make([]any, 0, 3+len(groups)), lease.Milliseconds(), want, max(n*laneSlack, headsListed))
		for _, group := range groups {
			keys = append(keys, q.laneKey(group))
			args = append(args, group)
		}
		reply, err := claimScript.Run(ctx, q.client.rdb, keys, args...).Slice()
		var batch []Claim
		var heads []string
		var moves dueMoves
		if err == nil {
			batch, moves, heads, err = decodeClaims(reply)
		}
		if err != nil {
			if len(claims) > 0 {
				// The jobs claimed so far are leased to the caller: hand
				// them over rather than leave them to the reaper.
				return claims, due, nil
			}
			return nil, dueMoves{}, fmt.Errorf("emq: claim on %s: %w", q.name, scriptError(err))
		}
		if !due.seen {
			due = moves
		}
		q.heads.Store(&heads)
		claims = append(claims, batch...)
		if len(heads) == 0 {
			break // no lane holds a job
		}
	}
	return claims, due, nil
}

// decodeClaims reads the claim script's reply: the claims, what the
// maintenance moves have to do, then the groups at the head of the rotation.
func decodeClaims(reply []any) ([]Claim, dueMoves, []string, error) {
	const head = 5 // deadline, claimed, due, promote_in, reap_in
	if len(reply) < head {
		return nil, dueMoves{}, nil, fmt.Errorf("unexpected claim reply of %d values", len(reply))
	}
	deadline, ok := reply[0].(int64)
	claimed, ok2 := reply[1].(int64)
	due, ok3 := reply[2].(int64)
	promoteIn, ok4 := reply[3].(int64)
	reapIn, ok5 := reply[4].(int64)
	if !ok || !ok2 || !ok3 || !ok4 || !ok5 || claimed < 0 || int64(len(reply)) < head+2*claimed {
		return nil, dueMoves{}, nil, fmt.Errorf("unexpected claim reply %T %T %T %T %T of %d values",
			reply[0], reply[1], reply[2], reply[3], reply[4], len(reply))
	}
	moves := dueMoves{seen: true, promote: due&1 != 0, reap: due&2 != 0,
		promoteIn: time.Duration(promoteIn) * time.Millisecond, reapIn: time.Duration(reapIn) * time.Millisecond}
	claims := make([]Claim, 0, claimed)
	end := head + 2*int(claimed)
	for i := head; i < end; i += 2 {
		id, _ := reply[i].(string)
		row, _ := reply[i+1].(string)
		job, err := decodeRow(id, row)
		if err != nil {
			return nil, dueMoves{}, nil, err
		}
		claims = append(claims, Claim{
			ID: id, Token: job.Attempts, Kind: job.Kind, Group: job.Group, Payload: job.Payload,
			Deadline: time.UnixMilli(deadline), admitted: job.Created,
		})
	}
	heads := make([]string, 0, len(reply)-end)
	for _, group := range reply[end:] {
		name, _ := group.(string)
		heads = append(heads, name)
	}
	return claims, moves, heads, nil
}

// Extend renews the lease of a claimed job to lease from now and returns the
// new deadline; ErrStale when the lease was lost.
func (q *Queue) Extend(ctx context.Context, id string, token int64, lease time.Duration) (time.Time, error) {
	deadline, err := extendScript.Run(ctx, q.client.rdb, []string{q.jobsKey(), q.activeKey()},
		id, token, lease.Milliseconds()).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("emq: extend %s on %s: %w", id, q.name, scriptError(err))
	}
	return time.UnixMilli(deadline), nil
}

// Complete finishes a claimed job; ErrStale when the lease was lost, in which
// case the job is untouched and belongs to whoever holds it now.
func (q *Queue) Complete(ctx context.Context, id string, token int64) error {
	return q.CompleteMany(ctx, []Completion{{ID: id, Token: token}})[0]
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
		[]string{q.jobsKey(), q.activeKey(), q.delayedKey(), q.deadKey()},
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
		[]string{q.jobsKey(), q.activeKey(), q.frontKey(), q.lanesKey()}, id, token).Err()
	if err != nil {
		return fmt.Errorf("emq: release %s on %s: %w", id, q.name, scriptError(err))
	}
	return nil
}

// promoteRounds bounds the calls of one Promote: the first names the groups
// of the due jobs, the second moves them; more are needed only when other
// jobs fall due in between.
const promoteRounds = 3

// Promote moves up to limit delayed jobs whose time has come into their lanes
// and returns how many it moved.
//
// A job's lane is named after its group, which only its row tells; the
// script moves the due jobs whose lanes it was handed and names the groups of
// the others, so a promotion takes one call when nothing is due and two when
// something is.
func (q *Queue) Promote(ctx context.Context, limit int) (int, error) {
	promoted := 0
	var groups []string
	for round := 0; round < promoteRounds && promoted < limit; round++ {
		keys := append(make([]string, 0, 6+len(groups)),
			q.delayedKey(), q.jobsKey(), q.rotationKey(), q.lanesKey(), q.tagsKey(), q.clockKey())
		args := append(make([]any, 0, 1+len(groups)), limit-promoted)
		for _, group := range groups {
			keys = append(keys, q.laneKey(group))
			args = append(args, group)
		}
		reply, err := promoteScript.Run(ctx, q.client.rdb, keys, args...).Slice()
		if err != nil {
			return promoted, fmt.Errorf("emq: promote on %s: %w", q.name, scriptError(err))
		}
		moved, ok := reply[0].(int64)
		if !ok {
			return promoted, fmt.Errorf("emq: promote on %s: unexpected reply %v", q.name, reply)
		}
		promoted += int(moved)
		if moved > 0 {
			q.client.pending.signal(q.name)
		}
		if len(reply) == 1 {
			break
		}
		groups = groups[:0]
		for _, group := range reply[1:] {
			name, _ := group.(string)
			groups = append(groups, name)
		}
	}
	return promoted, nil
}

// Reaped counts what Reap did.
type Reaped struct {
	// Requeued jobs are pending again, on the front list that claims serve
	// before any lane: they waited their turn once already.
	Requeued int
	// Dead jobs had spent their attempts.
	Dead int
}

// Reap takes back up to limit jobs whose lease ran out by the server's
// clock: pending again, or dead once maxAttempts are spent. Many workers may
// reap at once.
func (q *Queue) Reap(ctx context.Context, maxAttempts, limit int) (Reaped, error) {
	counts, err := reapScript.Run(ctx, q.client.rdb,
		[]string{q.activeKey(), q.jobsKey(), q.frontKey(), q.lanesKey(), q.deadKey()},
		maxAttempts, limit).Int64Slice()
	if err != nil {
		return Reaped{}, fmt.Errorf("emq: reap on %s: %w", q.name, scriptError(err))
	}
	if counts[0] > 0 {
		q.client.pending.signal(q.name)
	}
	return Reaped{Requeued: int(counts[0]), Dead: int(counts[1])}, nil
}

// laneRounds bounds the calls of a move that must name the lane of a job's
// group before it knows the group: the first call learns it, the second
// moves, a third is needed only if the id was reused meanwhile.
const laneRounds = 3

// inLane runs a move that may need the lane of the job's group. The script
// answers {"lane", group} when it was handed another group's lane and
// changed nothing; run calls it again with that group's lane.
func (q *Queue) inLane(move string, id string, run func(group string) *redis.Cmd) error {
	group := ""
	for range laneRounds {
		reply, err := run(group).Result()
		if err != nil {
			return fmt.Errorf("emq: %s %s on %s: %w", move, id, q.name, scriptError(err))
		}
		answer, ok := reply.([]any)
		if !ok {
			return nil
		}
		if len(answer) != 2 || answer[0] != "lane" {
			return fmt.Errorf("emq: %s %s on %s: unexpected reply %v", move, id, q.name, answer)
		}
		group, _ = answer[1].(string)
	}
	return fmt.Errorf("emq: %s %s on %s: the job's group kept changing", move, id, q.name)
}

// Cancel withdraws a job no worker holds (pending, or delayed for a retry).
// An active, dead or finished job is refused with ErrState; a missing one with
// ErrNotFound.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	return q.inLane("cancel", id, func(group string) *redis.Cmd {
		return cancelScript.Run(ctx, q.client.rdb,
			[]string{q.jobsKey(), q.frontKey(), q.rotationKey(), q.lanesKey(), q.delayedKey(), q.doneKey(),
				q.finishedKey(), q.tagsKey(), q.laneKey(group), q.canceledKey()},
			id, q.retention, group)
	})
}

// Requeue puts a dead job back at the end of its lane with a fresh attempt
// budget; ErrState when it is not dead.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	return q.inLane("requeue", id, func(group string) *redis.Cmd {
		return requeueScript.Run(ctx, q.client.rdb,
			[]string{q.jobsKey(), q.deadKey(), q.rotationKey(), q.lanesKey(), q.tagsKey(), q.clockKey(), q.laneKey(group)},
			id, group)
	})
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
