// Command asynq measures hibiken/asynq on a given Redis the way cmd/bench
// measures emq: N tasks of a given payload size enqueued by C goroutines, one
// Enqueue per call, then processed by a server of concurrency C with a no-op
// handler. It prints one JSON object on stdout and its progress on stderr.
//
// It is a module of its own so that the product never depends on asynq;
// cmd/bench runs it as a subprocess against the Redis it measures emq on.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

const taskType = "bench:noop"

type config struct {
	redis       string
	db          int
	queue       string
	concurrency int
	payload     int
	tasks       int
}

// rate is one measured step: tasks in seconds.
type rate struct {
	Tasks     int     `json:"tasks"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

func newRate(tasks int, took time.Duration) rate {
	return rate{Tasks: tasks, Seconds: took.Seconds(), PerSecond: float64(tasks) / took.Seconds()}
}

type result struct {
	System       string `json:"system"`
	Version      string `json:"version"`
	GoVersion    string `json:"go_version"`
	Concurrency  int    `json:"concurrency"`
	PayloadBytes int    `json:"payload_bytes"`
	Enqueue      rate   `json:"enqueue"`
	Process      rate   `json:"process"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "asynq bench:", err)
		os.Exit(1)
	}
}

func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&c.redis, "redis", "redis://127.0.0.1:6379/0", "Redis URL (redis://host:port/db) or host:port")
	flags.IntVar(&c.db, "db", -1, "Redis database number; the URL's (or 0) when negative")
	flags.StringVar(&c.queue, "queue", "bench", "asynq queue the tasks go through; its keys are deleted afterwards")
	flags.IntVar(&c.concurrency, "concurrency", 32, "enqueueing goroutines, and the server's Concurrency")
	flags.IntVar(&c.payload, "payload", 256, "payload bytes per task")
	flags.IntVar(&c.tasks, "tasks", 100_000, "tasks enqueued and processed")
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	if c.concurrency < 1 || c.payload < 0 || c.tasks < 1 || c.queue == "" {
		return config{}, errors.New("want -concurrency ≥ 1, -payload ≥ 0, -tasks ≥ 1 and a -queue")
	}
	return c, nil
}

func (c config) redisOpt() (asynq.RedisClientOpt, error) {
	uri := c.redis
	if !strings.Contains(uri, "://") {
		uri = "redis://" + uri
	}
	parsed, err := asynq.ParseRedisURI(uri)
	if err != nil {
		return asynq.RedisClientOpt{}, err
	}
	opt, ok := parsed.(asynq.RedisClientOpt)
	if !ok {
		return asynq.RedisClientOpt{}, fmt.Errorf("%s is not a single Redis server", c.redis)
	}
	if c.db >= 0 {
		opt.DB = c.db
	}
	return opt, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	opt, err := c.redisOpt()
	if err != nil {
		return err
	}
	progress := log.New(stderr, "asynq: ", log.Lmsgprefix)
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return errors.New("asynq's Redis client is not a go-redis client")
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", c.redis, err)
	}
	// A queue left by an interrupted run would add its tasks to this one.
	if err := deleteQueue(ctx, rdb, c.queue); err != nil {
		return err
	}
	defer func() {
		if err := deleteQueue(context.WithoutCancel(ctx), rdb, c.queue); err != nil {
			progress.Printf("cleaning up: %v", err)
		}
	}()

	r := result{System: "asynq", Version: moduleVersion("github.com/hibiken/asynq"), GoVersion: runtime.Version(),
		Concurrency: c.concurrency, PayloadBytes: c.payload}
	progress.Printf("enqueueing %d tasks of %d B with %d goroutines…", c.tasks, c.payload, c.concurrency)
	if r.Enqueue, err = enqueue(ctx, c, opt); err != nil {
		return err
	}
	progress.Printf("enqueue: %.0f tasks/s; processing with concurrency %d…", r.Enqueue.PerSecond, c.concurrency)
	if r.Process, err = process(ctx, c, opt); err != nil {
		return err
	}
	progress.Printf("process: %.0f tasks/s", r.Process.PerSecond)
	return json.NewEncoder(stdout).Encode(r)
}

