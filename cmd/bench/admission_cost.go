package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// What one side of the admission phase's alternating rounds costs per
// order: CPU seconds of the bench process (for the HTTP side the gateway
// and the load generator, for the ceiling its callers and go-redis) and of
// redis-server (INFO cpu), and Redis commands by name (INFO
// commandstats, a script's own commands counted under theirs). On a machine
// shared with other work the rates drift with the moment's speed; CPU per
// order by process moves much less, and says where an order's time goes.

// costWatch accumulates the cost of the turns it watches.
type costWatch struct {
	rdb redis.UniversalClient

	mu      sync.Mutex
	began   costSample
	started bool
	failed  error
	total   sideCost
}

// sideCost is the cost of one side over all its watched turns.
type sideCost struct {
	Orders   int64   `json:"orders"`
	BenchCPU float64 `json:"bench_process_cpu_seconds"`
	RedisCPU float64 `json:"redis_cpu_seconds"`
	// Commands are the Redis commands run, by name, over the turns.
	Commands map[string]int64 `json:"redis_commands"`
	// Reads are the reads Redis served (INFO stats total_reads_processed),
	// one per round trip a pipeline or a lone call makes: per order, it
	// says how many calls a pipeline carried.
	Reads int64 `json:"redis_reads"`
	// ScriptMicros is the time Redis spent in EVALSHA and EVAL (INFO
	// commandstats usec, the script's own commands included), wall time
	// of its one thread: the scripts' part of RedisCPU, give or take the
	// moments the machine took the thread away.
	ScriptMicros int64 `json:"redis_script_usec"`
}

// costSample is one reading of the counters.
type costSample struct {
	bench, redis float64
	commands     map[string]int64
	reads        int64
	scriptMicros int64
}

func newCostWatch(rdb redis.UniversalClient) *costWatch {
	return &costWatch{rdb: rdb, total: sideCost{Commands: map[string]int64{}}}
}

// begin reads the counters at the start of a turn.
func (w *costWatch) begin(ctx context.Context) {
	if w == nil {
		return
	}
	sample, err := w.sample(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.began, w.started = sample, err == nil
	if err != nil && w.failed == nil {
		w.failed = err
	}
}

// end reads them again and adds the turn's orders and what they cost.
func (w *costWatch) end(ctx context.Context, orders int64) {
	if w == nil {
		return
	}
	sample, err := w.sample(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil || !w.started {
		if err != nil && w.failed == nil {
			w.failed = err
		}
		return
	}
	w.total.Orders += orders
	w.total.BenchCPU += sample.bench - w.began.bench
	w.total.RedisCPU += sample.redis - w.began.redis
	for name, calls := range sample.commands {
		w.total.Commands[name] += calls - w.began.commands[name]
	}
	// The watch's own INFO between the two readings, and its read.
	w.total.Commands["info"]--
	w.total.Reads += sample.reads - w.began.reads - 1
	w.total.ScriptMicros += sample.scriptMicros - w.began.scriptMicros
}

// result is the accumulated cost; its error is the first failed reading.
func (w *costWatch) result() (sideCost, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	total := w.total
	total.Commands = maps.Clone(w.total.Commands)
	for name, calls := range total.Commands {
		if calls <= 0 {
			delete(total.Commands, name)
		}
	}
	return total, w.failed
}

func (w *costWatch) sample(ctx context.Context) (costSample, error) {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return costSample{}, err
	}
	info, err := w.rdb.Info(ctx, "cpu", "stats", "commandstats").Result()
	if err != nil {
		return costSample{}, err
	}
	redisCPU, commands, reads, scripts, err := parseCostInfo(info)
	if err != nil {
		return costSample{}, err
	}
	bench := float64(usage.Utime.Nano()+usage.Stime.Nano()) / 1e9
	return costSample{bench: bench, redis: redisCPU, commands: commands, reads: reads, scriptMicros: scripts}, nil
}

// parseCostInfo reads used_cpu_user + used_cpu_sys (seconds),
// total_reads_processed, each cmdstat_<name>'s calls, and the usec of
// evalsha and eval from INFO cpu, stats and commandstats.
func parseCostInfo(info string) (cpu float64, commands map[string]int64, reads, scriptMicros int64, err error) {
	commands = map[string]int64{}
	found := 0
	scanner := bufio.NewScanner(strings.NewReader(info))
	for scanner.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(scanner.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			seconds, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return 0, nil, 0, 0, fmt.Errorf("INFO %s: %w", name, err)
			}
			cpu += seconds
			found++
		case name == "total_reads_processed":
			if reads, err = strconv.ParseInt(value, 10, 64); err != nil {
				return 0, nil, 0, 0, fmt.Errorf("INFO %s: %w", name, err)
			}
		case strings.HasPrefix(name, "cmdstat_"):
			calls, _, _ := strings.Cut(strings.TrimPrefix(value, "calls="), ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return 0, nil, 0, 0, fmt.Errorf("INFO %s: %w", name, err)
			}
			command := strings.TrimPrefix(name, "cmdstat_")
			commands[command] = n
			if command == "evalsha" || command == "eval" {
				_, rest, _ := strings.Cut(value, "usec=")
				usec, _, _ := strings.Cut(rest, ",")
				if scriptMicros, err = addMicros(scriptMicros, usec); err != nil {
					return 0, nil, 0, 0, fmt.Errorf("INFO %s: %w", name, err)
				}
			}
		}
	}
	if found != 2 {
		return 0, nil, 0, 0, fmt.Errorf("INFO cpu without used_cpu_user and used_cpu_sys")
	}
	return cpu, commands, reads, scriptMicros, nil
}

