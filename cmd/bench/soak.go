package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// The soak (make soak, -phases soak; in no default run) runs the system
// at a steady rate for a long while, a gateway process and a worker with
// their defaults, and samples Redis's memory every 10 s: with the
// accounts' events kept in Redis only for their hot tail (10 minutes), the
// memory should rise for about that long and then level off, but for the
// orders' dedup entries, which grow for DEDUP_RETENTION (24 h).

// soakConfig is the soak's flags.
type soakConfig struct {
	duration time.Duration
	rate     float64
	accounts int
	streams  int
	sample   time.Duration
}

func (c *soakConfig) register(flags *flag.FlagSet) {
	flags.DurationVar(&c.duration, "soak-duration", 20*time.Minute, "length of the soak phase's load")
	flags.Float64Var(&c.rate, "soak-rate", 500, "orders/s the soak admits over HTTP, buys and sells at one price, so they trade")
	flags.IntVar(&c.accounts, "soak-accounts", 2000, "accounts the soak's orders are spread over")
	flags.IntVar(&c.streams, "soak-streams", 50, "event streams the soak holds open, one per account")
	flags.DurationVar(&c.sample, "soak-sample", 10*time.Second, "how often the soak samples Redis's memory")
}

func (c *soakConfig) validate() error {
	if c.duration < time.Minute || c.rate <= 0 || c.accounts < 2 || c.streams < 0 || c.streams > c.accounts || c.sample < time.Second {
		return fmt.Errorf("want -soak-duration ≥ 1m, -soak-rate > 0, -soak-accounts ≥ 2, 0 ≤ -soak-streams ≤ -soak-accounts and -soak-sample ≥ 1s")
	}
	return nil
}

// soakSample is one sample of the soak.
type soakSample struct {
	Seconds float64 `json:"seconds"`
	// Orders is the orders admitted by then.
	Orders int64 `json:"orders"`
	// UsedMemory is Redis's used_memory; Logs the accounts' logs' MEMORY
	// USAGE (every third sample: it reads each log), Dedup the orders
	// queue's dedup windows'.
	UsedMemory int64 `json:"used_memory"`
	Logs       int64 `json:"event_logs,omitempty"`
	Dedup      int64 `json:"dedup"`
	// History is account_event_chunks' size in PostgreSQL.
	History int64 `json:"history"`
	// ArchiveLag is the worker's events_archive_lag_seconds, the largest
	// over the shards.
	ArchiveLag float64 `json:"archive_lag_seconds"`
}

// soakResult is the soak phase.
type soakResult struct {
	Duration  string     `json:"duration"`
	Rate      float64    `json:"rate"`
	Accounts  int        `json:"accounts"`
	Streams   int        `json:"streams"`
	Admission loadResult `json:"admission"`
	// Events is what the streams received; Gaps the times a stream's
	// next event was not the one after the last (none expected).
	Events  int64        `json:"events_received"`
	Gaps    int64        `json:"stream_gaps"`
	Samples []soakSample `json:"samples"`
	// The growth of used_memory, of the logs, and of used_memory without
	// the dedup windows, in MB a minute (least squares), over the first
	// HotMinutes and from two minutes after them to the end.
	HotMinutes float64 `json:"hot_minutes"`
	Growth     struct {
		UsedFill    float64 `json:"used_memory_filling"`
		UsedHeld    float64 `json:"used_memory_full"`
		LogsFill    float64 `json:"event_logs_filling"`
		LogsHeld    float64 `json:"event_logs_full"`
		NoDedupFill float64 `json:"without_dedup_filling"`
		NoDedupHeld float64 `json:"without_dedup_full"`
	} `json:"growth_mb_per_minute"`
}

