package emq

import (
	"context"
	"fmt"
	"strings"
)

// PayloadMember picks the jobs whose payload is a JSON object holding the
// member Name with the string value Value: {"Name": "Value", ...}. The queue
// reads a payload only to match it; anything else (not JSON, not an object,
// no such member, a member that is not that string) does not match.
type PayloadMember struct {
	Name  string
	Value string
}

// cancelGroupEntries is the most entries of the delayed set, the front list
// and a lane that one run of the cancel_all script looks at: 2.5 to 4.3 ms
// of the server's time when every entry is an order withdrawn, measured by
// BenchmarkCancelGroup on 2 busy cores, where 5,000 in one run took 100 to
// 230 ms (docs/protocol.md).
const cancelGroupEntries = 250

// CancelGroup withdraws every job of the group that no worker holds, wherever
// it waits: in the group's lane, on the front list (handed back by a reaper
// or a draining worker) or delayed for a retry. With only set, it withdraws
// only the jobs whose payload has that member. Each job withdrawn finishes as
// canceled, as Cancel leaves it, and is returned as its finished record
// (state canceled, Finished set), each once, in the order the jobs were met.
//
// One script run looks at a bounded number of entries, so a large group (or
// a long delayed set, which holds every group's jobs) never holds the server
// for long: CancelGroup runs it again and again until it has looked at every
// entry. A job that stays pending or delayed throughout is withdrawn; one a
// worker claims meanwhile is left to the worker; one admitted meanwhile may
// or may not be withdrawn.
//
// When a run fails, CancelGroup returns the jobs the runs before withdrew
// with the error. A run whose reply was lost (a timeout, a dropped
// connection) is not sent again (docs/protocol.md, lost replies): the jobs it
// withdrew are canceled, but not among those returned.
func (q *Queue) CancelGroup(ctx context.Context, group string, only *PayloadMember) ([]JobInfo, error) {
	return q.cancelGroup(ctx, group, only, cancelGroupEntries, nil)
}

// cancelGroup is CancelGroup with perRun entries looked at per script run,
// calling between after each run but the last (tests move jobs there).
func (q *Queue) cancelGroup(ctx context.Context, group string, only *PayloadMember, perRun int,
	between func(cursor string) error) ([]JobInfo, error) {
	if group == "" {
		return nil, fmt.Errorf("emq: cancel the jobs of no group on %s", q.name)
	}
	var canceled []JobInfo
	cursor := ""
	for {
		jobs, next, err := q.cancelGroupRun(ctx, group, only, cursor, perRun)
		canceled = append(canceled, jobs...)
		if err != nil {
			return canceled, err
		}
		if next == "" {
			return canceled, nil
		}
		if err := ctx.Err(); err != nil {
			return canceled, fmt.Errorf("emq: cancel the jobs of %s on %s: %w", group, q.name, err)
		}
		if between != nil {
			if err := between(next); err != nil {
				return canceled, err
			}
		}
		cursor = next
	}
}

// cancelGroupRun is one run of the cancel_all script from cursor: the jobs it
// withdrew and the cursor to go on from, empty when it is done.
func (q *Queue) cancelGroupRun(ctx context.Context, group string, only *PayloadMember, cursor string,
	perRun int) ([]JobInfo, string, error) {
	name, value := "", ""
	if only != nil {
		if only.Name == "" {
			return nil, "", fmt.Errorf("emq: cancel the jobs of %s on %s: a payload member needs a name", group, q.name)
		}
		name, value = only.Name, only.Value
	}
	reply, err := cancelAllScript.Run(ctx, q.client.rdb,
		[]string{q.jobsKey(), q.frontKey(), q.rotationKey(), q.lanesKey(), q.delayedKey(), q.doneKey(),
			q.finishedKey(), q.tagsKey(), q.laneKey(group), q.canceledKey()},
		group, q.retention, max(perRun, 1), name, value, cursor).Slice()
	if err != nil {
		return nil, "", fmt.Errorf("emq: cancel the jobs of %s on %s: %w", group, q.name, scriptError(err))
	}
	var next string
	ok := len(reply) > 0
	if ok {
		next, ok = reply[0].(string)
	}
	if !ok || len(reply)%2 != 1 || (next != "" && !strings.ContainsAny(next[:1], "dfl")) {
		return nil, "", fmt.Errorf("emq: cancel the jobs of %s on %s: unexpected reply of %d values", group, q.name, len(reply))
	}
	jobs := make([]JobInfo, 0, len(reply)/2)
	for i := 1; i < len(reply); i += 2 {
		id, _ := reply[i].(string)
		row, _ := reply[i+1].(string)
		job, err := decodeRow(id, row)
		if err != nil {
			// The script ran: what it withdrew is canceled whatever this
			// process makes of its reply.
			return jobs, "", fmt.Errorf("emq: cancel the jobs of %s on %s: %w", group, q.name, err)
		}
		jobs = append(jobs, job)
	}
	return jobs, next, nil
}
