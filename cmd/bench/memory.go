package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
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
	// The queue's memory alone: the order.accepted event an admission
	// appends lives in the account's log, under the log's own retention
	// (docs/performance.md gives what it costs).
	job.Log = nil
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
	// OrderDedup and CoherenceDedup are what a sustained rate leaves: the
	// dedup entries of the orders queue and of the balances coherence queue.
	OrderDedup     dedupResult `json:"order_dedup"`
	CoherenceDedup dedupResult `json:"coherence_dedup"`
	// Events is what orders' events cost Redis and PostgreSQL.
	Events eventsMemoryResult `json:"events"`
}

// dedupResult is what one queue's dedup windows hold per admitted job once
// its jobs are finished and their records trimmed away: under a sustained
// rate, the memory that grows with the queue's dedup retention.
type dedupResult struct {
	Jobs           int     `json:"jobs"`
	RetentionHours float64 `json:"retention_hours"`
	// HeldHours is the longest a key stays (emq.DedupHeld): the retention,
	// a window of half of it and the minute of clock allowance.
	HeldHours float64 `json:"held_hours"`
	// BytesPerJob is the used_memory delta, UsagePerJob the windows'
	// MEMORY USAGE, each divided by Jobs.
	BytesPerJob float64 `json:"bytes_per_job"`
	UsagePerJob float64 `json:"usage_per_job"`
	// PerJobPerHour is the bytes one job admitted an hour costs per hour of
	// retention at the peak, BytesPerJob × HeldHours / RetentionHours: a
	// queue admitting n jobs an hour under a retention of R hours holds
	// n × R × PerJobPerHour bytes of dedup entries at the most.
	PerJobPerHour float64 `json:"bytes_per_job_per_hour_of_retention"`
}

// pendingUsage names the structures a pending job's MEMORY USAGE share is
// made of, for the report.
func (m memoryResult) pendingUsage() string {
	return fmt.Sprintf("job rows (one %s hash) %.0f + dedup windows %.0f + lane lists %.0f + rotation/lanes/tags/front %.1f",
		m.JobRowsCoding, m.UsageJobRows, m.UsageDedup, m.UsageLaneLists, m.UsageLaneIndex)
}

// dedupMarkdown is the table of what a sustained rate leaves in Redis.
func (m memoryResult) dedupMarkdown() string {
	if m.OrderDedup.Jobs == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| Redis memory a sustained rate leaves: dedup entries, jobs finished, records trimmed | orders | balance coherence jobs, one change each |\n|---|---:|---:|\n")
	o, c := m.OrderDedup, m.CoherenceDedup
	row := func(name, format string, value func(dedupResult) float64) {
		fmt.Fprintf(&b, "| %s | "+format+" | "+format+" |\n", name, value(o), value(c))
	}
	row("jobs admitted and finished", "%.0f", func(d dedupResult) float64 { return float64(d.Jobs) })
	row("dedup retention R, hours", "%.3g", func(d dedupResult) float64 { return d.RetentionHours })
	row("a key held at most (R + R/2 + 1 min), hours", "%.3g", func(d dedupResult) float64 { return d.HeldHours })
	row("B per job, used_memory delta / job", "%.0f", func(d dedupResult) float64 { return d.BytesPerJob })
	row("B per job, MEMORY USAGE of the dedup windows / job", "%.0f", func(d dedupResult) float64 { return d.UsagePerJob })
	row("**B per job admitted an hour, per hour of retention** (used_memory × held / R)", "%.0f", func(d dedupResult) float64 { return d.PerJobPerHour })
	b.WriteString("\nThe relay puts a shard's balance changes of one settlement in one coherence job (up to placement.CoherenceBatch), so per balance change the coherence column is the most it costs.\n")
	return b.String()
}

