package emq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ordergate/ordergate/internal/scriptpipe"
)

// AdmitMany admits jobs in one round trip; each job is admitted or refused
// on its own, exactly as by Admit. The answers and errors are in job order.
// Jobs whose admission met new dedup settings go again together.
func (q *Queue) AdmitMany(ctx context.Context, jobs []Job) ([]Admission, []error) {
	admissions := make([]Admission, len(jobs))
	errs := make([]error, len(jobs))
	todo := make([]int, len(jobs))
	for i := range todo {
		todo[i] = i
	}
	var woke []string // the groups of the jobs admitted
	defer func() {
		if len(woke) > 0 {
			q.client.pending.signal(q.name, woke...)
		}
	}()
	for round := 1; len(todo) > 0; round++ {
		calls := make([]scriptpipe.Call, 0, len(todo))
		index := make([]int, 0, len(todo))
		now := time.Now()
		for _, i := range todo {
			call, err := q.admitCall(jobs[i], now)
			if err != nil {
				errs[i] = err
				continue
			}
			calls = append(calls, call)
			index = append(index, i)
		}
		cmds, err := scriptpipe.Run(ctx, q.client.rdb, admitScript, calls)
		todo = todo[:0]
		for n, i := range index {
			if err != nil {
				errs[i] = err
				continue
			}
			admissions[i], errs[i] = q.admission(jobs[i], cmds[n])
			if errs[i] == nil {
				woke = withWakeGroup(woke, jobs[i].Group)
			}
			if round < dedupRounds && q.learnedDedup(errs[i]) {
				todo = append(todo, i)
			}
		}
	}
	return admissions, errs
}

// Completion names a claimed job by its id and lease token.
type Completion struct {
	ID    string
	Token int64
}

// CompleteMany completes claimed jobs in one round trip and one script run;
// each is completed or refused (ErrStale) on its own, exactly as by
// Complete. Errors are in order.
func (q *Queue) CompleteMany(ctx context.Context, jobs []Completion) []error {
	errs := make([]error, len(jobs))
	if len(jobs) == 0 {
		return errs
	}
	args := make([]any, 0, 1+2*len(jobs))
	args = append(args, q.retention)
	for _, job := range jobs {
		args = append(args, job.ID, job.Token)
	}
	reply, err := completeScript.Run(ctx, q.client.rdb, []string{q.jobsKey(), q.activeKey(), q.doneKey(), q.finishedKey()}, args...).Slice()
	if err == nil && len(reply) != len(jobs) {
		err = fmt.Errorf("unexpected reply of %d entries for %d jobs", len(reply), len(jobs))
	}
	for i, job := range jobs {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("emq: complete %s on %s: %w", job.ID, q.name, scriptError(err))
		case reply[i] == int64(1):
		default:
			message := fmt.Sprint(reply[i])
			var refusal error = errors.New(message)
			if known := refusalOf(message); known != nil {
				refusal = known
			}
			errs[i] = fmt.Errorf("emq: complete %s on %s: %w", job.ID, q.name, refusal)
		}
	}
	return errs
}
