package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
)

type config struct {
	redisURL     string
	databaseURL  string
	migrate      bool
	concurrency  int
	batch        int
	lease        time.Duration
	maxAttempts  int
	retryBase    time.Duration
	retryCap     time.Duration
	drainTimeout time.Duration
	metricsAddr  string
	logLevel     slog.Level
}

// The retry defaults are sized for a PostgreSQL outage, the failure
// settlement meets most: equal jitter waits at least half of each backoff,
// so 60 attempts from 100ms doubling to 10s keep an order alive through at
// least 4.4 minutes of outage (6.6 on average) before it is dead, and an
// order waits at most 10s once the database is back.
const (
	defaultMaxAttempts = 60
	defaultRetryBase   = 100 * time.Millisecond
	defaultRetryCap    = 10 * time.Second
)

const usageHeader = `Usage: worker [flags]

Claims order jobs from the %q queue and settles each in one PostgreSQL
transaction (ledger, balances, the order's final row, the journal outbox),
with the emq worker runtime: leases renewed by a heartbeat, expired leases
reaped, failures retried with backoff, and a graceful drain on SIGTERM or
SIGINT (a second signal stops at once). Migrations are applied at start
unless -migrate=false.

Every flag falls back to the environment variable in parentheses, then to the
default shown.

`

// parseConfig reads flags, falling back to the environment. An environment
// variable that does not parse is an error, not a silent default: a typo in
// WORKER_LEASE must not run the fleet with a lease nobody chose.
func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	var envErrs []error
	text := func(name, fallback string) string {
		if value := getenv(name); value != "" {
			return value
		}
		return fallback
	}
	integer := func(name string, fallback int) int {
		value := getenv(name)
		if value == "" {
			return fallback
		}
		parsed, err := strconv.Atoi(value)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s=%q: not an integer", name, value))
			return fallback
		}
		return parsed
	}
	duration := func(name string, fallback time.Duration) time.Duration {
		value := getenv(name)
		if value == "" {
			return fallback
		}
		parsed, err := time.ParseDuration(value)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s=%q: not a duration such as 30s", name, value))
			return fallback
		}
		return parsed
	}
	boolean := func(name string, fallback bool) bool {
		value := getenv(name)
		if value == "" {
			return fallback
		}
		parsed, err := strconv.ParseBool(value)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s=%q: want true or false", name, value))
			return fallback
		}
		return parsed
	}
	level := func(name string) slog.Level {
		var parsed slog.Level
		value := text(name, "info")
		if err := parsed.UnmarshalText([]byte(value)); err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s=%q: want debug, info, warn or error", name, value))
			return slog.LevelInfo
		}
		return parsed
	}

	var c config
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(output)
	flags.Usage = func() {
		fmt.Fprintf(flags.Output(), usageHeader, orders.Queue)
		flags.PrintDefaults()
	}
	flags.StringVar(&c.redisURL, "redis-url", text("REDIS_URL", "redis://127.0.0.1:6379/0"),
		"Redis URL; addr= parameters make it a cluster (REDIS_URL)")
	flags.StringVar(&c.databaseURL, "database-url", text("DATABASE_URL", ""),
		"PostgreSQL URL, required; the worker keeps concurrency + 4 connections (DATABASE_URL)")
	flags.BoolVar(&c.migrate, "migrate", boolean("MIGRATE", true), "apply database migrations at start (MIGRATE)")
	flags.IntVar(&c.concurrency, "concurrency", integer("WORKER_CONCURRENCY", 8),
		"orders handled at once (WORKER_CONCURRENCY)")
	flags.IntVar(&c.batch, "batch", integer("WORKER_BATCH", 0),
		"most orders one claim takes; 0 means the concurrency (WORKER_BATCH)")
	flags.DurationVar(&c.lease, "lease", duration("WORKER_LEASE", 30*time.Second),
		"how long a claim holds an order; a dead worker's orders run again after about this long (WORKER_LEASE)")
	flags.IntVar(&c.maxAttempts, "max-attempts", integer("WORKER_MAX_ATTEMPTS", defaultMaxAttempts),
		"attempts an order gets before it is dead; with the default backoff, 60 outlast a PostgreSQL outage of over 4 minutes (WORKER_MAX_ATTEMPTS)")
	flags.DurationVar(&c.retryBase, "retry-base", duration("WORKER_RETRY_BASE", defaultRetryBase),
		"backoff before an order's second attempt; it doubles with each failed attempt (WORKER_RETRY_BASE)")
	flags.DurationVar(&c.retryCap, "retry-cap", duration("WORKER_RETRY_CAP", defaultRetryCap),
		"longest backoff between two attempts of an order (WORKER_RETRY_CAP)")
	flags.DurationVar(&c.drainTimeout, "drain-timeout", duration("WORKER_DRAIN_TIMEOUT", 10*time.Second),
		"after a stop signal, how long in-flight orders may take before they are released to other workers (WORKER_DRAIN_TIMEOUT)")
	flags.StringVar(&c.metricsAddr, "metrics-addr", text("METRICS_ADDR", "127.0.0.1:9091"),
		"where /metrics (Prometheus) and /healthz are served; empty serves neither (METRICS_ADDR)")
	flags.TextVar(&c.logLevel, "log-level", level("LOG_LEVEL"), "debug, info, warn or error (LOG_LEVEL)")
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	if len(envErrs) > 0 {
		return config{}, errors.Join(envErrs...)
	}
	switch {
	case flags.NArg() > 0:
		return config{}, fmt.Errorf("unexpected arguments %q", flags.Args())
	case c.databaseURL == "":
		return config{}, errors.New("DATABASE_URL (or -database-url) is required")
	case c.concurrency < 1:
		return config{}, fmt.Errorf("concurrency %d: want at least 1", c.concurrency)
	case c.batch < 0:
		return config{}, fmt.Errorf("batch %d: want 0 (the concurrency) or more", c.batch)
	case c.lease < time.Second:
		return config{}, fmt.Errorf("lease %s: want at least 1s", c.lease)
	case c.maxAttempts < 1:
		return config{}, fmt.Errorf("max attempts %d: want at least 1", c.maxAttempts)
	case c.retryBase <= 0:
		return config{}, fmt.Errorf("retry base %s: want more than 0", c.retryBase)
	case c.retryCap < c.retryBase:
		return config{}, fmt.Errorf("retry cap %s: want at least the retry base %s", c.retryCap, c.retryBase)
	case c.drainTimeout <= 0:
		return config{}, fmt.Errorf("drain timeout %s: want more than 0", c.drainTimeout)
	}
	return c, nil
}