// enqueue puts c.tasks tasks on the queue from c.concurrency goroutines, one
// Enqueue (one round trip) per task, as emq's Admit is one per job.
func enqueue(ctx context.Context, c config, opt asynq.RedisClientOpt) (rate, error) {
	client := asynq.NewClient(opt)
	defer client.Close()
	payload := []byte(strings.Repeat("x", c.payload))
	var next atomic.Int64
	errs := make([]error, c.concurrency)
	var wg sync.WaitGroup
	started := time.Now()
	for g := range c.concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(c.tasks) {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask(taskType, payload), asynq.Queue(c.queue)); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(started)
	if err := errors.Join(errs...); err != nil {
		return rate{}, fmt.Errorf("enqueue: %w", err)
	}
	return newRate(c.tasks, took), nil
}

// process runs a server over the filled queue and times it from its start
// until the queue has recorded every task as processed. The server is asynq
// as it ships: its processor dequeues one task per round trip from a single
// loop while up to Concurrency handlers run, and each handler's task is
// marked done in a round trip of its own.
func process(ctx context.Context, c config, opt asynq.RedisClientOpt) (rate, error) {
	var handled atomic.Int64
	allHandled := make(chan struct{})
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(c.tasks) {
			close(allHandled)
		}
		return nil
	})
	server := asynq.NewServer(opt, asynq.Config{
		Concurrency: c.concurrency,
		Queues:      map[string]int{c.queue: 1},
		// TaskCheckInterval is the sleep after a dequeue finds every queue
		// empty (default 1 s, jittered between ½ and 1½ of it). The queue is
		// full from the start, so it only matters at the very end; it is set
		// to emq's idle poll so that neither system is given a longer pause.
		TaskCheckInterval: 50 * time.Millisecond,
		// Retention is zero (the default): a done task is deleted, the
		// cheapest end asynq offers. Nothing fails, so retries never run.
		LogLevel:        asynq.WarnLevel,
		ShutdownTimeout: 5 * time.Second,
	})
	inspector := asynq.NewInspector(opt)
	defer inspector.Close()

	started := time.Now()
	if err := server.Start(handler); err != nil {
		return rate{}, fmt.Errorf("start server: %w", err)
	}
	defer server.Shutdown()
	select {
	case <-allHandled:
	case <-ctx.Done():
		return rate{}, ctx.Err()
	}
	// The handler returns before the server records the task as done (one
	// more round trip); the run ends when the queue counts them all.
	for {
		info, err := inspector.GetQueueInfo(c.queue)
		if err != nil {
			return rate{}, fmt.Errorf("queue info: %w", err)
		}
		if info.ProcessedTotal >= c.tasks && info.Pending == 0 && info.Active == 0 {
			break
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return rate{}, ctx.Err()
		}
	}
	return newRate(c.tasks, time.Since(started)), nil
}

// deleteQueue removes every key of the queue and its name from the queue
// registry. The inspector's DeleteQueue refuses a queue with active tasks
// (an interrupted run leaves some) and keeps the processed counters, so the
// keys are deleted by asynq's layout: all of a queue's keys share the prefix
// asynq:{<queue>}:.
func deleteQueue(ctx context.Context, rdb redis.UniversalClient, queue string) error {
	iter := rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("scan queue %s keys: %w", queue, err)
	}
	for start := 0; start < len(keys); start += 1000 {
		if err := rdb.Unlink(ctx, keys[start:min(start+1000, len(keys))]...).Err(); err != nil {
			return fmt.Errorf("unlink queue %s keys: %w", queue, err)
		}
	}
	if err := rdb.SRem(ctx, "asynq:queues", queue).Err(); err != nil {
		return fmt.Errorf("unregister queue %s: %w", queue, err)
	}
	return nil
}

func moduleVersion(path string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == path {
			return dep.Version
		}
	}
	return "unknown"
}
