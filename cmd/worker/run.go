package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

type config struct {
	redisURL     string
	concurrency  int
	batch        int
	lease        time.Duration
	maxAttempts  int
	drainTimeout time.Duration
	metricsAddr  string
	logLevel     slog.Level
}

const usageHeader = `Usage: worker [flags]

Claims order jobs from the %q queue and handles them with the emq worker
runtime: leases renewed by a heartbeat, expired leases reaped, failures
retried with backoff, and a graceful drain on SIGTERM or SIGINT (a second
signal stops at once). Until settlement lands, the handler accepts each order.

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
	flags.IntVar(&c.concurrency, "concurrency", integer("WORKER_CONCURRENCY", 8),
		"orders handled at once (WORKER_CONCURRENCY)")
	flags.IntVar(&c.batch, "batch", integer("WORKER_BATCH", 0),
		"most orders one claim takes; 0 means the concurrency (WORKER_BATCH)")
	flags.DurationVar(&c.lease, "lease", duration("WORKER_LEASE", 30*time.Second),
		"how long a claim holds an order; a dead worker's orders run again after about this long (WORKER_LEASE)")
	flags.IntVar(&c.maxAttempts, "max-attempts", integer("WORKER_MAX_ATTEMPTS", 10),
		"attempts an order gets before it is dead (WORKER_MAX_ATTEMPTS)")
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
	case c.concurrency < 1:
		return config{}, fmt.Errorf("concurrency %d: want at least 1", c.concurrency)
	case c.batch < 0:
		return config{}, fmt.Errorf("batch %d: want 0 (the concurrency) or more", c.batch)
	case c.lease < time.Second:
		return config{}, fmt.Errorf("lease %s: want at least 1s", c.lease)
	case c.maxAttempts < 1:
		return config{}, fmt.Errorf("max attempts %d: want at least 1", c.maxAttempts)
	case c.drainTimeout <= 0:
		return config{}, fmt.Errorf("drain timeout %s: want more than 0", c.drainTimeout)
	}
	return c, nil
}

// run connects to the queue (the protocol fence included), declares the
// order kind and works the orders queue until ctx is cancelled, then drains.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, &slog.HandlerOptions{Level: c.logLevel}))

	rdb, err := emq.Open(c.redisURL)
	if err != nil {
		return err
	}
	queueClient, err := emq.Connect(ctx, rdb, emq.WithLogger(log))
	if err != nil {
		rdb.Close()
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

	err = queue.Work(ctx, acceptOrder(log), emq.WorkerOptions{
		Concurrency:  c.concurrency,
		Batch:        c.batch,
		Lease:        c.lease,
		Retry:        emq.RetryPolicy{MaxAttempts: c.maxAttempts},
		DrainTimeout: c.drainTimeout,
		Logger:       log,
		Metrics:      metrics,
	})
	if err != nil {
		return err
	}
	log.Info("worker exiting")
	return nil
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

// acceptOrder is the handler until settlement lands: it reads the order and
// accepts it, so the job completes. A job that is not a readable order can
// never be settled, so it fails permanently instead of being retried.
func acceptOrder(log *slog.Logger) emq.Handler {
	log = log.With("queue", orders.Queue)
	return func(ctx context.Context, job emq.Claim) error {
		if job.Kind != orders.KindPlace {
			return emq.Permanent(fmt.Errorf("job %s: kind %q is not %q", job.ID, job.Kind, orders.KindPlace))
		}
		var order orders.Order
		if err := json.Unmarshal(job.Payload, &order); err != nil {
			return emq.Permanent(fmt.Errorf("job %s: decode order: %w", job.ID, err))
		}
		log.Info("order accepted", "order_id", order.ID, "account", order.Account, "token", job.Token)
		return nil
	}
}