// soak runs the phase.
func (e *env) soak(ctx context.Context, c soakConfig, s *servers, progress func(string, ...any)) (soakResult, error) {
	r := soakResult{Duration: c.duration.String(), Rate: c.rate, Accounts: c.accounts, Streams: c.streams,
		HotMinutes: emq.DefaultLogHotTail.Age.Minutes()}
	if s.redisAddr == "" {
		progress("soak: skipped (REDIS_URL given: the phase empties the orders queue of the bench's Redis first)")
		return r, nil
	}
	progress("soak: funding %d accounts…", c.accounts)
	_, keys, err := e.soakAccounts(ctx, c.accounts)
	if err != nil {
		return r, err
	}
	queues, err := e.orderQueues(ctx)
	if err != nil {
		return r, err
	}
	for _, queue := range queues {
		if err := queue.Purge(ctx); err != nil {
			return r, err
		}
	}
	progress("soak: building and starting a gateway process and a worker…")
	gateway, err := startGatewayProcess(ctx, s, s.databaseURL)
	if err != nil {
		return r, err
	}
	defer gateway.stop()
	base := gateway.base
	registry := prometheus.NewRegistry()
	deps, err := settlement.Connect(ctx, s.databaseURL, s.redisURL, settlement.DefaultConfig(), e.logger)
	if err != nil {
		return r, err
	}
	defer deps.Close()
	deps.Metrics = registry
	worker, err := settlement.New(ctx, deps, settlement.DefaultConfig())
	if err != nil {
		return r, err
	}
	workCtx, stopWork := context.WithCancel(ctx)
	workDone := make(chan error, 1)
	go func() { workDone <- worker.Run(workCtx) }()
	defer func() { stopWork(); <-workDone }()

	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	var readers sync.WaitGroup
	var received, gaps atomic.Int64
	transport := &http.Transport{MaxIdleConnsPerHost: c.streams + 1}
	defer transport.CloseIdleConnections()
	for i := range c.streams {
		key := keys[i]
		api, err := client.NewClient(base, client.WithHTTPClient(&http.Client{Transport: transport}),
			client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
				req.Header.Set("Authorization", "Bearer "+key)
				return nil
			}))
		if err != nil {
			return r, err
		}
		stream, err := api.Events(streamCtx, client.EventsOptions{})
		if err != nil {
			return r, fmt.Errorf("soak: stream %d: %w", i, err)
		}
		readers.Go(func() {
			defer stream.Close()
			last := int64(-1)
			for {
				event, err := stream.Next()
				if err != nil {
					return
				}
				received.Add(1)
				if last >= 0 && event.Sequence != last+1 {
					gaps.Add(1)
				}
				last = event.Sequence
			}
		})
	}

	buys := newSidedOrderClient(base+"/v1/orders", keys, "kb"+e.run+"-", 64, "buy")
	sells := newSidedOrderClient(base+"/v1/orders", keys, "ks"+e.run+"-", 64, "sell")
	defer buys.close()
	defer sells.close()
	var turn, admitted atomic.Int64
	place := func(ctx context.Context) error {
		var err error
		if turn.Add(1)%2 == 0 {
			err = sells.place(ctx)
		} else {
			err = buys.place(ctx)
		}
		if err == nil {
			admitted.Add(1)
		}
		return err
	}

	history := postgres.NewEventHistory(e.db)
	started := time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() {
		ticker := time.NewTicker(c.sample)
		defer ticker.Stop()
		for n := 0; ; n++ {
			sample, err := e.soakSample(sampleCtx, queues, history, registry, n%3 == 0)
			if err != nil {
				if sampleCtx.Err() == nil {
					progress("soak: a sample failed: %v", err)
				}
			} else {
				sample.Seconds, sample.Orders = time.Since(started).Seconds(), admitted.Load()
				r.Samples = append(r.Samples, sample)
				progress("soak: %s: %d orders, used_memory %.1f MB (dedup %.1f MB%s), history %.1f MB, archive lag %.0f s",
					time.Duration(sample.Seconds*float64(time.Second)).Round(time.Second), sample.Orders, mb(sample.UsedMemory),
					mb(sample.Dedup), logsText(sample), mb(sample.History), sample.ArchiveLag)
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-ticker.C:
			}
		}
	})
	r.Admission = openLoop(ctx, "soak", c.rate, 256, c.duration, func(string, ...any) {}, place)
	stopSampling()
	sampling.Wait()
	stopStreams()
	readers.Wait()
	r.Events, r.Gaps = received.Load(), gaps.Load()
	r.growth()
	progress("soak: %d orders at %.0f/s; %d events to %d streams, %d gaps; used_memory grew %.1f MB/min in the first %.0f minutes, %.1f MB/min after (without dedup: %.1f, %.1f; the logs: %.1f, %.1f)",
		r.Admission.Orders, r.Admission.PerSecond, r.Events, c.streams, r.Gaps, r.Growth.UsedFill, r.HotMinutes, r.Growth.UsedHeld,
		r.Growth.NoDedupFill, r.Growth.NoDedupHeld, r.Growth.LogsFill, r.Growth.LogsHeld)
	return r, nil
}

func mb(bytes int64) float64 { return float64(bytes) / (1 << 20) }

func logsText(s soakSample) string {
	if s.Logs == 0 {
		return ""
	}
	return fmt.Sprintf(", event logs %.1f MB", mb(s.Logs))
}

// soakSample reads Redis's memory, the dedup windows', the logs' when
// logs, the history's size and the archiver's lag.
func (e *env) soakSample(ctx context.Context, queues []*emq.Queue, history *postgres.EventHistory, registry *prometheus.Registry, logs bool) (soakSample, error) {
	var sample soakSample
	var err error
	if sample.UsedMemory, err = usedMemory(ctx, e); err != nil {
		return sample, err
	}
	for _, queue := range queues {
		usage, err := queue.MemoryUsage(ctx)
		if err != nil {
			return sample, err
		}
		sample.Dedup += usage.Dedup
	}
	if logs {
		for _, shard := range placement.NewEventLogs(e.queue).Queues() {
			logMemory, err := shard.LogMemoryUsage(ctx)
			if err != nil {
				return sample, err
			}
			sample.Logs += logMemory.Logs
		}
	}
	if sample.History, err = history.Size(ctx); err != nil {
		return sample, err
	}
	families, err := registry.Gather()
	if err != nil {
		return sample, err
	}
	for _, family := range families {
		if family.GetName() == "events_archive_lag_seconds" {
			// One series per shard: the lag is the shard furthest behind.
			for _, metric := range family.GetMetric() {
				sample.ArchiveLag = max(sample.ArchiveLag, metric.GetGauge().GetValue())
			}
		}
	}
	return sample, nil
}

