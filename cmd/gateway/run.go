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
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/internal/cpuprofile"
	"github.com/ordergate/ordergate/internal/environ"
	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/internal/metricsserver"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/signing"
)

type config struct {
	addr              string
	metricsAddr       string
	redisURL          string
	databaseURL       string
	logLevel          slog.Level
	logFlush          time.Duration
	migrate           bool
	dedupRetention    time.Duration
	cancelWait        time.Duration
	coherenceJobSize  int
	coherenceRemote   bool
	coherenceAmounts  bool
	waitReplicas      int
	waitTimeout       time.Duration
	instrumentRefresh time.Duration
	keyCacheTTL       time.Duration
	keyStaleIfError   time.Duration
	tracking          bool
	trackingTTL       time.Duration
	shutdownTimeout   time.Duration
	// cpuProfile is where a Go CPU profile of the whole run goes; none
	// when empty.
	cpuProfile string
	// sealer opens the signing secrets of keys that require signatures;
	// nil when SIGNING_KEY_ENCRYPTION_KEY is unset, and such keys' requests
	// are then refused.
	sealer *signing.Sealer
	http   gateway.Config
}

// parseConfig reads flags, falling back to the environment. A variable that
// does not parse is refused, not read as a default or as zero: a typo in
// REQUEST_TIMEOUT must not start a gateway that times out every request.
func parseConfig(args []string, getenv func(string) string, stdout io.Writer) (config, error) {
	env := environ.NewReader(getenv)
	defaults := gateway.DefaultConfig()
	var c config
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	flags.StringVar(&c.addr, "addr", env.String("GATEWAY_ADDR", "127.0.0.1:8080"), "listen address (GATEWAY_ADDR)")
	flags.StringVar(&c.metricsAddr, "metrics-addr", env.String("METRICS_ADDR", "127.0.0.1:9090"), "where /metrics (Prometheus) and /healthz are served, apart from the API; empty serves neither (METRICS_ADDR)")
	flags.StringVar(&c.redisURL, "redis-url", env.String("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL; addr= parameters make it a cluster (REDIS_URL)")
	flags.StringVar(&c.databaseURL, "database-url", env.String("DATABASE_URL", ""), "PostgreSQL URL (DATABASE_URL)")
	flags.TextVar(&c.logLevel, "log-level", env.Level("LOG_LEVEL", slog.LevelInfo), "debug, info, warn or error (LOG_LEVEL)")
	flags.DurationVar(&c.logFlush, "log-flush-interval", env.Duration("LOG_FLUSH_INTERVAL", jsonlog.DefaultFlushInterval), "longest a log line waits to be written with the ones after it; 0 writes each line at once (LOG_FLUSH_INTERVAL)")
	flags.BoolVar(&c.migrate, "migrate", env.Bool("MIGRATE", true), "apply database migrations at start (MIGRATE)")
	flags.IntVar(&c.waitReplicas, "admit-wait-replicas", env.Int("ADMIT_WAIT_REPLICAS", 0), "Redis replicas that must hold an admitted order before it is answered 202; 0 answers when the primary has it (ADMIT_WAIT_REPLICAS)")
	flags.DurationVar(&c.waitTimeout, "admit-wait-timeout", env.Duration("ADMIT_WAIT_TIMEOUT", 100*time.Millisecond), "how long an admission waits for its replicas before it is answered 503 (ADMIT_WAIT_TIMEOUT)")
	flags.DurationVar(&c.dedupRetention, "dedup-retention", env.Duration("DEDUP_RETENTION", emq.DefaultDedupRetention), "how long a client_order_id is held in Redis at least; stored with the orders queue, so the last gateway to start sets it for all (DEDUP_RETENTION)")
	flags.BoolVar(&c.coherenceRemote, "coherence-remote", env.Bool("COHERENCE_REMOTE", true),
		"put a cancel's coherence jobs on the remote queue, which workers wait on; false (the shards, polled every second) while workers of a release without that queue still run (COHERENCE_REMOTE)")
	flags.BoolVar(&c.coherenceAmounts, "coherence-balance-amounts", env.Bool("COHERENCE_BALANCE_AMOUNTS", true),
		"list the balance a cancel's release moves with its amounts, so the coherence consumer reads nothing back; false while workers of a release whose consumer refuses such lines still run (COHERENCE_BALANCE_AMOUNTS)")
	flags.IntVar(&c.coherenceJobSize, "coherence-job-size", env.Int("COHERENCE_JOB_SIZE", placement.CoherenceBatch),
		"most balance changes one coherence job of a cancel's release lists; 1 while workers of a release reading one change a job still run (COHERENCE_JOB_SIZE)")
	flags.DurationVar(&c.cancelWait, "cancel-wait", env.Duration("CANCEL_WAIT", placement.DefaultCancelWait), "how long a cancel of a resting order waits for its instrument's owner to decide it before it is answered 202 (at most three quarters of what is left of the request's timeout); 0 cancels in PostgreSQL under the instrument's lock instead, for workers that predate queued cancels (CANCEL_WAIT)")
	flags.DurationVar(&c.instrumentRefresh, "instrument-refresh", env.Duration("INSTRUMENT_REFRESH", 5*time.Second), "how often instruments are reread (INSTRUMENT_REFRESH)")
	flags.DurationVar(&c.keyCacheTTL, "key-cache-ttl", env.Duration("KEY_CACHE_TTL", placement.DefaultKeyCacheTTL), "how long an API key's account is trusted from memory when no revocation broadcast arrives (KEY_CACHE_TTL)")
	flags.DurationVar(&c.keyStaleIfError, "key-cache-stale-if-error", env.Duration("KEY_CACHE_STALE_IF_ERROR", placement.DefaultKeyStaleIfError), "how long after PostgreSQL last confirmed an API key its cached copy still answers while PostgreSQL is down (also how long a key revoked just before an outage may work on a gateway that missed the broadcast); 0 turns it off (KEY_CACHE_STALE_IF_ERROR)")
	flags.BoolVar(&c.tracking, "tracking", env.Bool("TRACKING", true), "keep a local copy of API key stamps and balances that Redis invalidates (the tracking coherence mode); refused on a Redis Cluster (TRACKING)")
	flags.DurationVar(&c.trackingTTL, "tracking-ttl", env.Duration("TRACKING_TTL", coherence.DefaultTrackingTTL), "longest an entry of the local copy is served without a read from Redis, jittered down by up to a quarter (TRACKING_TTL)")
	flags.DurationVar(&c.shutdownTimeout, "shutdown-timeout", env.Duration("SHUTDOWN_TIMEOUT", 10*time.Second), "how long in-flight requests may take at shutdown (SHUTDOWN_TIMEOUT)")
	flags.StringVar(&c.cpuProfile, "cpuprofile", env.String("CPU_PROFILE", ""), "write a Go CPU profile of the process, from its start to its stop, to this file (CPU_PROFILE)")
	flags.Int64Var(&c.http.BodyLimit, "body-limit", defaults.BodyLimit, "largest request body in bytes")
	flags.DurationVar(&c.http.RequestTimeout, "request-timeout", env.Duration("REQUEST_TIMEOUT", defaults.RequestTimeout), "time bound of one request (REQUEST_TIMEOUT)")
	flags.IntVar(&c.http.RateLimitBurst, "rate-limit-burst", env.Int("RATE_LIMIT_BURST", defaults.RateLimitBurst), "requests one API key may make at once; 0 turns rate limiting off (RATE_LIMIT_BURST)")
	flags.IntVar(&c.http.RateLimitPerSecond, "rate-limit-per-second", env.Int("RATE_LIMIT_PER_SECOND", defaults.RateLimitPerSecond), "requests a second one API key may make sustained (RATE_LIMIT_PER_SECOND)")
	flags.DurationVar(&c.http.SignatureSkew, "signature-max-skew", env.Duration("SIGNATURE_MAX_SKEW", defaults.SignatureSkew), "how far from the gateway's clock, either way, a signed request's timestamp may be (SIGNATURE_MAX_SKEW)")
	flags.DurationVar(&c.http.EventHeartbeat, "events-heartbeat", env.Duration("EVENTS_HEARTBEAT", defaults.EventHeartbeat), "how long an event stream (GET /v1/events) may be silent before a heartbeat comment (EVENTS_HEARTBEAT)")
	flags.IntVar(&c.http.EventStreamsPerKey, "events-streams-per-key", env.Int("EVENTS_STREAMS_PER_KEY", defaults.EventStreamsPerKey),
		"event streams one API key may have open at once, across the gateways on one Redis; 0 is no cap (EVENTS_STREAMS_PER_KEY)")
	flags.IntVar(&c.http.EventStreamsPerAddress, "events-streams-per-address", env.Int("EVENTS_STREAMS_PER_ADDRESS", defaults.EventStreamsPerAddress),
		"event streams one client address (IPv4, or IPv6 /64) may have open at once, across the gateways on one Redis; 0 is no cap (EVENTS_STREAMS_PER_ADDRESS)")
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	// The workers keep the events' retention now (Redis's hot tail, the
	// history in PostgreSQL): the old names stop a gateway rather than be
	// ignored.
	env.Removed("EVENTS_RETENTION_AGE", "the workers keep the events: their hot tail in Redis (EVENTS_HOT_RETENTION, EVENTS_HOT_COUNT), their history in PostgreSQL (EVENTS_RETENTION); see docs/operations.md")
	env.Removed("EVENTS_RETENTION_COUNT", "the workers keep the events: their hot tail in Redis (EVENTS_HOT_RETENTION, EVENTS_HOT_COUNT), their history in PostgreSQL (EVENTS_RETENTION); see docs/operations.md")
	if err := env.Err(); err != nil {
		return config{}, err
	}
	switch {
	case c.databaseURL == "":
		return config{}, errors.New("DATABASE_URL (or -database-url) is required")
	case c.waitReplicas < 0:
		return config{}, errors.New("ADMIT_WAIT_REPLICAS (or -admit-wait-replicas) must be 0 or more")
	case c.waitReplicas > 0 && c.waitTimeout <= 0:
		return config{}, errors.New("ADMIT_WAIT_TIMEOUT (or -admit-wait-timeout) must be a positive duration when ADMIT_WAIT_REPLICAS is set")
	case c.dedupRetention <= 0:
		return config{}, errors.New("DEDUP_RETENTION (or -dedup-retention) must be a positive duration")
	case c.coherenceJobSize < 1 || c.coherenceJobSize > placement.CoherenceBatch:
		return config{}, fmt.Errorf("COHERENCE_JOB_SIZE (or -coherence-job-size) must be 1 to %d", placement.CoherenceBatch)
	case c.cancelWait < 0:
		return config{}, errors.New("CANCEL_WAIT (or -cancel-wait) must be a duration of 0 (cancel in PostgreSQL) or more")
	case c.instrumentRefresh <= 0:
		return config{}, errors.New("INSTRUMENT_REFRESH (or -instrument-refresh) must be a positive duration")
	case c.keyCacheTTL <= 0:
		return config{}, errors.New("KEY_CACHE_TTL (or -key-cache-ttl) must be a positive duration")
	case c.keyStaleIfError < 0:
		return config{}, errors.New("KEY_CACHE_STALE_IF_ERROR (or -key-cache-stale-if-error) must be a duration of 0 (off) or more")
	case c.logFlush < 0:
		return config{}, errors.New("LOG_FLUSH_INTERVAL (or -log-flush-interval) must be a duration of 0 (each line at once) or more")
	case c.shutdownTimeout < 0:
		return config{}, errors.New("SHUTDOWN_TIMEOUT (or -shutdown-timeout) must be a duration of 0 (no wait) or more")
	case getenv("SIGNATURE_WINDOW") != "":
		return config{}, errors.New("SIGNATURE_WINDOW is now SIGNATURE_MAX_SKEW (a window is a dedup window here): rename it")
	case c.http.SignatureSkew <= 0 || c.http.SignatureSkew > gateway.MaxSignatureSkew:
		return config{}, fmt.Errorf("SIGNATURE_MAX_SKEW (or -signature-max-skew) must be a positive duration of at most %s", gateway.MaxSignatureSkew)
	}
	if err := c.http.Validate(); err != nil {
		return config{}, err
	}
	// From the environment only: a flag's value would show in the process
	// list.
	if text := getenv("SIGNING_KEY_ENCRYPTION_KEY"); text != "" {
		var err error
		if c.sealer, err = signing.ParseSealer(text); err != nil {
			return config{}, fmt.Errorf("SIGNING_KEY_ENCRYPTION_KEY: %w", err)
		}
	}
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseConfig(args, getenv, stdout)
	if err != nil {
		return err
	}
	// Lines are written together, not one write(2) each (see
	// jsonlog.Buffered); the deferred call writes out the last of them.
	logger, logDone := jsonlog.ProcessLogger(stdout, c.logLevel, c.logFlush)
	defer logDone()
	if c.cpuProfile != "" {
		stop, err := cpuprofile.Start(c.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			if err := stop(); err != nil {
				logger.Error("cpu profile not written", "err", err)
			}
		}()
	}

	if c.migrate {
		if err := migrations.Up(c.databaseURL); err != nil {
			return err
		}
	}
	db, err := postgres.NewPool(ctx, c.databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer db.Close()

	queueClient, err := emq.Dial(ctx, c.redisURL, emq.WithLogger(logger), emq.WithAdmitReplicas(c.waitReplicas, c.waitTimeout))
	if err != nil {
		return err
	}
	defer queueClient.Close()
	caches := coherence.New(queueClient.Redis(), coherence.WithLogger(logger))

	// A cancel of a resting order releases its hold; the relay carries the
	// balances' outbox rows at once, as a worker's does after a settlement,
	// onto the queue whose workers wait for its jobs (no claim loop here
	// hears of them).
	relayOptions := []placement.RelayOption{placement.WithCoherenceJobSize(c.coherenceJobSize)}
	if c.coherenceRemote {
		relayOptions = append(relayOptions, placement.WithRemoteCoherence())
	}
	relay := placement.NewOutboxRelay(postgres.NewOutbox(db), queueClient, placement.CoherenceModes, logger, relayOptions...)
	if err := relay.Declare(ctx); err != nil {
		return err
	}
	settler := postgres.NewSettler(db, relay, logger)
	if c.coherenceJobSize == 1 {
		// The rollout form: workers of earlier releases may sweep the rows.
		settler.WithBalanceRowEach()
	}
	if !c.coherenceAmounts {
		settler.WithoutBalanceValues()
	}
	book := postgres.NewOrders(postgres.NewHistory(db), settler)
	instruments, err := placement.LoadInstruments(ctx, postgres.NewInstruments(db))
	if err != nil {
		return err
	}
	// Each instrument's orders on a queue of its own; a look-up by id
	// searches the queues of the instruments the cache lists.
	queues := placement.NewOrderQueues(queueClient, placement.WithQueueOptions(emq.WithDedupRetention(c.dedupRetention)),
		placement.WithSymbols(instruments.Symbols))
	placer := placement.NewPlacer(queues, placement.WithHistory(book), placement.WithQueuedCancels(c.cancelWait))
	if err := placer.Declare(ctx, instruments.Symbols()...); err != nil {
		return err
	}
	refreshFailed := func(err error) {
		logger.Warn("instrument refresh failed; serving the last copy", "err", err)
	}
	go instruments.KeepFresh(ctx, c.instrumentRefresh, refreshFailed)

	// The process's own health (memory, goroutines, file descriptors) sits
	// beside the gateway's series on its metrics listener.
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if _, err := instruments.FollowBroadcasts(ctx, caches, refreshFailed, coherence.WithBroadcastMetrics(metrics)); err != nil {
		return err
	}
	keyOptions := []placement.KeyCacheOption{placement.StaleIfError(c.keyStaleIfError)}
	if c.sealer != nil {
		keyOptions = append(keyOptions, placement.OpenSecretsWith(c.sealer))
	}
	balances := placement.NewBalances(postgres.NewBalances(db), caches, logger)
	if local := trackedCaches(c, queueClient, metrics, logger); local != nil {
		defer local.Close()
		tracked := coherence.New(local.Client(), coherence.WithLogger(logger))
		keyOptions = append(keyOptions, placement.TrackRevocations(tracked))
		instruments.TrackChanges(tracked)
		balances.WithLocalCopy(tracked)
	}
	keys := placement.NewKeyCache(postgres.NewAccounts(db), c.keyCacheTTL, keyOptions...)
	metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "api_key_stale_answers_total",
		Help: "API key lookups answered from a cached copy because PostgreSQL did not answer.",
	}, func() float64 { return float64(keys.StaleAnswers()) }))
	for _, reason := range []placement.LookupReason{placement.RequestLookup, placement.StreamsLookup, placement.RefreshLookup} {
		metrics.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "api_key_lookups_total",
			Help:        "API key lookups in PostgreSQL, one query each: reason request on a request's path, streams the event streams' keys due together, refresh keys in use ahead of their copies' expiry.",
			ConstLabels: prometheus.Labels{"reason": reason.String()},
		}, func() float64 { return float64(keys.Lookups(reason)) }))
	}
	// Keys in use are refreshed before their copies expire, so a steady
	// client's requests do not wait on PostgreSQL for their key.
	go keys.RefreshAhead(ctx)
	if _, err := keys.FollowRevocations(ctx, caches, coherence.WithBroadcastMetrics(metrics)); err != nil {
		return err
	}
	// Customers' keys recognized from the first request on; a failure only
	// leaves them to be learned one lookup at a time.
	if loaded, unverifiable, err := keys.Preload(ctx); err != nil {
		logger.Warn("API keys not preloaded; each is learned at its first request", "err", err)
	} else {
		logger.Info("API keys preloaded", "keys", loaded)
		if unverifiable > 0 {
			logger.Error("API keys require signatures whose secrets do not open here: their signed requests are answered 503 until SIGNING_KEY_ENCRYPTION_KEY is the key they were sealed under",
				"keys", unverifiable, "encryption_key_set", c.sealer != nil)
		}
	}
	// Each shard's tail loop of the event streams holds one connection of
	// the pool while it waits (go-redis extends its read timeout by the
	// block), once a stream of an account of the shard is open.
	// A stream that resumes further back than Redis's hot tail reads the
	// history in PostgreSQL first.
	events := placement.NewEventStreams(placement.NewEventLogs(queueClient), placement.WithEventLogger(logger),
		placement.WithEventHistory(postgres.NewEventHistory(db)))
	defer events.Close()
	server := gateway.New(gateway.Deps{
		Placer:      placer,
		Instruments: instruments,
		Accounts:    keys,
		Signatures:  placement.NewSignatures(queueClient.Redis()),
		Balances:    balances,
		Depth:       postgres.NewBook(db),
		Fills:       postgres.NewFills(db),
		Events:      events,
		StreamSeats: placement.NewStreamSeats(queueClient.Queue(placement.StreamSeatsQueue)),
		Probes:      probes(queueClient, db),
		Logger:      logger,
		Metrics:     metrics,
	}, c.http)

	// The metrics listener is not the API's: the series (routes, admissions,
	// the runtime) are for the operator, so the API's port can face the
	// public network and this one need not. It starts first, so it answers
	// once /readyz does, and stops last (deferred), so the drain below can
	// be watched.
	stopMetrics, err := metricsserver.Serve(c.metricsAddr, metrics, logger)
	if err != nil {
		return err
	}
	defer stopMetrics()
	listener, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	httpServer := gateway.NewHTTPServer(c.addr, server, logger)
	// Streams never end by themselves: the shutdown ends them (their
	// clients resume on another gateway), or its drain would wait for them.
	httpServer.RegisterOnShutdown(events.Close)
	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	// An order canceled on its queue whose row was not written (PostgreSQL
	// down, a lost reply) gets it here, before the queue trims its record.
	go placer.KeepRecordingCancels(ctx, cancelRecordInterval, logger)
	logger.Info("gateway listening", "addr", listener.Addr().String())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("gateway shutting down", "timeout", c.shutdownTimeout.String())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	logger.Info("gateway stopped")
	return nil
}

// cancelRecordInterval is how often the gateway records the cancels left
// unrecorded (placement.Placer.KeepRecordingCancels).
const cancelRecordInterval = 10 * time.Second

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

// trackedCaches is the gateway's local copy of what it reads from Redis
// (the tracking coherence mode): nil when it is turned off, or refused
// because REDIS_URL names a cluster, whose reads then go to Redis.
func trackedCaches(c config, queueClient *emq.Client, metrics prometheus.Registerer, logger *slog.Logger) *coherence.Tracking {
	if !c.tracking {
		return nil
	}
	single, ok := queueClient.Redis().(*redis.Client)
	if !ok {
		logger.Info("no local copy of Redis reads: "+coherence.ErrTrackingRefused.Error(), "tracking", false)
		return nil
	}
	local, err := coherence.NewTracking(single.Options(), coherence.TrackingConfig{TTL: c.trackingTTL, Metrics: metrics})
	if err != nil {
		logger.Warn("no local copy of Redis reads", "err", err)
		return nil
	}
	return local
}
