package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ordergate/ordergate/internal/environ"
	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/internal/metricsserver"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

type config struct {
	redisURL    string
	databaseURL string
	migrate     bool
	worker      settlement.Config
	metricsAddr string
	logLevel    slog.Level
	logFlush    time.Duration
}

const usageHeader = `Usage: worker [flags]

Owns instruments' order queues (%q followed by the symbol, one queue per
instrument PostgreSQL lists at start), one owner per instrument at a time,
spread over the workers running, and settles each owned queue's orders in
PostgreSQL transactions (matched in its instrument's book: holds, trades,
releases, balances, the order's row, the outbox), with the emq worker
runtime: leases renewed by a heartbeat, expired leases reaped, failures
retried with backoff, and a graceful drain on SIGTERM or SIGINT (a second
signal stops at once). Migrations are applied at start unless
-migrate=false.

Every flag falls back to the environment variable in parentheses, then to the
default shown.

`

// parseConfig reads flags, falling back to the environment. An environment
// variable that does not parse is an error, not a silent default: a typo in
// WORKER_LEASE must not run the worker with a lease nobody chose.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	env := environ.NewReader(getenv)
	defaults := settlement.DefaultConfig()
	c := config{worker: defaults}
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(output)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), usageHeader, defaults.QueuePrefix)
		flags.PrintDefaults()
	}
	flags.StringVar(&c.redisURL, "redis-url", env.String("REDIS_URL", "redis://127.0.0.1:6379/0"),
		"Redis URL; addr= parameters make it a cluster (REDIS_URL)")
	flags.StringVar(&c.databaseURL, "database-url", env.String("DATABASE_URL", ""),
		fmt.Sprintf("PostgreSQL URL, required; the worker keeps at most %d connections (DATABASE_URL)",
			postgres.SettlerConnections+settlement.ConnectionsBesideSettlement))
	flags.BoolVar(&c.migrate, "migrate", env.Bool("MIGRATE", true), "apply database migrations at start (MIGRATE)")
	flags.IntVar(&c.worker.Concurrency, "concurrency", env.Int("WORKER_CONCURRENCY", defaults.Concurrency),
		"orders handled at once (WORKER_CONCURRENCY)")
	flags.IntVar(&c.worker.Batch, "batch", env.Int("WORKER_BATCH", defaults.Batch),
		"most orders one claim takes; 0 means the concurrency (WORKER_BATCH)")
	flags.DurationVar(&c.worker.Lease, "lease", env.Duration("WORKER_LEASE", defaults.Lease),
		"how long a claim holds an order; a dead worker's orders run again after about this long (WORKER_LEASE)")
	flags.DurationVar(&c.worker.OwnLease, "own-lease", env.Duration("WORKER_OWN_LEASE", defaults.OwnLease),
		"lease of an instrument's and an event shard's ownership: a dead worker's instruments and shards are owned again within about this long plus 250ms (WORKER_OWN_LEASE)")
	flags.IntVar(&c.worker.Retry.MaxAttempts, "max-attempts", env.Int("WORKER_MAX_ATTEMPTS", defaults.Retry.MaxAttempts),
		fmt.Sprintf("attempts an order gets before it is dead; with the default backoff, %d outlast a PostgreSQL outage of over %d minutes (WORKER_MAX_ATTEMPTS)",
			defaults.Retry.MaxAttempts, int(defaults.OutageOutlasted().Minutes())))
	flags.DurationVar(&c.worker.Retry.BaseDelay, "retry-base", env.Duration("WORKER_RETRY_BASE", defaults.Retry.BaseDelay),
		"backoff before an order's second attempt; it doubles with each failed attempt (WORKER_RETRY_BASE)")
	flags.DurationVar(&c.worker.Retry.MaxDelay, "retry-cap", env.Duration("WORKER_RETRY_CAP", defaults.Retry.MaxDelay),
		"longest backoff between two attempts of an order (WORKER_RETRY_CAP)")
	flags.DurationVar(&c.worker.DrainTimeout, "drain-timeout", env.Duration("WORKER_DRAIN_TIMEOUT", defaults.DrainTimeout),
		"after a stop signal, how long in-flight orders may take before they are released to other workers (WORKER_DRAIN_TIMEOUT)")
	flags.IntVar(&c.worker.WaitReplicas, "wait-replicas", env.Int("WORKER_WAIT_REPLICAS", 0),
		"Redis replicas that must hold the events and coherence jobs the worker writes before their outbox rows count as relayed; 0 counts the primary alone (WORKER_WAIT_REPLICAS)")
	flags.DurationVar(&c.worker.WaitTimeout, "wait-timeout", env.Duration("WORKER_WAIT_TIMEOUT", defaults.WaitTimeout),
		"longest wait for those replicas; rows they do not hold by then are relayed again by the sweep (WORKER_WAIT_TIMEOUT)")
	flags.DurationVar(&c.worker.EventsHotTail.Age, "events-hot-retention", env.Duration("EVENTS_HOT_RETENTION", defaults.EventsHotTail.Age),
		"how long the accounts' logs in Redis keep events once archived to PostgreSQL (EVENTS_HOT_RETENTION)")
	flags.IntVar(&c.worker.EventsHotTail.Count, "events-hot-count", env.Int("EVENTS_HOT_COUNT", defaults.EventsHotTail.Count),
		"and the most archived events each log keeps, however young; events not archived yet are always kept (EVENTS_HOT_COUNT)")
	flags.DurationVar(&c.worker.EventsRetention, "events-retention", env.Duration("EVENTS_RETENTION", defaults.EventsRetention),
		"how long PostgreSQL keeps the accounts' events: a stream resumes from any position younger (EVENTS_RETENTION)")
	flags.IntVar(&c.worker.CoherenceJobSize, "coherence-job-size", env.Int("COHERENCE_JOB_SIZE", defaults.CoherenceJobSize),
		"most balance changes one coherence job lists; 1 (also an outbox row per balance) while workers of a release reading one change a job still run (COHERENCE_JOB_SIZE)")
	flags.DurationVar(&c.worker.OutboxRetention, "outbox-retention", env.Duration("OUTBOX_RETENTION", defaults.OutboxRetention),
		fmt.Sprintf("how long the outbox keeps a row once relayed; the workers delete older ones; at least %s (OUTBOX_RETENTION)", postgres.EventRowsWindow))
	amounts := flags.Bool("coherence-balance-amounts", env.Bool("COHERENCE_BALANCE_AMOUNTS", !defaults.CoherenceWithoutAmounts),
		"list each balance a write moves with its amounts, so the coherence consumer reads nothing back; false while workers of a release whose consumer refuses such lines still run (COHERENCE_BALANCE_AMOUNTS)")
	flags.StringVar(&c.metricsAddr, "metrics-addr", env.String("METRICS_ADDR", "127.0.0.1:9091"),
		"where /metrics (Prometheus) and /healthz are served; empty serves neither (METRICS_ADDR)")
	flags.TextVar(&c.logLevel, "log-level", env.Level("LOG_LEVEL", slog.LevelInfo), "debug, info, warn or error (LOG_LEVEL)")
	flags.DurationVar(&c.logFlush, "log-flush-interval", env.Duration("LOG_FLUSH_INTERVAL", jsonlog.DefaultFlushInterval), "longest a log line waits to be written with the ones after it; 0 writes each line at once (LOG_FLUSH_INTERVAL)")
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	c.worker.CoherenceWithoutAmounts = !*amounts
	// Redis keeps only the events' hot tail now, and PostgreSQL their
	// history: the old names' promise no longer holds, so they stop a
	// worker rather than be ignored.
	env.Removed("EVENTS_RETENTION_AGE", "Redis keeps the events' hot tail (EVENTS_HOT_RETENTION, EVENTS_HOT_COUNT) and PostgreSQL their history (EVENTS_RETENTION); see docs/operations.md")
	env.Removed("EVENTS_RETENTION_COUNT", "Redis keeps the events' hot tail (EVENTS_HOT_RETENTION, EVENTS_HOT_COUNT) and PostgreSQL their history (EVENTS_RETENTION); see docs/operations.md")
	if err := env.Err(); err != nil {
		return config{}, err
	}
	switch {
	case flags.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %q", flags.Args())
	case c.databaseURL == "":
		return config{}, errors.New("DATABASE_URL (or -database-url) is required")
	case c.worker.Concurrency < 1:
		return config{}, fmt.Errorf("concurrency %d: want at least 1", c.worker.Concurrency)
	case c.worker.Batch < 0:
		return config{}, fmt.Errorf("batch %d: want 0 (the concurrency) or more", c.worker.Batch)
	case c.worker.Lease < time.Second:
		return config{}, fmt.Errorf("lease %s: want at least 1s", c.worker.Lease)
	case c.worker.OwnLease < time.Second:
		return config{}, fmt.Errorf("own lease %s: want at least 1s", c.worker.OwnLease)
	case c.worker.Retry.MaxAttempts < 1:
		return config{}, fmt.Errorf("max attempts %d: want at least 1", c.worker.Retry.MaxAttempts)
	case c.worker.Retry.BaseDelay <= 0:
		return config{}, fmt.Errorf("retry base %s: want more than 0", c.worker.Retry.BaseDelay)
	case c.worker.Retry.MaxDelay < c.worker.Retry.BaseDelay:
		return config{}, fmt.Errorf("retry cap %s: want at least the retry base %s", c.worker.Retry.MaxDelay, c.worker.Retry.BaseDelay)
	case c.worker.DrainTimeout <= 0:
		return config{}, fmt.Errorf("drain timeout %s: want more than 0", c.worker.DrainTimeout)
	case c.worker.EventsHotTail.Age <= 0:
		return config{}, errors.New("EVENTS_HOT_RETENTION (or -events-hot-retention) must be a positive duration")
	case c.worker.EventsHotTail.Count < 0:
		return config{}, errors.New("EVENTS_HOT_COUNT (or -events-hot-count) must be 0 or more")
	case c.worker.EventsRetention < c.worker.EventsHotTail.Age:
		return config{}, errors.New("EVENTS_RETENTION (or -events-retention) must be at least EVENTS_HOT_RETENTION")
	case c.worker.OutboxRetention < postgres.EventRowsWindow:
		return config{}, fmt.Errorf("OUTBOX_RETENTION (or -outbox-retention) %s: want at least %s, how long a relay may read an events row back", c.worker.OutboxRetention, postgres.EventRowsWindow)
	case c.worker.CoherenceJobSize < 1 || c.worker.CoherenceJobSize > placement.CoherenceBatch:
		return config{}, fmt.Errorf("COHERENCE_JOB_SIZE (or -coherence-job-size) must be 1 to %d", placement.CoherenceBatch)
	case c.worker.WaitReplicas < 0:
		return config{}, errors.New("WORKER_WAIT_REPLICAS (or -wait-replicas) must be 0 or more")
	case c.worker.WaitReplicas > 0 && c.worker.WaitTimeout <= 0:
		return config{}, errors.New("WORKER_WAIT_TIMEOUT (or -wait-timeout) must be a positive duration when WORKER_WAIT_REPLICAS is set")
	case c.logFlush < 0:
		return config{}, fmt.Errorf("log flush interval %s: want 0 (each line at once) or more", c.logFlush)
	}
	return c, nil
}

// run applies migrations, connects to PostgreSQL and to the queue (the
// protocol fence included), and runs the settlement worker, which settles
// orders until ctx is cancelled, then drains.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	// Lines are written together, not one write(2) each (see
	// jsonlog.Buffered); the deferred call writes out the last of them.
	logger, logDone := jsonlog.ProcessLogger(stdout, c.logLevel, c.logFlush)
	defer logDone()
	defer settlement.TuneGC(getenv)()

	if c.migrate {
		if err := migrations.Up(c.databaseURL); err != nil {
			return err
		}
	}
	deps, err := settlement.Connect(ctx, c.databaseURL, c.redisURL, c.worker, logger)
	if err != nil {
		return err
	}
	defer deps.Close()

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	deps.Metrics = registry
	worker, err := settlement.New(ctx, deps, c.worker)
	if err != nil {
		return err
	}
	stopMetrics, err := metricsserver.Serve(c.metricsAddr, registry, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()

	if err := worker.Run(ctx); err != nil {
		return err
	}
	logger.Info("worker exiting")
	return nil
}
