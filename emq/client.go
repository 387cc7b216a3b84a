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
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProtocolVersion is the wire protocol this package speaks. A Redis that holds
// another version at {emq}:version belongs to an incompatible deployment.
const ProtocolVersion = "echomq:3.0.0"

const versionKey = "{emq}:version"

// Client is a connection to the queue server whose protocol version was fenced.
type Client struct {
	rdb    redis.UniversalClient
	logger *slog.Logger
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
	// reload asks a cluster client to reload its map of the cluster after
	// a failure that says the map may be stale; nil on a single server.
	reload *clusterReload
	// waits holds a slot per claim loop blocked on its queue's wake token
	// (claim.go, awaitAdmission), each on a connection of rdb's pool.
	waits chan struct{}
	// pending tells this client's claim loops of jobs it made pending
	// (local_wake.go).
	pending localWakes
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
	if readTimeout := c.readTimeout(); readTimeout > 0 && c.admitReplicaTimeout >= readTimeout {
		return fmt.Errorf("emq: admit replicas: a wait of %v, not shorter than the client's read timeout %v", c.admitReplicaTimeout, readTimeout)
	}
	return nil
}

// readTimeout is how long the client waits for a reply; negative for no
// bound (go-redis's -1).
func (c *Client) readTimeout() time.Duration {
	readTimeout, _ := clientOptions(c.rdb)
	if readTimeout == 0 {
		readTimeout = 3 * time.Second // go-redis's default
	}
	return readTimeout
}

// wakeWaits is how many claim loops may block on a wake token at once: a
// quarter of rdb's pool (per node on a cluster, so a quarter of a node's
// at most), none for a pool under four, which a wait would take whole. An
// idle loop's wait (WorkerOptions.WakeOnAdmission) holds its connection
// for all but the claim between two waits: unbounded, the waits of a
// process working many queues would take the whole pool, 10 per CPU (5 per
// node on a cluster), and every call that is no pipeline (a claim, a
// renewal, a completion) would queue for one. Loops beyond the bound sleep
// out their idle poll, as loops without the option do. 0 for a client
// whose pool is unknown: its loops sleep.
func wakeWaits(rdb redis.UniversalClient) int {
	_, pool := clientOptions(rdb)
	return pool / 4
}

// clientOptions are rdb's read timeout and pool size as configured (zero
// when unset, or for a client of another type).
func clientOptions(rdb redis.UniversalClient) (readTimeout time.Duration, poolSize int) {
	switch rdb := rdb.(type) {
	case *redis.Client:
		return rdb.Options().ReadTimeout, rdb.Options().PoolSize
	case *redis.ClusterClient:
		return rdb.Options().ReadTimeout, rdb.Options().PoolSize
	}
	return 0, 0
}

