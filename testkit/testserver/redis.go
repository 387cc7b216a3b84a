package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServerEnv and RedisCLIEnv name the environment variables that choose
// the binaries the harness runs: the server of StartRedis, StartRedisCluster
// and QueueRedis, and the cli that joins a cluster's nodes. Each is an
// absolute path or a name looked up on PATH; unset or empty, they are
// redis-server and redis-cli from PATH. Any server that speaks Redis and
// takes redis.conf directives as --flags will do, e.g. Valkey's
// valkey-server with valkey-cli.
const (
	RedisServerEnv = "ORDERGATE_REDIS_SERVER"
	RedisCLIEnv    = "ORDERGATE_REDIS_CLI"
)

const (
	redisStartTimeout = 15 * time.Second
	redisStopGrace    = 15 * time.Second
	// startAttempts bounds retries when another process grabs the free port
	// between freePort and the server's bind.
	startAttempts = 3
)

// Redis is a redis-server owned by one test.
type Redis struct {
	Addr string // "127.0.0.1:port"
	Dir  string // working directory: log, RDB/AOF files

	binary  string
	port    int
	busPort int // cluster bus port; 0 outside cluster mode
	config  redisConfig

	mu      sync.Mutex
	process *serverProcess // nil while stopped
}

// RedisOption changes the configuration a Redis is started with.
type RedisOption func(*redisConfig)

type redisConfig struct {
	directives []redisDirective
	cluster    bool
}

type redisDirective struct{ name, value string }

// set replaces an earlier value of the same directive rather than appending,
// because repeating some directives (save) accumulates instead of overriding.
func (c *redisConfig) set(name, value string) {
	for i := range c.directives {
		if strings.EqualFold(c.directives[i].name, name) {
			c.directives[i].value = value
			return
		}
	}
	c.directives = append(c.directives, redisDirective{name: name, value: value})
}

// WithRedisConfig sets a redis.conf directive, e.g.
// WithRedisConfig("appendonly", "yes") or
// WithRedisConfig("maxmemory-policy", "allkeys-lru"). The network and
// directory directives (port, bind, dir, ...) are fixed by StartRedis and
// cannot be overridden.
func WithRedisConfig(directive, value string) RedisOption {
	return func(c *redisConfig) { c.set(directive, value) }
}

// clusterNode is unexported: StartRedisCluster is the way to get cluster
// nodes, because a lone cluster-enabled node serves no slots.
func clusterNode() RedisOption {
	return func(c *redisConfig) { c.cluster = true }
}

// StartRedis starts a fresh redis-server (or the server RedisServerEnv names)
// on a free loopback port in a temporary directory, waits until it answers
// PING, and stops it and removes the directory at t.Cleanup. Persistence is
// off unless opts turn it on.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	server, err := newRedis(t.TempDir(), opts...)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	// Registered after t.TempDir so it runs before the directory is removed.
	t.Cleanup(func() {
		if err := server.stop(); err != nil {
			t.Errorf("testserver: stop redis %s: %v", server.Addr, err)
		}
	})
	if err := server.startOnFreePorts(); err != nil {
		t.Fatalf("testserver: start %s: %v", filepath.Base(server.binary), err)
	}
	return server
}

// newRedis prepares, but does not start, a server whose files go to dir.
func newRedis(dir string, opts ...RedisOption) (*Redis, error) {
	binary, err := redisBinary(RedisServerEnv, "redis-server")
	if err != nil {
		return nil, err
	}
	server := &Redis{Dir: dir, binary: binary}
	server.config.set("save", "")
	server.config.set("appendonly", "no")
	for _, opt := range opts {
		opt(&server.config)
	}
	return server, nil
}

// redisBinary returns the binary that the environment variable env names, or
// fallback from PATH when it is unset or empty. A relative path is refused:
// go test runs each package in its own directory, so it would name a
// different file in each.
func redisBinary(env, fallback string) (string, error) {
	name := os.Getenv(env)
	if name == "" {
		return findBinary(fallback)
	}
	if strings.ContainsRune(name, filepath.Separator) && !filepath.IsAbs(name) {
		return "", fmt.Errorf("%s=%q: want an absolute path or a name on PATH; "+
			"go test runs each package in its own directory", env, name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", env, name, err)
	}
	return path, nil
}

// startOnFreePorts starts the server on free ports, choosing new ones when
// another process took them first. The caller stops the server, also after
// an error.
func (r *Redis) startOnFreePorts() error {
	var startErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if startErr = r.choosePorts(); startErr != nil {
			break
		}
		if startErr = r.start(); startErr == nil {
			return nil
		}
		if !strings.Contains(startErr.Error(), "in use") {
			break
		}
	}
	return startErr
}