// usedMemory is INFO memory's used_memory once no lazily freed object is
// pending: Purge unlinks, and the server frees large keys in the background,
// which would otherwise land in the next measurement's delta.
func usedMemory(ctx context.Context, e *env) (int64, error) {
	for deadline := time.Now().Add(30 * time.Second); ; {
		info, err := e.queue.Redis().Info(ctx, "memory").Result()
		if err != nil {
			return 0, err
		}
		fields := map[string]string{}
		scanner := bufio.NewScanner(strings.NewReader(info))
		for scanner.Scan() {
			if name, value, ok := strings.Cut(scanner.Text(), ":"); ok {
				fields[name] = strings.TrimSpace(value)
			}
		}
		used, ok := fields["used_memory"]
		if !ok {
			return 0, errors.New("INFO memory has no used_memory")
		}
		if pending := fields["lazyfree_pending_objects"]; pending == "" || pending == "0" || time.Now().After(deadline) {
			return strconv.ParseInt(used, 10, 64)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
	progress("memory: dedup entries of %d order jobs and %d balance coherence jobs, finished…", jobs, jobs)
	r.OrderDedup, r.CoherenceDedup, err = e.measureDedups(ctx, jobs, progress)
	return r, err
}

// measureDedup admits jobs made by job onto a fresh queue under retention,
// claiming and completing each batch as it goes on a queue that keeps one
// finished record, so that what stays is the dedup windows (and a few keys
// whose size does not grow with the jobs), and reads the used_memory delta
// and the windows' MEMORY USAGE.
func (e *env) measureDedup(ctx context.Context, name, kind string, retention time.Duration, jobs int, job func(i int) (emq.Job, error), progress func(string, ...any)) (dedupResult, error) {
	r := dedupResult{Jobs: jobs, RetentionHours: retention.Hours(), HeldHours: emq.DedupHeld(retention).Hours()}
	queue := e.queue.Queue(name, emq.WithRetention(1), emq.WithDedupRetention(retention))
	if err := queue.Declare(ctx, kind); err != nil {
		return r, err
	}
	before, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	const batch = 1000
	for done := 0; done < jobs; {
		n := min(batch, jobs-done)
		list := make([]emq.Job, n)
		for i := range list {
			if list[i], err = job(done + i); err != nil {
				return r, err
			}
		}
		_, errs := queue.AdmitMany(ctx, list)
		if err := errors.Join(errs...); err != nil {
			return r, err
		}
		for completed := 0; completed < n; {
			claims, err := queue.Claim(ctx, n-completed, 10*time.Minute)
			if err != nil {
				return r, err
			}
			if len(claims) == 0 {
				return r, fmt.Errorf("%s: queue empty after %d of %d completions", name, done+completed, jobs)
			}
			finished := make([]emq.Completion, len(claims))
			for i, claim := range claims {
				finished[i] = emq.Completion{ID: claim.ID, Token: claim.Token}
			}
			if err := errors.Join(queue.CompleteMany(ctx, finished)...); err != nil {
				return r, err
			}
			completed += len(claims)
		}
		done += n
		if done%50000 == 0 {
			progress("memory: %s: %d of %d jobs admitted and completed…", name, done, jobs)
		}
	}
	after, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	usage, err := queue.MemoryUsage(ctx)
	if err != nil {
		return r, err
	}
	r.BytesPerJob = float64(after-before) / float64(jobs)
	r.UsagePerJob = float64(usage.Dedup) / float64(jobs)
	r.PerJobPerHour = r.BytesPerJob * r.HeldHours / r.RetentionHours
	return r, queue.Purge(ctx)
}

// measureDedups measures the dedup entries of order jobs under the orders'
// default retention, and of balance coherence jobs (two assets per account,
// versions rising) under the coherence queues'. Each coherence job carries
// one change, the relay's form for a shard with one change to carry: per
// change, the most a job costs, since the relay's jobs mostly carry more.
func (e *env) measureDedups(ctx context.Context, jobs int, progress func(string, ...any)) (orderDedup, coherenceDedup dedupResult, err error) {
	orderDedup, err = e.measureDedup(ctx, "bench-dedup-"+e.run, orders.KindPlace, emq.DefaultDedupRetention, jobs, func(i int) (emq.Job, error) {
		return orderJob(e.accounts[i%len(e.accounts)], fmt.Sprintf("dedup-%s-%07d", e.run, i), orders.Buy)
	}, progress)
	if err != nil {
		return orderDedup, coherenceDedup, err
	}
	coherenceDedup, err = e.measureDedup(ctx, coherence.Queue("bench-"+e.run), placement.KindBalanceCoherence, placement.CoherenceDedupRetention, jobs, func(i int) (emq.Job, error) {
		account, asset := e.accounts[i%len(e.accounts)], [2]string{"USD", "BTC"}[i/len(e.accounts)%2]
		name := orders.BalanceName(account, asset)
		return placement.CoherenceJob(orders.OutboxEntry{Name: name, Payload: name + "@" + strconv.Itoa(10+i/(2*len(e.accounts)))}), nil
	}, progress)
	return orderDedup, coherenceDedup, err
}

// eventsMemoryResult is what an order's events cost, measured on orders
// settled by a worker (buys and sells at one price, so they trade): Redis
// while they are in the accounts' logs (the hot tail; before issue 23 the
// logs kept a day of them), PostgreSQL once archived, and a resume read
// back from the history.
type eventsMemoryResult struct {
	Orders         int     `json:"orders"`
	Accounts       int     `json:"accounts"`
	Events         int64   `json:"events"`
	EventsPerOrder float64 `json:"events_per_order"`
	// RedisBytesPerOrder is the used_memory the logs gave back when every
	// event left the hot tail, per order: what an order's events cost
	// Redis while they are in it. LogUsagePerOrder is the logs' MEMORY
	// USAGE per order before.
	RedisBytesPerOrder float64 `json:"redis_bytes_per_order_in_hot_tail"`
	LogUsagePerOrder   float64 `json:"log_memory_usage_per_order"`
	// RedisLeftPerOrder is the logs' MEMORY USAGE per order once trimmed:
	// the hashes of sequences, archived positions and sources (a field or
	// two per account and per source), the change stream left out (it is
	// capped at 100,000 announcements, whatever the rate).
	RedisLeftPerOrder float64 `json:"redis_bytes_per_order_after_hot_tail"`
	// HistoryBytesPerOrder is account_event_chunks' size (table, TOAST,
	// indexes) per order; HistoryChunks its rows.
	HistoryBytesPerOrder float64 `json:"history_bytes_per_order"`
	HistoryChunks        int64   `json:"history_chunks"`
	// ResumeEvents were read through a subscription resuming from 0 with
	// the log trimmed, all from the history, in ResumeMs: an account's
	// events (the measurement's, repeated) appended, archived and trimmed
	// for it.
	ResumeEvents int     `json:"resume_events"`
	ResumeMs     float64 `json:"resume_ms"`
}

// markdown is the events' table.
func (r eventsMemoryResult) markdown() string {
	if r.Orders == 0 {
		return ""
	}
	hotTail := emq.DefaultLogHotTail.Age + placement.DefaultEventArchiveDelay
	var b strings.Builder
	fmt.Fprintf(&b, "\n| Accounts' events, %d orders settled (%d accounts), %d events | per order |\n|---|---:|\n", r.Orders, r.Accounts, r.Events)
	fmt.Fprintf(&b, "| events | %.2f |\n", r.EventsPerOrder)
	fmt.Fprintf(&b, "| Redis B while in the hot tail (used_memory given back by the trim) | %.0f |\n", r.RedisBytesPerOrder)
	fmt.Fprintf(&b, "| Redis B while in the hot tail (MEMORY USAGE of the logs) | %.0f |\n", r.LogUsagePerOrder)
	fmt.Fprintf(&b, "| Redis B once out of the hot tail (the logs' hashes, per account) | %.1f |\n", r.RedisLeftPerOrder)
	fmt.Fprintf(&b, "| PostgreSQL B of history (account_event_chunks with TOAST and indexes; %d chunks) | %.0f |\n", r.HistoryChunks, r.HistoryBytesPerOrder)
	fmt.Fprintf(&b, "\nAt 1,000 orders/s the hot tail (%s, the archive delay included) holds %.2f GB of Redis, where a day of events held %.0f GB before; the history takes %.1f GB of PostgreSQL a day, %.0f GB for a week (EVENTS_RETENTION). A resume from the history read %d events in %.0f ms.\n",
		hotTail, 1000*hotTail.Seconds()*r.RedisBytesPerOrder/1e9, 86400*1000*r.RedisBytesPerOrder/1e9,
		86400*1000*r.HistoryBytesPerOrder/1e9, 7*86400*1000*r.HistoryBytesPerOrder/1e9, r.ResumeEvents, r.ResumeMs)
	return b.String()
}

// eventsMeasureDelay is how soon the measurement's worker archives.
const eventsMeasureDelay = 200 * time.Millisecond

// measureEvents places orders on a fresh queue that a worker of its own
// settles, whose archiver keeps everything in the hot tail, and reads what
// the events cost Redis and the history once all are archived; then trims
// the logs and resumes a stream from the history.
func (e *env) measureEvents(ctx context.Context, s *servers, count int, progress func(string, ...any)) (eventsMemoryResult, error) {
	// Accounts of its own: the history is the accounts', whatever queue
	// their log is on.
	accounts, _, err := e.soakAccounts(ctx, benchAccounts)
	if err != nil {
		return eventsMemoryResult{}, err
	}
	r := eventsMemoryResult{Orders: count, Accounts: len(accounts)}
	config := settlement.DefaultConfig()
	config.QueuePrefix, config.Symbols = "bench-events-"+e.run+".", []string{"BTC-USD"}
	config.EventsHotTail = emq.LogHotTail{Count: math.MaxInt32, Age: 24 * time.Hour}
	config.EventsArchiveDelay = eventsMeasureDelay
	deps, err := settlement.Connect(ctx, s.databaseURL, s.redisURL, config, e.logger)
	if err != nil {
		return r, err
	}
	defer deps.Close()
	worker, err := settlement.New(ctx, deps, config)
	if err != nil {
		return r, err
	}
	// The accounts' logs are on the shared shards: what this run's
	// events cost is what the shards hold beyond what they held before.
	logs := placement.NewEventLogs(e.queue)
	logsBefore, err := shardsLogMemory(ctx, logs)
	if err != nil {
		return r, err
	}
	history := postgres.NewEventHistory(e.db)
	historyBefore, err := history.Size(ctx)
	if err != nil {
		return r, err
	}
	workCtx, cancelWork := context.WithCancel(ctx)
	workDone := make(chan error, 1)
	go func() { workDone <- worker.Run(workCtx) }()
	stopWork := sync.OnceValue(func() error { cancelWork(); return <-workDone })
	defer stopWork()

	queues := placement.NewOrderQueues(e.queue, placement.WithQueuePrefix(config.QueuePrefix))
	queue := queues.For("BTC-USD")
	defer func() { _ = queue.Purge(context.WithoutCancel(ctx)) }()
	placer := placement.NewPlacer(queues)
	var next atomic.Int64
	var placing sync.WaitGroup
	failures := make(chan error, 32)
	for range 32 {
		placing.Go(func() {
			for i := next.Add(1) - 1; i < int64(count) && ctx.Err() == nil; i = next.Add(1) - 1 {
				side := orders.Buy
				if i%2 == 1 {
					side = orders.Sell
				}
				_, err := placer.Place(ctx, orders.PlaceCommand{
					Account: accounts[int(i/2)%len(accounts)], ClientOrderID: fmt.Sprintf("ev-%s-%07d", e.run, i),
					Symbol: "BTC-USD", Side: side, Type: orders.Limit, Quantity: benchQuantity, Price: benchPrice,
				})
				if err != nil {
					failures <- err
					return
				}
			}
		})
	}
	placing.Wait()
	close(failures)
	if err := <-failures; err != nil {
		return r, err
	}
	progress("memory: events: %d orders placed; waiting for their settlement, events and archiving…", count)
	var coherenceQueues []*emq.Queue
	for _, name := range placement.CoherenceQueues(placement.BalancesTable) {
		coherenceQueues = append(coherenceQueues, e.queue.Queue(name))
	}
	if err := waitFor(ctx, 10*time.Minute, func() error {
		stats, err := queue.Stats(ctx)
		if err != nil {
			return err
		}
		var balances emq.Stats
		for _, queue := range coherenceQueues {
			shard, err := queue.Stats(ctx)
			if err != nil {
				return err
			}
			balances.Pending, balances.Active, balances.Delayed = balances.Pending+shard.Pending, balances.Active+shard.Active, balances.Delayed+shard.Delayed
		}
		var unrelayed int
		if err := e.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE relayed_at IS NULL`).Scan(&unrelayed); err != nil {
			return err
		}
		if left := stats.Pending + stats.Active + stats.Delayed + balances.Pending + balances.Active + balances.Delayed + int64(unrelayed); left > 0 {
			return fmt.Errorf("%d orders, balance changes and outbox rows left", left)
		}
		lasts, archived := map[string]int64{}, map[string]int64{}
		for shard, list := range byShard(logs, accounts) {
			last, err := shard.LastLogSequences(ctx, list)
			if err != nil {
				return err
			}
			done, err := shard.LogsArchived(ctx, list)
			if err != nil {
				return err
			}
			maps.Copy(lasts, last)
			maps.Copy(archived, done)
		}
		r.Events = 0
		for _, account := range accounts {
			if archived[account] < lasts[account] {
				return fmt.Errorf("%s archived through %d of %d", account, archived[account], lasts[account])
			}
			r.Events += lasts[account]
		}
		return nil
	}); err != nil {
		return r, fmt.Errorf("events: %w", err)
	}
	if err := stopWork(); err != nil {
		return r, err
	}

	perOrder := func(bytes int64) float64 { return float64(bytes) / float64(count) }
	r.EventsPerOrder = float64(r.Events) / float64(count)
	logMemory, err := shardsLogMemory(ctx, logs)
	if err != nil {
		return r, err
	}
	r.LogUsagePerOrder = perOrder(logMemory - logsBefore)
	historyAfter, err := history.Size(ctx)
	if err != nil {
		return r, err
	}
	r.HistoryBytesPerOrder = perOrder(historyAfter - historyBefore)
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM account_event_chunks WHERE account_id = ANY($1)`, accounts).Scan(&r.HistoryChunks); err != nil {
		return r, err
	}
	trimmedFrom, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	for shard, list := range byShard(logs, accounts) {
		marks := make([]emq.LogMark, len(list))
		for i, account := range list {
			marks[i] = emq.LogMark{Group: account}
		}
		for {
			marked, err := shard.MarkLogsArchived(ctx, marks, emq.LogHotTail{})
			if err != nil {
				return r, err
			}
			dropped := int64(0)
			for _, m := range marked {
				dropped += m.Dropped
			}
			if dropped == 0 {
				break
			}
		}
	}
	trimmed, err := usedMemory(ctx, e)
	if err != nil {
		return r, err
	}
	r.RedisBytesPerOrder = perOrder(trimmedFrom - trimmed)
	if logMemory, err = shardsLogMemory(ctx, logs); err != nil {
		return r, err
	}
	r.RedisLeftPerOrder = perOrder(logMemory - logsBefore)

	if r.ResumeEvents, r.ResumeMs, err = e.measureResume(ctx, logs.For(accounts[0]), history, accounts[0], 10_000); err != nil {
		return r, err
	}
	progress("memory: events: %.2f per order, %.0f B of Redis per order in the hot tail, %.0f B of history; %d events resumed from the history in %.0f ms",
		r.EventsPerOrder, r.RedisBytesPerOrder, r.HistoryBytesPerOrder, r.ResumeEvents, r.ResumeMs)
	return r, nil
}

// measureResume appends events to an account of its own, copies of the
// measured events' in turn, archives them and trims its log, and times a
// subscription resuming from 0: every event from the history.
func (e *env) measureResume(ctx context.Context, queue *emq.Queue, history *postgres.EventHistory, from string, count int) (int, float64, error) {
	sample, err := history.EventsAfter(ctx, from, 0, 256)
	if err != nil || len(sample) == 0 {
		return 0, 0, fmt.Errorf("resume: no events to copy (%w)", err)
	}
	account := "bench-resume-" + e.run
	for start := 0; start < count; start += 100 {
		entries := make([]emq.LogEntry, 0, 100)
		for i := start; i < min(start+100, count); i++ {
			event := sample[i%len(sample)]
			entries = append(entries, emq.LogEntry{ID: fmt.Sprintf("%s.%d", event.ID, i), Type: string(event.Type), Data: event.Data})
		}
		if _, err := queue.AppendLog(ctx, account, emq.LogSource{}, entries); err != nil {
			return 0, 0, err
		}
	}
	archiver := placement.NewEventArchiver(queue, history, e.logger, placement.WithHotTail(emq.LogHotTail{}), placement.WithArchiveDelay(0))
	if err := waitFor(ctx, time.Minute, func() error {
		if err := archiver.Pass(ctx, time.Millisecond); err != nil {
			return err
		}
		if first, last, err := queue.LogBounds(ctx, account); err != nil || first <= last {
			return fmt.Errorf("resume: the log holds %d..%d (%v)", first, last, err)
		}
		return nil
	}); err != nil {
		return 0, 0, err
	}
	streams := placement.NewEventStreams(placement.SingleEventLog(queue), placement.WithEventHistory(history), placement.WithEventLogger(e.logger))
	defer streams.Close()
	started := time.Now()
	subscription, err := streams.Subscribe(ctx, account, 0)
	if err != nil {
		return 0, 0, err
	}
	defer subscription.Close()
	for read := 0; read < count; {
		event, ok, err := subscription.Next(ctx, time.Second)
		if err != nil {
			return 0, 0, fmt.Errorf("resume from the history: %w", err)
		}
		if ok {
			if event.Sequence != int64(read+1) {
				return 0, 0, fmt.Errorf("resume from the history: event %d after %d", event.Sequence, read)
			}
			read++
		}
	}
	return count, ms(time.Since(started)), nil
}

// byShard groups accounts by the queue of their logs.
func byShard(logs *placement.EventLogs, accounts []string) map[*emq.Queue][]string {
	groups := map[*emq.Queue][]string{}
	for _, account := range accounts {
		groups[logs.For(account)] = append(groups[logs.For(account)], account)
	}
	return groups
}

// shardsLogMemory is what the logs of every shard take, index included.
func shardsLogMemory(ctx context.Context, logs *placement.EventLogs) (int64, error) {
	var total int64
	for _, shard := range logs.Queues() {
		usage, err := shard.LogMemoryUsage(ctx)
		if err != nil {
			return 0, err
		}
		total += usage.Logs + usage.Index
	}
	return total, nil
}
