package emq

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A cancel (Cancel, CancelGroup) finishes a job as canceled in one script,
// and the canceller then records what it canceled elsewhere (ordergate: the
// order's canceled row). That record may fail after the script ran, or the
// script's reply may be lost, and the finished record, which the retention
// trims, would then be the cancel's only trace. So each canceled job's row
// is also kept apart until the canceller confirms it recorded the cancel
// (ConfirmCanceled); Unconfirmed lists the ones left, for a later pass to
// record.

// Unconfirmed returns up to limit jobs canceled at least olderThan ago (by
// the server's clock at the cancel and this process's now) whose cancel was
// not confirmed, in no particular order. A young one is left out: its
// canceller may still be recording it. A row that cannot be read is left
// out and named in the error, beside the jobs that could.
func (q *Queue) Unconfirmed(ctx context.Context, olderThan time.Duration, limit int) ([]JobInfo, error) {
	if limit <= 0 {
		return nil, nil
	}
	before := time.Now().Add(-olderThan)
	var jobs []JobInfo
	var unreadable []error
	seen := map[string]bool{}
	var cursor uint64
	for {
		pairs, next, err := q.client.rdb.HScan(ctx, q.canceledKey(), cursor, "", int64(limit)).Result()
		if err != nil {
			return jobs, fmt.Errorf("emq: read the unconfirmed cancels of %s: %w", q.name, err)
		}
		for i := 0; i+1 < len(pairs) && len(jobs) < limit; i += 2 {
			if seen[pairs[i]] {
				continue // HSCAN may return an entry twice
			}
			seen[pairs[i]] = true
			job, err := decodeRow(pairs[i], pairs[i+1])
			if err != nil {
				// A row no reader can make a job of is left, not met
				// again and again ahead of the ones that can be.
				unreadable = append(unreadable, err)
				continue
			}
			if !job.Finished.After(before) {
				jobs = append(jobs, job)
			}
		}
		if next == 0 || len(jobs) >= limit {
			if err := errors.Join(unreadable...); err != nil {
				return jobs, fmt.Errorf("emq: read the unconfirmed cancels of %s: %w", q.name, err)
			}
			return jobs, nil
		}
		cursor = next
	}
}

// ConfirmCanceled drops the kept rows of the canceled jobs ids: their
// cancels are recorded. An id not kept is no error.
func (q *Queue) ConfirmCanceled(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	if err := q.client.rdb.HDel(ctx, q.canceledKey(), ids...).Err(); err != nil {
		return fmt.Errorf("emq: confirm %d cancels on %s: %w", len(ids), q.name, err)
	}
	return nil
}
