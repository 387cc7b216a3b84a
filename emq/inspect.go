package emq

import (
	"context"
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

// Stats reads the queue's counts. Finding the oldest pending job reads the
// creation time of every pending job, so it costs one pipelined round trip
// per thousand of them: fine for inspection, not for a hot path.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	stats := Stats{Queue: q.name}
	pipe := q.client.rdb.Pipeline()
	counts := map[*int64]*redis.IntCmd{
		&stats.Pending:  pipe.ZCard(ctx, q.pendingKey()),
		&stats.Active:   pipe.ZCard(ctx, q.activeKey()),
		&stats.Delayed:  pipe.ZCard(ctx, q.delayedKey()),
		&stats.Dead:     pipe.ZCard(ctx, q.deadKey()),
		&stats.Finished: pipe.ZCard(ctx, q.doneKey()),
		&stats.Lanes:    pipe.HLen(ctx, q.lanesKey()),
	}
	timeCmd := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return Stats{}, fmt.Errorf("emq: stats of %s: %w", q.name, err)
	}
	for target, cmd := range counts {
		*target = cmd.Val()
	}
	oldest, err := q.oldestPending(ctx)
	if err != nil {
		return Stats{}, err
	}
	if !oldest.IsZero() {
		stats.OldestPending = timeCmd.Val().Sub(oldest)
	}
	return stats, nil
}

func (q *Queue) oldestPending(ctx context.Context) (time.Time, error) {
	const chunk = 1000
	var oldest int64
	for start := int64(0); ; start += chunk {
		ids, err := q.client.rdb.ZRange(ctx, q.pendingKey(), start, start+chunk-1).Result()
		if err != nil {
			return time.Time{}, fmt.Errorf("emq: pending of %s: %w", q.name, err)
		}
		if len(ids) == 0 {
			break
		}
		pipe := q.client.rdb.Pipeline()
		created := make([]*redis.StringCmd, len(ids))
		for i, id := range ids {
			created[i] = pipe.HGet(ctx, q.jobKey(id), "created")
		}
		if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
			return time.Time{}, fmt.Errorf("emq: pending of %s: %w", q.name, err)
		}
		for _, cmd := range created {
			if ms, err := strconv.ParseInt(cmd.Val(), 10, 64); err == nil && (oldest == 0 || ms < oldest) {
				oldest = ms
			}
		}
		if len(ids) < chunk {
			break
		}
	}
	if oldest == 0 {
		return time.Time{}, nil
	}
	return time.UnixMilli(oldest), nil
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
