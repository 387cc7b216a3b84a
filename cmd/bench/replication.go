package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
)

// replicationResult is the admit script with one replica attached to the
// queue's Redis, answered as soon as the primary has an admission and
// again only once the replica has it too (ADMIT_WAIT_REPLICAS=1), in
// alternating rounds.
type replicationResult struct {
	Without  loadResult `json:"without_wait"`
	WithWait loadResult `json:"with_wait_1"`
	// Ratio is WithWait's orders/s over Without's; Rounds is that ratio in
	// each round.
	Ratio  float64   `json:"ratio"`
	Rounds []float64 `json:"rounds"`
}

// replicaWaitTimeout is how long a bench admission waits for the replica:
// long enough that a loaded machine never answers one unreplicated.
const replicaWaitTimeout = time.Second

// replication runs the phase: a replica of the bench's Redis for its
// length, then both loads taking turns.
func (e *env) replication(ctx context.Context, c config, s *servers, progress func(string, ...any)) (replicationResult, error) {
	var r replicationResult
	if s.redisAddr == "" {
		progress("replication: skipped (REDIS_URL given: no replica of it can be started here)")
		return r, nil
	}
	stop, err := startReplica(ctx, s)
	if err != nil {
		return r, err
	}
	defer stop()
	waiting, err := emq.Dial(ctx, s.redisURL, emq.WithAdmitReplicas(1, replicaWaitTimeout))
	if err != nil {
		return r, err
	}
	defer waiting.Close()
	without, err := e.admitOp(ctx, e.queue, "repl-no-wait")
	if err != nil {
		return r, err
	}
	withWait, err := e.admitOp(ctx, waiting, "repl-wait")
	if err != nil {
		return r, err
	}
	a, b := closedLoopOp{name: "admit script, one replica", op: without}, closedLoopOp{name: "the same, WAIT 1", op: withWait}
	alternating(ctx, c.concurrency, time.Second, time.Second, func(string, ...any) {}, a, b)
	progress("replication: the admit script with one replica, without and with WAIT 1, %d callers, taking turns for %s each…", c.concurrency, c.duration)
	r.Without, r.WithWait, r.Rounds = alternating(ctx, c.concurrency, c.duration, time.Second, progress, a, b)
	if r.Without.PerSecond > 0 {
		r.Ratio = r.WithWait.PerSecond / r.Without.PerSecond
	}
	if r.WithWait.Errors > 0 {
		return r, fmt.Errorf("replication: %d admissions were not acknowledged by the replica: %s", r.WithWait.Errors, r.WithWait.FirstError)
	}
	return r, nil
}

// startReplica starts a redis-server replicating the bench's, waits until
// it is in sync, and returns what stops it (the primary then has none).
func startReplica(ctx context.Context, s *servers) (stop func(), err error) {
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	host, primaryPort, err := net.SplitHostPort(s.redisAddr)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.dir, "replica")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no",
		"--replicaof", host, primaryPort)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the replica: %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	stop = func() {
		_ = client.ShutdownNoSave(context.Background()).Err()
		_ = client.Close()
		_ = cmd.Wait()
	}
	if err := waitFor(ctx, 30*time.Second, func() error {
		info, err := client.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") || !strings.Contains(info, "master_sync_in_progress:0") {
			return errors.New("not in sync yet")
		}
		return nil
	}); err != nil {
		stop()
		return nil, fmt.Errorf("the replica on port %d: %w (log in %s)", port, err, logFile.Name())
	}
	return stop, nil
}

// markdown is the phase's table.
func (r replicationResult) markdown() string {
	var b strings.Builder
	b.WriteString("| admission with one replica attached | orders/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|\n")
	for _, l := range []loadResult{r.Without, r.WithWait} {
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %d |\n", l.Name, l.PerSecond, l.P50Ms, l.P99Ms, l.Errors)
	}
	fmt.Fprintf(&b, "\nWith `ADMIT_WAIT_REPLICAS=1` an admission is answered once the replica holds it: %.1f%% of the rate without (rounds %s).\n\n",
		100*r.Ratio, roundsRange(r.Rounds))
	return b.String()
}

func roundsRange(rounds []float64) string {
	if len(rounds) == 0 {
		return "none"
	}
	low, high := rounds[0], rounds[0]
	for _, x := range rounds {
		low, high = min(low, x), max(high, x)
	}
	return fmt.Sprintf("%.1f%%–%.1f%%", 100*low, 100*high)
}
