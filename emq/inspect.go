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