// WithLogger sets the logger for start-up warnings; slog.Default otherwise.
func WithLogger(logger *slog.Logger) Option {
	return func(c *Client) { c.logger = logger }
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
//
// On a Redis Cluster, Connect makes rdb reload its map of the cluster when a
// call fails in a way that says the map may be stale (see clusterReload), so
// that a promoted replica is reached within moments of its promotion rather
// than at go-redis's next periodic reload, up to a minute later.
func Connect(ctx context.Context, rdb redis.UniversalClient, opts ...Option) (*Client, error) {
	c := &Client{rdb: rdb, logger: slog.Default(), admits: newCoalescer(rdb, admitScript), permits: newCoalescer(rdb, rateLimitScript),
		waits: make(chan struct{}, wakeWaits(rdb))}
	for _, opt := range opts {
		opt(c)
	}
	c.admits.replicas, c.admits.replicaTimeout = c.admitReplicas, c.admitReplicaTimeout
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		c.reload = reloadOnTrouble(cluster)
		c.admits.reload = c.reload
	}
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
			c.logger.Debug("emq: cannot read maxmemory-policy", "err", err)
			return nil
		}
		if value := policy["maxmemory-policy"]; value != "noeviction" {
			c.logger.Warn("emq: server may evict keys and silently lose jobs; set maxmemory-policy noeviction",
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
	if c.reload != nil {
		watchedClusters.Delete(c.reload.cluster)
	}
	return c.rdb.Close()
}

// A cluster client (go-redis v9.23, osscluster.go) routes each command by
// its map of the cluster, which it reloads every
// ClusterOptions.ClusterStateReloadInterval (60 s by default) and at once
// only on a redirect (MOVED, ASK) or a READONLY reply. When a master dies,
// its connections fail (refused, reset) with no reply at all, so the
// client goes on sending to the dead node, even after the cluster promoted
// its replica, until the next periodic reload: 44-60 s of errors for every
// call to the dead master's slots (issue 23; go-redis's own issue #3979,
// open with a fix proposed in #3990). go-redis offers no option for it; a
// shorter ClusterStateReloadInterval only shortens the wait, at a CLUSTER
// SLOTS per interval per process at all times.
//
// So Connect adds a hook to the cluster client, seen by every call through
// it (the queue's, and coherence's, which shares the client), that asks for
// a reload (ClusterClient.ReloadState) when a call fails without a reply
// or with a reply saying the map is stale, at most once per reloadEvery.
// ReloadState reloads in the background, and go-redis runs one reload at a
// time, at most every 200 ms, once more after it if asked meanwhile: the
// failing calls keep asking while the master is dead and until the reload
// that follows the promotion, which names the promoted replica. The calls
// that wait for replicas go to a node's own client, which the hook does not
// see; runReplicated asks for their reloads itself.
type clusterReload struct {
	cluster *redis.ClusterClient
	last    atomic.Int64 // UnixNano of the last reload asked for
}

// reloadEvery bounds how often one cluster client is asked to reload: a
// flood of failures costs one CLUSTER SLOTS per interval at most, and a
// promotion is noticed within about an interval of go-redis's own 200 ms.
const reloadEvery = 100 * time.Millisecond

// watchedClusters holds the clusterReload of each cluster client Connect
// hooked, so a client connected twice is hooked once.
var watchedClusters sync.Map // *redis.ClusterClient → *clusterReload

// reloadOnTrouble hooks cluster, once, and returns its clusterReload.
func reloadOnTrouble(cluster *redis.ClusterClient) *clusterReload {
	r := &clusterReload{cluster: cluster}
	if known, loaded := watchedClusters.LoadOrStore(cluster, r); loaded {
		return known.(*clusterReload)
	}
	cluster.AddHook(r)
	return r
}

// after asks for a reload when err says the map may be stale.
func (r *clusterReload) after(err error) {
	if r == nil || !mapMayBeStale(err) {
		return
	}
	now := time.Now().UnixNano()
	last := r.last.Load()
	if now-last < int64(reloadEvery) || !r.last.CompareAndSwap(last, now) {
		return
	}
	r.cluster.ReloadState(context.Background())
}

// mapMayBeStale: the call failed without a reply (the node refused the
// connection, reset it, did not answer in time: it may be dead, and its
// slots served elsewhere by now), or the node answered that it no longer
// serves the slot (MOVED; READONLY from a master turned replica) or that
// the cluster is down (CLUSTERDOWN, while a failed master's slots wait for
// a promotion). A reply of any other kind (a script's refusal, redis.Nil)
// says the node serves the slot, and the caller's own cancellation, or the
// client's closing, says nothing of the cluster.
func mapMayBeStale(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, redis.ErrClosed) {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true
	}
	_, moved := redis.IsMovedError(err)
	return moved || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err)
}

// DialHook changes nothing.
func (r *clusterReload) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook asks for a reload after a command that failed so.
func (r *clusterReload) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.after(err)
		return err
	}
}

// ProcessPipelineHook asks for a reload after a pipeline any command of
// which failed so: each command has its own error.
func (r *clusterReload) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if mapMayBeStale(cmd.Err()) {
				r.after(cmd.Err())
				break
			}
		}
		return err
	}
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