func (r *Redis) choosePorts() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	r.port, r.Addr = port, addr(port)
	if r.config.cluster {
		if r.busPort, err = freePort(); err != nil {
			return err
		}
	}
	return nil
}

func (r *Redis) args() []string {
	config := redisConfig{directives: append([]redisDirective(nil), r.config.directives...)}
	config.set("port", fmt.Sprint(r.port))
	config.set("bind", "127.0.0.1")
	config.set("protected-mode", "no")
	config.set("daemonize", "no")
	config.set("dir", r.Dir)
	config.set("logfile", "") // stdout, which goes to redis.log
	if r.config.cluster {
		config.set("cluster-enabled", "yes")
		config.set("cluster-config-file", "nodes.conf")
		config.set("cluster-port", fmt.Sprint(r.busPort))
	}
	args := make([]string, 0, 2*len(config.directives))
	for _, directive := range config.directives {
		args = append(args, "--"+directive.name, directive.value)
	}
	return args
}

func (r *Redis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.process != nil {
		return nil
	}
	process, err := startServerProcess(filepath.Base(r.binary)+" "+r.Addr, processSpec{
		path:    r.binary,
		args:    r.args(),
		workDir: r.Dir,
		logPath: filepath.Join(r.Dir, "redis.log"),
	})
	if err != nil {
		return err
	}
	if err := process.waitUntilReady(redisStartTimeout, func() error { return pingRedis(r.Addr) }); err != nil {
		_ = process.stop(syscall.SIGKILL, time.Second)
		return err
	}
	r.process = process
	return nil
}

func (r *Redis) stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.process == nil {
		return nil
	}
	// SHUTDOWN does what SIGTERM does (flush the AOF, write an RDB if save
	// points are configured) but at once, where a signal waits up to 100 ms
	// for the server's next cron tick. SIGTERM remains the fallback.
	if shutdownRedis(r.Addr) == nil {
		select {
		case <-r.process.exited:
		case <-time.After(redisStopGrace):
		}
	}
	err := r.process.stop(syscall.SIGTERM, redisStopGrace)
	r.process = nil
	return err
}

// shutdownRedis returns nil once the server has closed the connection in
// answer to SHUTDOWN, which it does only by exiting.
func shutdownRedis(address string) error {
	conn, err := net.DialTimeout("tcp", address, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(redisStopGrace))
	if _, err := conn.Write([]byte("SHUTDOWN\r\n")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("SHUTDOWN answered %q", strings.TrimSpace(reply))
}

// pingRedis speaks RESP directly so that probing a starting server neither
// needs a client nor logs connection errors.
func pingRedis(address string) error {
	conn, err := net.DialTimeout("tcp", address, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// -LOADING while an AOF/RDB is replayed: not ready yet.
	if strings.TrimSpace(reply) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(reply))
	}
	return nil
}

// URL is the redis:// URL of database 0.
func (r *Redis) URL() string {
	return "redis://" + r.Addr + "/0"
}

// Client returns a go-redis client for r, closed at t.Cleanup.
func (r *Redis) Client(t testing.TB) *redis.Client {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// Stop shuts the server down now, as an outage would. It keeps the port and
// directory for Restart and does nothing if the server is already stopped.
func (r *Redis) Stop(t testing.TB) {
	t.Helper()
	if err := r.stop(); err != nil {
		t.Fatalf("testserver: stop redis %s: %v", r.Addr, err)
	}
}

// Restart starts the server again on the same port and directory, stopping
// it first if it is running. Data survives only if persistence was
// configured (e.g. WithRedisConfig("appendonly", "yes")).
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if err := r.stop(); err != nil {
		t.Fatalf("testserver: stop redis %s: %v", r.Addr, err)
	}
	if err := r.start(); err != nil {
		t.Fatalf("testserver: restart redis %s: %v", r.Addr, err)
	}
}

// RedisCluster is a three-master Redis Cluster, with no replicas unless
// WithReplicas asks for them: one owned by a test (StartRedisCluster) or the
// one shared by a test binary (SharedRedisCluster).
type RedisCluster struct {
	// Addrs are every node's addresses, replicas included: the seeds a
	// cluster client starts from.
	Addrs []string
	nodes []*Redis
	// config is how StartRedisCluster was asked to build the cluster.
	config clusterConfig
}

// ClusterOption changes the cluster StartRedisCluster builds.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	replicas    int
	nodeTimeout time.Duration
}