// growth fits the samples' growth, in MB a minute, before the hot tail is
// full and from two minutes after.
func (r *soakResult) growth() {
	fit := func(from, to float64, value func(soakSample) (float64, bool)) float64 {
		var n, sx, sy, sxx, sxy float64
		for _, s := range r.Samples {
			minutes := s.Seconds / 60
			y, ok := value(s)
			if !ok || minutes < from || minutes > to {
				continue
			}
			n++
			sx, sy, sxx, sxy = sx+minutes, sy+y, sxx+minutes*minutes, sxy+minutes*y
		}
		if n < 2 || n*sxx == sx*sx {
			return 0
		}
		return (n*sxy - sx*sy) / (n*sxx - sx*sx)
	}
	used := func(s soakSample) (float64, bool) { return mb(s.UsedMemory), true }
	noDedup := func(s soakSample) (float64, bool) { return mb(s.UsedMemory - s.Dedup), true }
	logs := func(s soakSample) (float64, bool) { return mb(s.Logs), s.Logs > 0 }
	end := 1e9
	r.Growth.UsedFill, r.Growth.UsedHeld = fit(0, r.HotMinutes, used), fit(r.HotMinutes+2, end, used)
	r.Growth.NoDedupFill, r.Growth.NoDedupHeld = fit(0, r.HotMinutes, noDedup), fit(r.HotMinutes+2, end, noDedup)
	r.Growth.LogsFill, r.Growth.LogsHeld = fit(0, r.HotMinutes, logs), fit(r.HotMinutes+2, end, logs)
}

// markdown is the soak's curve, a row a minute.
func (r soakResult) markdown() string {
	if len(r.Samples) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| soak, %s at %.0f orders/s (%.0f/s achieved, %d errors), %d accounts, %d streams | orders | used_memory MB | dedup MB | event logs MB | history MB | archive lag s |\n|---|---:|---:|---:|---:|---:|---:|\n",
		r.Duration, r.Rate, r.Admission.PerSecond, r.Admission.Errors, r.Accounts, r.Streams)
	next := 0.0
	for i, s := range r.Samples {
		if s.Seconds < next && i != len(r.Samples)-1 {
			continue
		}
		next = s.Seconds - float64(int(s.Seconds)%60) + 60
		logs := "–"
		if s.Logs > 0 {
			logs = strconv.FormatFloat(mb(s.Logs), 'f', 1, 64)
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %s | %.1f | %.0f |\n", time.Duration(s.Seconds*float64(time.Second)).Round(time.Second),
			s.Orders, mb(s.UsedMemory), mb(s.Dedup), logs, mb(s.History), s.ArchiveLag)
	}
	fmt.Fprintf(&b, "\nGrowth, MB a minute, in the first %.0f minutes / from %.0f minutes on: used_memory %.1f / %.1f; without the dedup windows %.1f / %.1f; the event logs %.1f / %.1f. %d events reached the streams, %d gaps.\n\n",
		r.HotMinutes, r.HotMinutes+2, r.Growth.UsedFill, r.Growth.UsedHeld, r.Growth.NoDedupFill, r.Growth.NoDedupHeld,
		r.Growth.LogsFill, r.Growth.LogsHeld, r.Events, r.Gaps)
	return b.String()
}

// soakAccounts creates n funded accounts with an API key each.
func (e *env) soakAccounts(ctx context.Context, n int) (accounts, keys []string, err error) {
	ledger, store := postgres.NewLedger(e.db), postgres.NewAccounts(e.db)
	accounts, keys = make([]string, n), make([]string, n)
	var next atomic.Int64
	var creating sync.WaitGroup
	failures := make(chan error, 8)
	for range 8 {
		creating.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				account, err := store.Create(ctx, "bench-soak-"+e.run+"-"+strconv.Itoa(i))
				if err == nil {
					for _, funds := range [][2]string{{"USD", "1000000000.00"}, {"BTC", "1000"}} {
						if err = ledger.Deposit(ctx, account, funds[0], funds[1]); err != nil {
							break
						}
					}
				}
				if err == nil {
					_, keys[i], err = store.IssueKey(ctx, account)
				}
				if err != nil {
					failures <- err
					return
				}
				accounts[i] = account
			}
		})
	}
	creating.Wait()
	close(failures)
	if err := <-failures; err != nil {
		return nil, nil, err
	}
	return accounts, keys, ctx.Err()
}

// orderQueues are the queues of every instrument PostgreSQL lists, as the
// gateway admits onto them.
func (e *env) orderQueues(ctx context.Context) ([]*emq.Queue, error) {
	instruments, err := postgres.NewInstruments(e.db).ReadInstruments(ctx)
	if err != nil {
		return nil, err
	}
	symbols := slices.Sorted(maps.Keys(instruments))
	queues := make([]*emq.Queue, len(symbols))
	for i, symbol := range symbols {
		queues[i] = e.queue.Queue(orders.InstrumentQueue(symbol))
	}
	return queues, nil
}
