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
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
)

type config struct {
	addr              string
	redisURL          string
	databaseURL       string
	logLevel          slog.Level
	migrate           bool
	dedupRetention    time.Duration
	instrumentRefresh time.Duration
	keyCacheTTL       time.Duration
	keyStaleIfError   time.Duration
	shutdownTimeout   time.Duration
	http              gateway.Config
}

func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	env := func(name, fallback string) string {
		if value := getenv(name); value != "" {
			return value
		}
		return fallback
	}
	defaults := gateway.DefaultConfig()
	var c config
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	flags.StringVar(&c.addr, "addr", env("GATEWAY_ADDR", "127.0.0.1:8080"), "listen address (GATEWAY_ADDR)")
	flags.StringVar(&c.redisURL, "redis-url", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL; addr= parameters make it a cluster (REDIS_URL)")
	flags.StringVar(&c.databaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	flags.TextVar(&c.logLevel, "log-level", levelOf(env("LOG_LEVEL", "info")), "debug, info, warn or error (LOG_LEVEL)")
	flags.BoolVar(&c.migrate, "migrate", env("MIGRATE", "true") == "true", "apply database migrations at start (MIGRATE)")
	flags.DurationVar(&c.dedupRetention, "dedup-retention", durationOf(env("DEDUP_RETENTION", "24h")), "how long a client_order_id is held (DEDUP_RETENTION)")
	flags.DurationVar(&c.instrumentRefresh, "instrument-refresh", durationOf(env("INSTRUMENT_REFRESH", "5s")), "how often instruments are reread (INSTRUMENT_REFRESH)")
	flags.DurationVar(&c.keyCacheTTL, "key-cache-ttl", durationOf(env("KEY_CACHE_TTL", orders.DefaultKeyCacheTTL.String())), "how long an API key's account is trusted from memory when no revocation broadcast arrives (KEY_CACHE_TTL)")
	// Parsed here, not with durationOf: 0 is a setting of its own (off), so a
	// malformed value must be refused rather than read as 0.
	staleIfError, staleIfErrorErr := time.ParseDuration(env("KEY_CACHE_STALE_IF_ERROR", orders.DefaultKeyStaleIfError.String()))
	flags.DurationVar(&c.keyStaleIfError, "key-cache-stale-if-error", staleIfError, "how long after PostgreSQL last confirmed an API key its cached copy still answers while PostgreSQL is down (also how long a key revoked just before an outage may work on a gateway that missed the broadcast); 0 turns it off (KEY_CACHE_STALE_IF_ERROR)")
	flags.DurationVar(&c.shutdownTimeout, "shutdown-timeout", durationOf(env("SHUTDOWN_TIMEOUT", "10s")), "how long in-flight requests may take at shutdown (SHUTDOWN_TIMEOUT)")
	flags.Int64Var(&c.http.BodyLimit, "body-limit", defaults.BodyLimit, "largest request body in bytes")
	flags.DurationVar(&c.http.RequestTimeout, "request-timeout", durationOf(env("REQUEST_TIMEOUT", defaults.RequestTimeout.String())), "time bound of one request (REQUEST_TIMEOUT)")
	flags.IntVar(&c.http.RateLimitBurst, "rate-limit-burst", intOf(env("RATE_LIMIT_BURST", strconv.Itoa(defaults.RateLimitBurst))), "requests one API key may make at once; 0 turns rate limiting off (RATE_LIMIT_BURST)")
	flags.IntVar(&c.http.RateLimitPerSecond, "rate-limit-per-second", intOf(env("RATE_LIMIT_PER_SECOND", strconv.Itoa(defaults.RateLimitPerSecond))), "requests a second one API key may make sustained (RATE_LIMIT_PER_SECOND)")
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	if c.databaseURL == "" {
		return config{}, errors.New("DATABASE_URL (or -database-url) is required")
	}
	if c.keyCacheTTL <= 0 {
		return config{}, errors.New("KEY_CACHE_TTL (or -key-cache-ttl) must be a positive duration")
	}
	if staleIfErrorErr != nil || c.keyStaleIfError < 0 {
		return config{}, errors.New("KEY_CACHE_STALE_IF_ERROR (or -key-cache-stale-if-error) must be a duration of 0 (off) or more")
	}
	const most = emq.MaxBucketSize
	if b, r := c.http.RateLimitBurst, c.http.RateLimitPerSecond; b < 0 || b > most || (b > 0 && (r < 1 || r > most)) {
		return config{}, fmt.Errorf("rate limit: burst %d and per-second %d must be whole numbers from 1 to %d (burst 0 turns the limit off)", b, r, most)
	}
	return c, nil
}

func levelOf(text string) slog.Level {
	var level slog.Level
	if err := level.UnmarshalText([]byte(text)); err != nil {
		return slog.LevelInfo
	}
	return level
}

// intOf reads a number; -1, which the limits refuse, when it is not one.
func intOf(text string) int {
	n, err := strconv.Atoi(text)
	if err != nil {
		return -1
	}
	return n
}

func durationOf(text string) time.Duration {
	d, err := time.ParseDuration(text)
	if err != nil {
		return 0
	}
	return d
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	log := slog.New(jsonlog.New(stdout, &slog.HandlerOptions{Level: c.logLevel}))

	if c.migrate {
		if err := migrations.Up(c.databaseURL); err != nil {
			return err
		}
	}
	db, err := pgxpool.New(ctx, c.databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer db.Close()

	queueClient, err := emq.Dial(ctx, c.redisURL, emq.WithLogger(log))
	if err != nil {
		return err
	}
	defer queueClient.Close()

	placer := orders.NewPlacer(queueClient.Queue(orders.Queue), c.dedupRetention, orders.WithHistory(orders.NewHistory(db)))
	if err := placer.Declare(ctx); err != nil {
		return err
	}
	instruments, err := orders.LoadInstruments(ctx, db)
	if err != nil {
		return err
	}
	refreshFailed := func(err error) {
		log.Warn("instrument refresh failed; serving the last copy", "err", err)
	}
	go instruments.KeepFresh(ctx, c.instrumentRefresh, refreshFailed)

	// The process's own health (memory, goroutines, file descriptors) sits
	// beside the gateway's series on its /metrics.
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := instruments.FollowBroadcasts(ctx, queueClient, refreshFailed, emq.WithBroadcastMetrics(metrics)); err != nil {
		return err
	}
	keys := orders.NewKeyCache(orders.NewAccounts(db), c.keyCacheTTL, orders.StaleIfError(c.keyStaleIfError))
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "api_key_stale_answers_total",
		Help: "API key lookups answered from a cached copy because PostgreSQL did not answer.",
	}, func() float64 { return float64(keys.StaleAnswers()) }))
	if _, err := keys.FollowRevocations(ctx, queueClient, emq.WithBroadcastMetrics(metrics)); err != nil {
		return err
	}
	server := gateway.New(gateway.Deps{
		Placer:      placer,
		Instruments: instruments,
		Accounts:    keys,
		Balances:    orders.NewBalances(db, queueClient, log),
		Probes:      probes(queueClient, db),
		Logger:      log,
		Metrics:     metrics,
	}, c.http)

	listener, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	httpServer := gateway.NewHTTPServer(c.addr, server, log)
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	log.Info("gateway listening", "addr", listener.Addr().String())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("gateway shutting down", "timeout", c.shutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("gateway stopped")
	return nil
}

// probes report short reasons; the full error goes to the log only.
func probes(queue *emq.Client, db *pgxpool.Pool) []gateway.Probe {
	return []gateway.Probe{
		{Name: "redis", Check: func(ctx context.Context) error {
			if err := queue.Redis().Ping(ctx).Err(); err != nil {
				return errors.New("down")
			}
			return nil
		}},
		{Name: "fence", Check: func(ctx context.Context) error {
			err := queue.Check(ctx)
			switch {
			case errors.Is(err, emq.ErrProtocolVersion):
				return errors.New("version mismatch")
			case err != nil:
				return errors.New("unknown: redis down")
			}
			return nil
		}},
		{Name: "postgres", Check: func(ctx context.Context) error {
			if err := db.Ping(ctx); err != nil {
				return errors.New("down")
			}
			return nil
		}},
	}
}