// run applies migrations, connects to PostgreSQL and to the queue (the
// protocol fence included), declares the order kind and settles orders
// until ctx is cancelled, then drains.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(jsonlog.New(stdout, &slog.HandlerOptions{Level: c.logLevel}))

	if c.migrate {
		if err := migrations.Up(c.databaseURL); err != nil {
			return err
		}
	}
	db, err := openDatabase(ctx, c)
	if err != nil {
		return err
	}
	defer db.Close()

	queueClient, err := emq.Dial(ctx, c.redisURL, emq.WithLogger(log))
	if err != nil {
		return err
	}
	defer queueClient.Close()
	queue := queueClient.Queue(orders.Queue)
	if err := queue.Declare(ctx, orders.KindPlace); err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := emq.NewMetrics(registry)
	stopMetrics, err := serveMetrics(c.metricsAddr, registry, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	extra, err := coherence(ctx, process{config: c, queues: queueClient, db: db, log: log, metrics: metrics})
	if err != nil {
		return err
	}
	settler := orders.NewSettler(db, extra.relay, log.With("queue", orders.Queue)).WithMetrics(orders.NewSettlementMetrics(registry))
	err = workBeside(ctx, extra.loops, func(ctx context.Context) error {
		return queue.Work(ctx, settler.Settle, emq.WorkerOptions{
			Concurrency:  c.concurrency,
			Batch:        c.batch,
			Lease:        c.lease,
			Retry:        emq.RetryPolicy{MaxAttempts: c.maxAttempts, BaseDelay: c.retryBase, MaxDelay: c.retryCap},
			DrainTimeout: c.drainTimeout,
			Logger:       log,
			Metrics:      metrics,
		})
	})
	if err != nil {
		return err
	}
	log.Info("worker exiting")
	return nil
}