// perOrderMicros is seconds spread over the orders, in µs.
func (c sideCost) perOrderMicros(seconds float64) float64 {
	if c.Orders == 0 {
		return 0
	}
	return 1e6 * seconds / float64(c.Orders)
}

func addMicros(sum int64, usec string) (int64, error) {
	n, err := strconv.ParseInt(usec, 10, 64)
	return sum + n, err
}

// perOrder is n spread over the orders.
func (c sideCost) perOrder(n int64) float64 {
	if c.Orders == 0 {
		return 0
	}
	return float64(n) / float64(c.Orders)
}

// commandsLine lists the Redis commands per order, most first.
func (c sideCost) commandsLine() string {
	if c.Orders == 0 {
		return ""
	}
	names := slices.Collect(maps.Keys(c.Commands))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.Commands[b], c.Commands[a]), strings.Compare(a, b))
	})
	var total float64
	parts := make([]string, 0, len(names))
	for _, name := range names {
		per := float64(c.Commands[name]) / float64(c.Orders)
		total += per
		if per >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, per))
		}
	}
	return fmt.Sprintf("%.2f (%s)", total, strings.Join(parts, ", "))
}

// admissionCostMarkdown is the table of what an order cost each side of the
// alternating rounds.
func (r report) admissionCostMarkdown() string {
	c, h := r.CeilingCost, r.HTTPCost
	if c.Orders == 0 || h.Orders == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| per order, over the rounds | admit script ceiling | admission closed loop |\n|---|---:|---:|\n")
	fmt.Fprintf(&b, "| CPU µs: the bench process (the callers; over HTTP the gateway and the load generator) | %.1f | %.1f |\n",
		c.perOrderMicros(c.BenchCPU), h.perOrderMicros(h.BenchCPU))
	fmt.Fprintf(&b, "| CPU µs: redis-server | %.1f | %.1f |\n", c.perOrderMicros(c.RedisCPU), h.perOrderMicros(h.RedisCPU))
	fmt.Fprintf(&b, "| Redis commands (INFO commandstats) | %s | %s |\n", c.commandsLine(), h.commandsLine())
	fmt.Fprintf(&b, "| µs in scripts, of redis-server's (INFO commandstats usec of evalsha, eval) | %.1f | %.1f |\n",
		c.perOrder(c.ScriptMicros), h.perOrder(h.ScriptMicros))
	fmt.Fprintf(&b, "| Redis reads, one a round trip (INFO stats) | %.2f | %.2f |\n", c.perOrder(c.Reads), h.perOrder(h.Reads))
	return b.String()
}
