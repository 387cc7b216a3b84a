// Package emq (EchoMQ) is a fenced, lease-based reliable queue on Redis (or
// Valkey); the protocol version it fences on is named echomq.
//
// Every state move of a job is one Lua script from package lua, run
// EVALSHA-first. All keys of queue q carry the hash tag {q}, and every key a
// script touches is passed in KEYS, so the protocol runs unchanged on Redis
// Cluster. emq knows nothing of what its jobs carry.
package emq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProtocolVersion is the wire protocol this package speaks. A Redis that holds
// another version at {emq}:version belongs to an incompatible deployment.
const ProtocolVersion = "echomq:3.0.0"

const versionKey = "{emq}:version"

// Client is a connection to the queue server whose protocol version was fenced.
type Client struct {
	rdb redis.UniversalClient
	log *slog.Logger
	// admits and permits carry the calls that arrive one per request (Admit,
	// Queue.TakePermit), so concurrent requests share round trips.
	admits, permits *coalescer
	// dedup holds, by queue name, the queue's dedup settings as this client
	// last read them (*dedupSettingsCell).
	dedup sync.Map
	// admitReplicas and admitReplicaTimeout: see WithAdmitReplicas.
	admitReplicas       int
	admitReplicaTimeout time.Duration
	// skewAllowance is how far apart admitting processes' clocks may be;
	// dedupSkewAllowance when zero. Tests shorten it.
	skewAllowance time.Duration
}

// Option configures Connect.
type Option func(*Client)

// WithAdmitReplicas makes every Admit wait until replicas replicas hold
// its writes (Redis WAIT, at most timeout) before it answers, and answer a
// *NotReplicatedError when fewer did. The admission's writes are made on
// the primary either way: what the wait buys is that an acknowledged
// admission survives a failover to a replica that counted. AdmitMany does
// not wait.
func WithAdmitReplicas(replicas int, timeout time.Duration) Option {
	return func(c *Client) { c.admitReplicas, c.admitReplicaTimeout = replicas, timeout }
}

// checkAdmitReplicas refuses a wait the client cannot make: WAIT with a
// zero timeout blocks for good, and a pipeline's reply is read within the
// client's read timeout, so a WAIT as long would lose the admissions'
// answers with it.
func (c *Client) checkAdmitReplicas() error {
	if c.admitReplicas <= 0 {
		return nil
	}
	if c.admitReplicaTimeout < time.Millisecond {
		return fmt.Errorf("emq: admit replicas: a wait of %v; want at least 1ms", c.admitReplicaTimeout)
	}
	var readTimeout time.Duration
	switch rdb := c.rdb.(type) {
	case *redis.Client:
		readTimeout = rdb.Options().ReadTimeout
	case *redis.ClusterClient:
		readTimeout = rdb.Options().ReadTimeout
	}
	if readTimeout == 0 {
		readTimeout = 3 * time.Second // go-redis's default
	}
	if readTimeout > 0 && c.admitReplicaTimeout >= readTimeout {
		return fmt.Errorf("emq: admit replicas: a wait of %v, not shorter than the client's read timeout %v", c.admitReplicaTimeout, readTimeout)
	}
	return nil
}

// WithLogger sets the logger for start-up warnings; slog.Default otherwise.
func WithLogger(log *slog.Logger) Option {
	return func(c *Client) { c.log = log }
}

// Connect claims or verifies the protocol version before any other command:
// SET {emq}:version NX, then read it back. A server holding another version is
// refused with a *VersionError. It warns when the server may evict keys, since
// an evicting server silently loses jobs.
//
// rdb's retry options may be anything: go-redis sends reads and the moves
// whose second run is harmless again after a lost reply, as rdb says, but
// never a move whose second run would do harm (a claim, a completion, an
// admission...: see emq/scripts.go), which fails instead with the lost
// reply's error.
func Connect(ctx context.Context, rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	c := &Client{rdb: rdb, log: slog.Default(), admits: newCoalescer(rdb, admitScript), permits: newCoalescer(rdb, rateLimitScript)}
	for _, opt := range opts {
		opt(c)
	}
	c.admits.replicas, c.admits.replicaTimeout = c.admitReplicas, c.admitReplicaTimeout
	if err := c.checkAdmitReplicas(); err != nil {
		return nil, err
	}
	if err := c.fence(ctx); err != nil {
		return nil, err
	}
	c.warnIfEvicting(ctx)
	return c, nil
}