// WithReplicas gives each of the three masters n replicas (3 × (1 + n) nodes).
// StartRedisCluster returns once every replica's link to its master is up,
// so a master may be killed at once and its replica promoted (see
// RedisCluster.Kill and WaitForPromotion).
func WithReplicas(n int) ClusterOption {
	return func(c *clusterConfig) { c.replicas = n }
}

// WithNodeTimeout sets every node's cluster-node-timeout (15 s by default):
// how long a master may be unreachable before the others count it failed
// and its replica asks to be promoted, which then takes about as long again
// (a random delay of 0.5–1 s, the vote). With 1 s, a killed master's replica
// is promoted 2–4 s after the kill.
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// StartRedisCluster starts three cluster-enabled masters (and their replicas,
// WithReplicas) on free ports, joins them with `redis-cli --cluster create`
// (or the cli RedisCLIEnv names), waits until every node reports
// cluster_state:ok and every replica's link is up, and stops them all at
// t.Cleanup.
func StartRedisCluster(t testing.TB, opts ...ClusterOption) *RedisCluster {
	t.Helper()
	dir := t.TempDir()
	cluster := &RedisCluster{}
	for _, opt := range opts {
		opt(&cluster.config)
	}
	// Registered after t.TempDir so it runs before the directory is removed.
	t.Cleanup(func() {
		if err := cluster.stop(); err != nil {
			t.Errorf("testserver: stop redis cluster: %v", err)
		}
	})
	if err := cluster.start(dir); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return cluster
}

// start starts the nodes with their files in subdirectories of dir. The
// caller stops the cluster, also after an error.
func (c *RedisCluster) start(dir string) error {
	cli, err := redisBinary(RedisCLIEnv, "redis-cli")
	if err != nil {
		return err
	}
	const masters = 3
	var nodeOpts []RedisOption
	nodeOpts = append(nodeOpts, clusterNode())
	if c.config.replicas > 0 {
		// A master waits 5 s by default before a diskless full sync, for
		// more replicas to share it: the replicas of a test's cluster all
		// ask at once, or not at all.
		nodeOpts = append(nodeOpts, WithRedisConfig("repl-diskless-sync-delay", "0"))
	}
	if c.config.nodeTimeout > 0 {
		nodeOpts = append(nodeOpts, WithRedisConfig("cluster-node-timeout", fmt.Sprint(c.config.nodeTimeout.Milliseconds())))
	}
	for i := range masters * (1 + c.config.replicas) {
		nodeDir := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.Mkdir(nodeDir, 0o755); err != nil {
			return fmt.Errorf("create node dir: %w", err)
		}
		node, err := newRedis(nodeDir, nodeOpts...)
		if err != nil {
			return err
		}
		c.nodes = append(c.nodes, node)
		if err := node.startOnFreePorts(); err != nil {
			return fmt.Errorf("start %s: %w", filepath.Base(node.binary), err)
		}
		c.Addrs = append(c.Addrs, node.Addr)
	}

	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", fmt.Sprint(c.config.replicas), "--cluster-yes")
	err = runToCompletion(filepath.Base(cli)+" --cluster create", processSpec{
		path:    cli,
		args:    args,
		workDir: dir,
		logPath: filepath.Join(dir, "cluster-create.log"),
	}, 60*time.Second)
	if err != nil {
		return err
	}
	if err := c.waitUntilOK(30 * time.Second); err != nil {
		return err
	}
	return c.waitForReplicas(30 * time.Second)
}

// stop stops every node that was started.
func (c *RedisCluster) stop() error {
	var errs []error
	for _, node := range c.nodes {
		if err := node.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop redis %s: %w", node.Addr, err))
		}
	}
	return errors.Join(errs...)
}

// waitUntilOK is needed because redis-cli returns once the nodes agree on
// the configuration, but each node flips to cluster_state:ok on its own
// schedule afterwards.
func (c *RedisCluster) waitUntilOK(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, address := range c.Addrs {
		client := redis.NewClient(&redis.Options{Addr: address})
		var info string
		var err error
		for {
			info, err = client.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				_ = client.Close()
				return fmt.Errorf("redis cluster node %s not ok after %s (err %v):\n%s", address, timeout, err, info)
			}
			time.Sleep(10 * time.Millisecond)
		}
		_ = client.Close()
	}
	return nil
}

// URL is a redis:// URL naming every node, in the form emq.Open reads as a
// cluster: redis://addr0?addr=addr1&addr=addr2.
func (c *RedisCluster) URL() string {
	return "redis://" + c.Addrs[0] + "?addr=" + strings.Join(c.Addrs[1:], "&addr=")
}

// Client returns a go-redis cluster client for c, closed at t.Cleanup.
func (c *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = client.Close() })
	return client
}
