package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// asynqModule is the directory, relative to the repository root, of the
// separate module that measures hibiken/asynq: the product never depends on
// asynq, so it is built and run as a subprocess.
const asynqModule = "bench/asynq"

// queuePassOrder is the order of the passes: emq, asynq, asynq, emq, so that
// load on the machine that drifts during the phase weighs on both alike.
var queuePassOrder = []string{"emq", "asynq", "asynq", "emq"}

// queueRate is one measured step of a pass: tasks in seconds.
type queueRate struct {
	Tasks     int     `json:"tasks"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

func newQueueRate(tasks int, took time.Duration) queueRate {
	return queueRate{Tasks: tasks, Seconds: took.Seconds(), PerSecond: float64(tasks) / took.Seconds()}
}

// add sums two steps: their tasks over their seconds.
func (r queueRate) add(other queueRate) queueRate {
	sum := queueRate{Tasks: r.Tasks + other.Tasks, Seconds: r.Seconds + other.Seconds}
	if sum.Seconds > 0 {
		sum.PerSecond = float64(sum.Tasks) / sum.Seconds
	}
	return sum
}

// queuePass is one system's enqueue and processing of the phase's jobs. The
// JSON names match what bench/asynq prints.
type queuePass struct {
	System  string    `json:"system"`
	Version string    `json:"version,omitempty"`
	Enqueue queueRate `json:"enqueue"`
	Process queueRate `json:"process"`
}

// queueResult compares emq with hibiken/asynq on the same Redis, with the
// same concurrency, payload size and job count.
type queueResult struct {
	Jobs         int         `json:"jobs"`
	Concurrency  int         `json:"concurrency"`
	PayloadBytes int         `json:"payload_bytes"`
	AsynqVersion string      `json:"asynq_version"`
	Passes       []queuePass `json:"passes"`
	// EMQ and Asynq sum each system's passes: total jobs over total seconds.
	EMQ   queuePass `json:"emq"`
	Asynq queuePass `json:"asynq"`
	// The ratios are emq's rate over asynq's.
	EnqueueRatio float64 `json:"enqueue_ratio"`
	ProcessRatio float64 `json:"claim_complete_ratio"`
}

// compareQueues enqueues c.queueJobs jobs and processes them with a no-op
// handler, on emq and on asynq in turn, each on a queue of its own that it
// deletes afterwards, so every pass starts on a Redis without the other's
// jobs.
func (e *env) compareQueues(ctx context.Context, c config, redisURL string, progress func(string, ...any)) (queueResult, error) {
	if parsed, err := url.Parse(redisURL); err != nil || parsed.Query().Has("addr") {
		return queueResult{}, errors.New("queue: the asynq comparison needs a single Redis server, not a cluster URL")
	}
	// The jobs carry what the product's queue carries: an order's payload.
	sample, err := orderJob("bench-size", "size", orders.Buy)
	if err != nil {
		return queueResult{}, err
	}
	r := queueResult{Jobs: c.queueJobs, Concurrency: c.concurrency, PayloadBytes: len(sample.Payload)}

	dir, err := os.MkdirTemp("", "ordergate-bench-asynq-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	progress("queue: building the asynq benchmark (%s)…", asynqModule)
	asynqBench, err := buildAsynqBench(ctx, dir)
	if err != nil {
		return r, err
	}

	for i, system := range queuePassOrder {
		name := fmt.Sprintf("bench-queue-%s-%d-%s", system, i, e.run)
		progress("queue: pass %d of %d, %s: %d jobs of %d B, concurrency %d…",
			i+1, len(queuePassOrder), system, r.Jobs, r.PayloadBytes, r.Concurrency)
		var pass queuePass
		if system == "emq" {
			pass, err = e.emqPass(ctx, name, r, progress)
		} else {
			pass, err = asynqPass(ctx, asynqBench, redisURL, name, r, progress)
		}
		if err != nil {
			return r, fmt.Errorf("queue: %s pass: %w", system, err)
		}
		progress("queue: %s enqueued %.0f jobs/s, claimed and completed %.0f jobs/s",
			system, pass.Enqueue.PerSecond, pass.Process.PerSecond)
		r.Passes = append(r.Passes, pass)
	}
	r.EMQ.System, r.Asynq.System = "emq", "asynq"
	for _, pass := range r.Passes {
		total := &r.EMQ
		if pass.System == "asynq" {
			total = &r.Asynq
			r.AsynqVersion = pass.Version
		}
		total.Enqueue = total.Enqueue.add(pass.Enqueue)
		total.Process = total.Process.add(pass.Process)
	}
	if r.Asynq.Enqueue.PerSecond > 0 {
		r.EnqueueRatio = r.EMQ.Enqueue.PerSecond / r.Asynq.Enqueue.PerSecond
	}
	if r.Asynq.Process.PerSecond > 0 {
		r.ProcessRatio = r.EMQ.Process.PerSecond / r.Asynq.Process.PerSecond
	}
	return r, nil
}

// emqPass admits the jobs from c goroutines, one Admit per job as the
// gateway does, then runs the emq runtime (Queue.Work) with a no-op handler
// until every job is completed.
func (e *env) emqPass(ctx context.Context, name string, r queueResult, progress func(string, ...any)) (queuePass, error) {
	pass := queuePass{System: "emq"}
	queue := e.queue.Queue(name, emq.WithDedupRetention(benchDedupRetention))
	defer func() {
		if err := queue.Purge(context.WithoutCancel(ctx)); err != nil {
			progress("queue: cleaning up %s: %v", name, err)
		}
	}()
	const kind = "bench.noop"
	if err := queue.Declare(ctx, kind); err != nil {
		return pass, err
	}
	// The previous pass's garbage is not this one's to collect.
	runtime.GC()

	payload := bytes.Repeat([]byte("x"), r.PayloadBytes)
	var next atomic.Int64
	errs := make([]error, r.Concurrency)
	var admitters sync.WaitGroup
	started := time.Now()
	for g := range r.Concurrency {
		admitters.Go(func() {
			for i := next.Add(1); i <= int64(r.Jobs); i = next.Add(1) {
				id := "j" + strconv.FormatInt(i, 10)
				// Groups spread the jobs over fair lanes as the accounts
				// spread orders.
				group := "g" + strconv.FormatInt(i%benchAccounts, 10)
				job := emq.Job{ID: id, Kind: kind, Group: group, Payload: payload}
				if _, err := queue.Admit(ctx, job); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	admitters.Wait()
	pass.Enqueue = newQueueRate(r.Jobs, time.Since(started))
	if err := errors.Join(errs...); err != nil {
		return pass, err
	}
	progress("queue: emq admitted %.0f jobs/s; working them off…", pass.Enqueue.PerSecond)

	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var completed atomic.Int64
	allCompleted := make(chan struct{})
	worked := make(chan error, 1)
	started = time.Now()
	go func() {
		worked <- queue.Work(workCtx, func(context.Context, emq.Claim) error { return nil }, emq.WorkerOptions{
			Concurrency: r.Concurrency,
			Logger:      e.logger,
			OnComplete: func(emq.Claim) {
				if completed.Add(1) == int64(r.Jobs) {
					close(allCompleted)
				}
			},
		})
	}()
	select {
	case <-allCompleted:
	case err := <-worked:
		return pass, fmt.Errorf("work stopped after %d of %d jobs: %w", completed.Load(), r.Jobs, err)
	case <-ctx.Done():
		stopWork()
		<-worked
		return pass, ctx.Err()
	}
	pass.Process = newQueueRate(r.Jobs, time.Since(started))
	stopWork()
	if err := <-worked; err != nil {
		return pass, err
	}
	return pass, nil
}

// buildAsynqBench builds the asynq module into dir once, so that no pass
// includes a compile and the binary is the same for every pass.
func buildAsynqBench(ctx context.Context, dir string) (string, error) {
	module, err := findAsynqModule()
	if err != nil {
		return "", err
	}
	binary := filepath.Join(dir, "asynq-bench")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, ".")
	build.Dir = module
	build.Env = append(os.Environ(), "GOWORK=off")
	if output, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("queue: build %s: %w\n%s", asynqModule, err, output)
	}
	return binary, nil
}

// findAsynqModule looks for the module from the working directory upwards:
// `make bench` runs at the repository root, `go run ./cmd/bench` anywhere
// in it.
func findAsynqModule() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		module := filepath.Join(dir, filepath.FromSlash(asynqModule))
		if _, err := os.Stat(filepath.Join(module, "go.mod")); err == nil {
			return module, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("queue: no %s/go.mod in %s or above; run the bench inside the repository", asynqModule, wd)
		}
	}
}

// asynqPass runs the asynq benchmark with the pass's parameters against the
// same Redis and relays its progress.
func asynqPass(ctx context.Context, binary, redisURL, name string, r queueResult, progress func(string, ...any)) (queuePass, error) {
	cmd := exec.CommandContext(ctx, binary,
		"-redis", redisURL, "-queue", name,
		"-concurrency", strconv.Itoa(r.Concurrency),
		"-payload", strconv.Itoa(r.PayloadBytes),
		"-tasks", strconv.Itoa(r.Jobs))
	var stdout bytes.Buffer
	stderr := &lineWriter{line: func(line string) { progress("queue: %s", line) }}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		return queuePass{}, fmt.Errorf("%s: %w: %s", filepath.Base(binary), err, strings.Join(stderr.lines, "; "))
	}
	var pass queuePass
	if err := json.Unmarshal(stdout.Bytes(), &pass); err != nil {
		return queuePass{}, fmt.Errorf("asynq benchmark output %q: %w", stdout.String(), err)
	}
	if pass.Enqueue.Tasks != r.Jobs || pass.Process.Tasks != r.Jobs {
		return queuePass{}, fmt.Errorf("asynq benchmark ran %d enqueues and %d tasks, want %d", pass.Enqueue.Tasks, pass.Process.Tasks, r.Jobs)
	}
	return pass, nil
}

// lineWriter hands each complete line written to it to line, and keeps them.
type lineWriter struct {
	partial []byte
	lines   []string
	line    func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		end := bytes.IndexByte(w.partial, '\n')
		if end < 0 {
			return len(p), nil
		}
		text := string(w.partial[:end])
		w.partial = w.partial[end+1:]
		w.lines = append(w.lines, text)
		w.line(text)
	}
}

// markdown is the phase's table: each system's rates over its passes and
// emq's over asynq's.
func (q queueResult) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| queue: %d jobs of %d B per pass, concurrency %d | emq jobs/s | asynq %s jobs/s | emq / asynq |\n|---|---:|---:|---:|\n",
		q.Jobs, q.PayloadBytes, q.Concurrency, q.AsynqVersion)
	fmt.Fprintf(&b, "| enqueue, one call per job | %.0f | %.0f | %.2f× |\n", q.EMQ.Enqueue.PerSecond, q.Asynq.Enqueue.PerSecond, q.EnqueueRatio)
	fmt.Fprintf(&b, "| claim+complete, no-op handler | %.0f | %.0f | %.2f× |\n", q.EMQ.Process.PerSecond, q.Asynq.Process.PerSecond, q.ProcessRatio)
	systems := make([]string, len(q.Passes))
	for i, pass := range q.Passes {
		systems[i] = pass.System
	}
	fmt.Fprintf(&b, "\nSame Redis, passes in the order %s; each rate is a system's jobs over its seconds across its passes.\n\n",
		strings.Join(systems, ", "))
	return b.String()
}
