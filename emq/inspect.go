package emq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stats counts a queue's jobs per state.
type Stats struct {
	Queue   string
	Pending int64
	Active  int64
	Delayed int64
	Dead    int64
	// Finished counts the retained done and canceled jobs.
	Finished int64
	// Lanes is how many groups have pending jobs.
	Lanes int64
	// OldestPending is how long the oldest pending job has waited; zero when none.
	OldestPending time.Duration
}

// Stats reads the queue's counts. Pending jobs are counted on the front list
// and in every lane, one pipelined round trip per thousand lanes, and the
// oldest pending job is looked for among those next in line (the front list
// and each lane's head: a lane is first in, first out): fine for
// inspection, not for a hot path.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	stats := Stats{Queue: q.name}
	pipe := q.client.rdb.Pipeline()
	counts := map[*int64]*redis.IntCmd{
		&stats.Active:   pipe.ZCard(ctx, q.activeKey()),
		&stats.Delayed:  pipe.ZCard(ctx, q.delayedKey()),
		&stats.Dead:     pipe.ZCard(ctx, q.deadKey()),
		&stats.Finished: pipe.ZCard(ctx, q.doneKey()),
		&stats.Lanes:    pipe.HLen(ctx, q.lanesKey()),
	}
	front := pipe.LRange(ctx, q.frontKey(), 0, -1)
	timeCmd := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, fmt.Errorf("emq: stats of %s: %w", q.name, err)
	}
	for target, cmd := range counts {
		*target = cmd.Val()
	}
	next := front.Val()
	stats.Pending = int64(len(next))
	heads, queued, err := q.laneHeads(ctx)
	if err != nil {
		return Stats{}, err
	}
	stats.Pending += queued
	oldest, err := q.oldestCreated(ctx, append(next, heads...))
	if err != nil {
		return Stats{}, err
	}
	if !oldest.IsZero() {
		stats.OldestPending = timeCmd.Val().Sub(oldest)
	}
	return stats, nil
}

// inspectChunk is how many lanes or jobs one pipelined read of Stats covers.
const inspectChunk = 1000

// laneHeads reads the head of every lane in the rotation and how many jobs
// the lanes hold together.
func (q *Queue) laneHeads(ctx context.Context) ([]string, int64, error) {
	var heads []string
	var queued int64
	for start := int64(0); ; start += inspectChunk {
		groups, err := q.client.rdb.ZRange(ctx, q.rotationKey(), start, start+inspectChunk-1).Result()
		if err != nil {
			return nil, 0, fmt.Errorf("emq: lanes of %s: %w", q.name, err)
		}
		pipe := q.client.rdb.Pipeline()
		lengths := make([]*redis.IntCmd, len(groups))
		firsts := make([]*redis.StringCmd, len(groups))
		for i, group := range groups {
			lengths[i] = pipe.LLen(ctx, q.laneKey(group))
			firsts[i] = pipe.LIndex(ctx, q.laneKey(group), 0)
		}
		if len(groups) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return nil, 0, fmt.Errorf("emq: lanes of %s: %w", q.name, err)
			}
		}
		for i := range groups {
			queued += lengths[i].Val()
			if head := firsts[i].Val(); head != "" {
				heads = append(heads, head)
			}
		}
		if len(groups) < inspectChunk {
			return heads, queued, nil
		}
	}
}

// oldestCreated returns the earliest creation time of the jobs ids; zero when
// none of them has a row.
func (q *Queue) oldestCreated(ctx context.Context, ids []string) (time.Time, error) {
	var oldest time.Time
	for start := 0; start < len(ids); start += inspectChunk {
		chunk := ids[start:min(start+inspectChunk, len(ids))]
		rows, err := q.client.rdb.HMGet(ctx, q.jobsKey(), chunk...).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("emq: pending of %s: %w", q.name, err)
		}
		for i, row := range rows {
			text, ok := row.(string)
			if !ok {
				continue
			}
			info, err := decodeRow(chunk[i], text)
			if err != nil {
				return time.Time{}, fmt.Errorf("emq: pending of %s: %w", q.name, err)
			}
			if oldest.IsZero() || info.Created.Before(oldest) {
				oldest = info.Created
			}
		}
	}
	return oldest, nil
}

// LaneDepths returns each group's pending count.
func (q *Queue) LaneDepths(ctx context.Context) (map[string]int64, error) {
	raw, err := q.client.rdb.HGetAll(ctx, q.lanesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: lanes of %s: %w", q.name, err)
	}
	depths := make(map[string]int64, len(raw))
	for group, text := range raw {
		depths[group], _ = strconv.ParseInt(text, 10, 64)
	}
	return depths, nil
}

// DeadJobs returns up to limit dead jobs, most recent death first, with their
// last errors.
func (q *Queue) DeadJobs(ctx context.Context, limit int) ([]JobInfo, error) {
	ids, err := q.client.rdb.ZRevRange(ctx, q.deadKey(), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: dead jobs of %s: %w", q.name, err)
	}
	jobs := make([]JobInfo, 0, len(ids))
	for _, id := range ids {
		job, err := q.Job(ctx, id)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// Queues lists the queues declared on the server.
func (c *Client) Queues(ctx context.Context) ([]string, error) {
	names, err := c.rdb.SMembers(ctx, queuesKey).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: queues: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

// DeadCount is how many jobs are dead; unlike Stats it reads nothing else.
func (q *Queue) DeadCount(ctx context.Context) (int64, error) {
	n, err := q.client.rdb.ZCard(ctx, q.deadKey()).Result()
	if err != nil {
		return 0, fmt.Errorf("emq: dead jobs of %s: %w", q.name, err)
	}
	return n, nil
}

// StateTime is the time that goes with a job's place in state, by the
// server's clock: when its lease ends (StateActive), when its retry is due
// (StateDelayed) or when it died (StateDead). A job's row does not hold it.
// ErrNotFound when the job is not in that state (it may have moved on since
// it was read); other states keep no time.
func (q *Queue) StateTime(ctx context.Context, id, state string) (time.Time, error) {
	var set string
	switch state {
	case StateActive:
		set = q.activeKey()
	case StateDelayed:
		set = q.delayedKey()
	case StateDead:
		set = q.deadKey()
	default:
		return time.Time{}, fmt.Errorf("emq: %s jobs keep no time", state)
	}
	ms, err := q.client.rdb.ZScore(ctx, set, id).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, fmt.Errorf("emq: job %s on %s is not %s: %w", id, q.name, state, ErrNotFound)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("emq: %s time of job %s on %s: %w", state, id, q.name, err)
	}
	return time.UnixMilli(int64(ms)), nil
}

// Lease is an active job and when its lease ends unless renewed, by the
// server's clock.
type Lease struct {
	ID       string
	Deadline time.Time
}

// Leases lists every active job with its lease deadline, earliest first, in
// one read: for inspection and tests, not for a hot path.
func (q *Queue) Leases(ctx context.Context) ([]Lease, error) {
	held, err := q.client.rdb.ZRangeWithScores(ctx, q.activeKey(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("emq: leases of %s: %w", q.name, err)
	}
	leases := make([]Lease, len(held))
	for i, z := range held {
		id, _ := z.Member.(string)
		leases[i] = Lease{ID: id, Deadline: time.UnixMilli(int64(z.Score))}
	}
	return leases, nil
}
