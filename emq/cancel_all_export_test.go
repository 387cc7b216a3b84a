package emq

import "context"

// CancelGroupIn is CancelGroup with perRun entries looked at per script run,
// calling between after each run but the last, with the cursor the next run
// goes on from.
func (q *Queue) CancelGroupIn(ctx context.Context, group string, only *PayloadMember, perRun int,
	between func(cursor string) error) ([]JobInfo, error) {
	return q.cancelGroup(ctx, group, only, perRun, between)
}
