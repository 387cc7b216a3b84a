package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

var (
	benchQuantity = decimal.MustParse("0.01000")
	benchPrice    = decimal.MustParse("50000.00")
)

// benchDedupRetention is the dedup retention of the bench's own queues.
const benchDedupRetention = time.Hour

// orderJob is the job Placer.Place admits for a 0.01 BTC limit order at
// 50,000 USD.
func orderJob(account, clientOrderID string, side orders.Side) (emq.Job, error) {
	_, job, err := placement.PlaceJob(orders.PlaceCommand{
		Account: account, ClientOrderID: clientOrderID, Symbol: "BTC-USD",
		Side: side, Type: orders.Limit, Quantity: benchQuantity, Price: benchPrice,
	})
	return job, err
}

// memoryResult is Redis memory per order job, pending and finished.
type memoryResult struct {
	Jobs         int     `json:"jobs"`
	PayloadBytes float64 `json:"payload_bytes"`
	// From INFO memory used_memory deltas, divided by Jobs.
	PendingBytes         float64 `json:"pending_bytes_per_job"`
	PendingBeyondPayload float64 `json:"pending_bytes_beyond_payload"`
	FinishedBytes        float64 `json:"finished_bytes_per_job"`
	FinishedBeyond       float64 `json:"finished_bytes_beyond_payload"`
	// From MEMORY USAGE of the queue's structures, each divided by Jobs.
	UsageJobRows   float64 `json:"usage_job_rows_share"`
	JobRowsCoding  string  `json:"job_rows_encoding"`
	UsageDedup     float64 `json:"usage_dedup_share"`
	UsageLaneLists float64 `json:"usage_lane_lists_share"`
	UsageLaneIndex float64 `json:"usage_lane_index_share"`
	UsagePerJob    float64 `json:"usage_pending_total"`
	UsageFinished  float64 `json:"usage_finished_share"`
	UsageDone      float64 `json:"usage_done_share"`
}

// pendingUsage names the structures a pending job's MEMORY USAGE share is
// made of, for the report.
func (m memoryResult) pendingUsage() string {
	return fmt.Sprintf("job rows (one %s hash) %.0f + dedup windows %.0f + lane lists %.0f + rotation/lanes/tags/front %.1f",
		m.JobRowsCoding, m.UsageJobRows, m.UsageDedup, m.UsageLaneLists, m.UsageLaneIndex)
}

func usedMemory(ctx context.Context, e *env) (int64, error) {
	info, err := e.queue.Redis().Info(ctx, "memory").Result()
	if err != nil {
		return 0, err
	}
	scanner := bufio.NewScanner(strings.NewReader(info))
	for scanner.Scan() {
		if value, ok := strings.CutPrefix(scanner.Text(), "used_memory:"); ok {
			return strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		}
	}
	return 0, errors.New("INFO memory has no used_memory")
}

// measureMemory admits jobs order jobs onto a fresh queue and reads the
// used_memory delta, then claims and completes them all with a retention
// that keeps every one and reads it again.
func (e *env) measureMemory(ctx context.Context, jobs int, progress func(string, ...any)) (memoryResult, error) {
	r := memoryResult{Jobs: jobs}
	queue := e.queue.Queue("bench-memory-"+e.run, emq.WithRetention(jobs+1), emq.WithDedupRetention(benchDedupRetention))
	if err := queue.Declare(ctx, orders.KindPlace); err != nil {
		return r, err
	}
	before, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	const batch = 1000
	var payloads int64
	for done := 0; done < jobs; {
		n := min(batch, jobs-done)
		list := make([]emq.Job, n)
		for i := range list {
			account := e.accounts[(done+i)%len(e.accounts)]
			if list[i], err = orderJob(account, fmt.Sprintf("mem-%s-%07d", e.run, done+i), orders.Buy); err != nil {
				return r, err
			}
			payloads += int64(len(list[i].Payload))
		}
		_, errs := queue.AdmitMany(ctx, list)
		if err := errors.Join(errs...); err != nil {
			return r, err
		}
		done += n
		if done%20000 == 0 {
			progress("memory: admitted %d of %d jobs…", done, jobs)
		}
	}
	pending, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	r.PayloadBytes = float64(payloads) / float64(jobs)
	r.PendingBytes = float64(pending-before) / float64(jobs)
	r.PendingBeyondPayload = r.PendingBytes - r.PayloadBytes

	perJob := func(bytes int64) float64 { return float64(bytes) / float64(jobs) }
	usage, err := queue.MemoryUsage(ctx)
	if err != nil {
		return r, err
	}
	r.UsageJobRows = perJob(usage.JobRows)
	r.JobRowsCoding = usage.JobRowsEncoding
	r.UsageDedup = perJob(usage.Dedup)
	r.UsageLaneLists = perJob(usage.LaneLists)
	r.UsageLaneIndex = perJob(usage.LaneIndex)
	r.UsagePerJob = r.UsageJobRows + r.UsageDedup + r.UsageLaneLists + r.UsageLaneIndex

	completed := 0
	for completed < jobs {
		claims, err := queue.Claim(ctx, 500, 10*time.Minute)
		if err != nil {
			return r, err
		}
		if len(claims) == 0 {
			return r, fmt.Errorf("memory: queue empty after %d of %d completions", completed, jobs)
		}
		list := make([]emq.Completion, len(claims))
		for i, claim := range claims {
			list[i] = emq.Completion{ID: claim.ID, Token: claim.Token}
		}
		if err := errors.Join(queue.CompleteMany(ctx, list)...); err != nil {
			return r, err
		}
		completed += len(claims)
		if completed%20000 < len(claims) {
			progress("memory: completed %d of %d jobs…", completed, jobs)
		}
	}
	finished, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	r.FinishedBytes = float64(finished-before) / float64(jobs)
	r.FinishedBeyond = r.FinishedBytes - r.PayloadBytes
	if usage, err = queue.MemoryUsage(ctx); err != nil {
		return r, err
	}
	r.UsageFinished = perJob(usage.Finished)
	r.UsageDone = perJob(usage.Done)
	// Leave no large keys behind on a server that is not ours.
	if err := queue.Purge(ctx); err != nil {
		return r, err
	}
	return r, nil
}
