// Command testworker runs emq.Queue.Work for the process tests of package emq:
// they start several of these, kill some, and count the completions each
// reports on stdout.
//
// Each handler prints `started <id> <token>` as it starts, and each confirmed
// completion `completed <id> <token>` after the queue accepted it, so a line
// is never printed for a job that was not completed, and the jobs a killed
// process held are those it started and did not complete; logs go to
// stderr. A job whose payload is `sleep=<duration>` takes that long, others
// take -sleep. SIGTERM or SIGINT drains the worker.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ordergate/ordergate/emq"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	redisURL := flags.String("redis-url", "redis://127.0.0.1:6379/0", "Redis URL; addr= parameters make it a cluster")
	queueName := flags.String("queue", "work", "queue to work on")
	concurrency := flags.Int("concurrency", 8, "jobs handled at once")
	lease := flags.Duration("lease", time.Second, "lease of a claim")
	reapInterval := flags.Duration("reap-interval", 0, "how often expired leases are taken back (0: the runtime's default)")
	drainTimeout := flags.Duration("drain-timeout", 2*time.Second, "bound on the drain after SIGTERM")
	sleep := flags.Duration("sleep", 10*time.Millisecond, "how long a job takes unless its payload says sleep=<duration>")
	if err := flags.Parse(args[1:]); err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	client, err := emq.Dial(ctx, *redisURL, emq.WithLogger(logger))
	if err != nil {
		return err
	}
	defer client.Close()

	out := &lines{w: stdout}
	return client.Queue(*queueName).Work(ctx, sleepingHandler(*sleep, out), emq.WorkerOptions{
		Concurrency:  *concurrency,
		Lease:        *lease,
		ReapInterval: *reapInterval,
		DrainTimeout: *drainTimeout,
		Logger:       logger,
		OnComplete:   func(job emq.Claim) { out.print("completed", job) },
	})
}

// lines prints the events of jobs, one write per line, so the lines of
// concurrent jobs never interleave.
type lines struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lines) print(event string, job emq.Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s %s %d\n", event, job.ID, job.Token)
}

// sleepingHandler stands in for real work: it takes a while and stops when
// its context is cancelled.
func sleepingHandler(standard time.Duration, out *lines) emq.Handler {
	return func(ctx context.Context, job emq.Claim) error {
		out.print("started", job)
		took := standard
		if text, ok := strings.CutPrefix(string(job.Payload), "sleep="); ok {
			parsed, err := time.ParseDuration(text)
			if err != nil {
				return emq.Permanent(fmt.Errorf("payload sleep: %w", err))
			}
			took = parsed
		}
		timer := time.NewTimer(took)
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}