// Dial opens a client for the URL (see Open) and connects it, protocol fence
// included; the connection pool is closed again when Connect refuses.
func Dial(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	rdb, err := Open(rawURL)
	if err != nil {
		return nil, err
	}
	client, err := Connect(ctx, rdb, opts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return client, nil
}

// Redis returns the underlying client, for callers that share the connection.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

func (c *Client) fence(ctx context.Context) error {
	if err := c.rdb.SetNX(ctx, versionKey, ProtocolVersion, 0).Err(); err != nil {
		return fmt.Errorf("emq: claim protocol version: %w", err)
	}
	return c.verifyVersion(ctx)
}

func (c *Client) verifyVersion(ctx context.Context) error {
	got, err := c.rdb.Get(ctx, versionKey).Result()
	if errors.Is(err, redis.Nil) {
		return &VersionError{Want: ProtocolVersion, Got: ""}
	}
	if err != nil {
		return fmt.Errorf("emq: read protocol version: %w", err)
	}
	if got != ProtocolVersion {
		return &VersionError{Want: ProtocolVersion, Got: got}
	}
	return nil
}

func (c *Client) warnIfEvicting(ctx context.Context) {
	check := func(ctx context.Context, node *redis.Client) error {
		policy, err := node.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			// Managed servers often refuse CONFIG; not knowing is not an error.
			c.log.Debug("emq: cannot read maxmemory-policy", "err", err)
			return nil
		}
		if value := policy["maxmemory-policy"]; value != "noeviction" {
			c.log.Warn("emq: server may evict keys and silently lose jobs; set maxmemory-policy noeviction",
				"addr", node.Options().Addr, "maxmemory-policy", value)
		}
		return nil
	}
	switch rdb := c.rdb.(type) {
	case *redis.ClusterClient:
		_ = rdb.ForEachMaster(ctx, check)
	case *redis.Client:
		_ = check(ctx, rdb)
	}
}

// Check reports whether the server answers and still holds this protocol
// version; readiness probes call it.
func (c *Client) Check(ctx context.Context) error {
	if err := c.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("emq: ping: %w", err)
	}
	return c.verifyVersion(ctx)
}

// Close waits for the round trips in flight, then closes the connection pool.
func (c *Client) Close() error {
	c.admits.close()
	c.permits.close()
	return c.rdb.Close()
}

// Open makes a go-redis client from a URL. redis://host:port/db (or rediss://)
// is one server; a URL with addr= query parameters, as in
// redis://host1:port1?addr=host2:port2&addr=host3:port3, is a Redis Cluster.
// Retries (max_retries, a cluster's max_redirects) are the URL's or go-redis's
// defaults: see Connect for what is sent again after a lost reply.
func Open(rawURL string) (redis.UniversalClient, error) {
	parsed, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("emq: redis url: %w", err)
	}
	if parsed.Query().Has("addr") {
		opts, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("emq: redis cluster url: %w", err)
		}
		timeouts(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout)
		opts.DialerRetries = dialerRetries
		return redis.NewClusterClient(opts), nil
	}
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("emq: redis url: %w", err)
	}
	timeouts(&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout)
	opts.DialerRetries = dialerRetries
	return redis.NewClient(opts), nil
}

// dialerRetries keeps a dead server from costing each call five dial attempts:
// callers notice an outage in well under a second and back off themselves.
const dialerRetries = 1

// timeouts bounds every call so a dead server turns into an error quickly
// instead of a hung request; URL parameters win where given.
func timeouts(dial, read, write *time.Duration) {
	for _, d := range []struct {
		target *time.Duration
		value  time.Duration
	}{{dial, 2 * time.Second}, {read, 2 * time.Second}, {write, 2 * time.Second}} {
		if *d.target == 0 {
			*d.target = d.value
		}
	}
}