// process is what one worker process has to share with what runs in it.
type process struct {
	config  config
	queues  *emq.Client
	db      *pgxpool.Pool
	log     *slog.Logger
	metrics *emq.Metrics
}

// lanes is what runs beside settlement in the worker process.
type lanes struct {
	// relay hears of each settlement's journal entries right after its
	// commit; nil leaves the rows in the outbox for a sweep.
	relay orders.Relayer
	// loops run until their context ends, alongside the settlement worker;
	// one failing stops the process.
	loops []func(ctx context.Context) error
}

// coherenceAttempts is, at a 10 s backoff cap, more than a week of retries.
const coherenceAttempts = 100_000

// coherence runs the balance coherence job lane beside settlement: the
// journal relay the settler hands committed entries to, the relay's sweep of
// rows a crash (or an admin deposit) left behind, and the ecc.coh.balances
// consumer that refreshes cached balances.
func coherence(ctx context.Context, p process) (lanes, error) {
	relay := orders.NewJournalRelay(p.db, p.queues, orders.CoherenceLanes, p.log)
	if err := relay.Declare(ctx); err != nil {
		return lanes{}, err
	}
	consumer := orders.NewBalanceCoherence(p.db, p.queues, p.log)
	lane := p.queues.Queue(emq.CoherenceQueue(orders.BalancesTable))
	return lanes{
		relay: relay,
		loops: []func(context.Context) error{
			func(ctx context.Context) error {
				relay.KeepSweeping(ctx, time.Second)
				return nil
			},
			func(ctx context.Context) error {
				// A coherence job that died would leave its cached balance stale
				// until the next change (its journal row is relayed already), so
				// it keeps retrying, at the capped backoff, for as long as it takes.
				//
				// The handlers wait for the consumer's shared batch and hold no
				// connection of their own, so the lane runs as many at once as a
				// batch takes, not the settlement concurrency.
				return lane.Work(ctx, consumer.Handle, emq.WorkerOptions{
					Concurrency:  orders.CoherenceBatch,
					Lease:        p.config.lease,
					Retry:        emq.RetryPolicy{MaxAttempts: coherenceAttempts, BaseDelay: p.config.retryBase, MaxDelay: p.config.retryCap},
					DrainTimeout: p.config.drainTimeout,
					Logger:       p.log,
					Metrics:      p.metrics,
				})
			},
		},
	}, nil
}

// workBeside runs work and loops together until ctx ends. A loop that fails
// before then stops the rest, so the process exits instead of settling
// without its coherence lane; work's drain is waited for either way.
func workBeside(ctx context.Context, loops []func(context.Context) error, work func(context.Context) error) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	errs := make([]error, len(loops))
	var running sync.WaitGroup
	for i, loop := range loops {
		running.Go(func() {
			if err := loop(ctx); err != nil && ctx.Err() == nil {
				errs[i] = err
				stop(err)
			}
		})
	}
	workErr := work(ctx)
	stop(nil)
	running.Wait()
	return errors.Join(append([]error{workErr}, errs...)...)
}

// openDatabase sizes the pool to the concurrency: the settler runs one
// transaction at a time for the orders in flight, but when PostgreSQL refuses
// a batch its orders settle alone at once, one connection each, and pgx's
// default of four would make them queue for connections rather than for the
// rows they lock. The few more are for what runs beside settlement (the
// coherence lane).
func openDatabase(ctx context.Context, c config) (*pgxpool.Pool, error) {
	poolConfig, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	poolConfig.MaxConns = int32(c.concurrency + 4)
	db, err := pgxpool.NewWithConfig(ctx, poolConfig)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return db, nil
}

// serveMetrics serves /metrics and /healthz on addr until the returned stop
// is called; an empty addr serves nothing.
func serveMetrics(addr string, registry *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	log.Info("metrics listening", "addr", listener.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := server.Shutdown(ctx); err != nil {
			log.Warn("metrics server shutdown", "err", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "err", err)
		}
	}, nil
}
