package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/cpuprofile"
	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/migrations"
)

type config struct {
	duration    time.Duration
	concurrency int
	jobs        int
	// eventOrders is how many orders the memory phase settles to measure
	// their events.
	eventOrders int
	out         string
	// phases are the phases to run, by name; all of them unless -phases says.
	phases map[string]bool
	// sweepDuration is each open-loop sweep rate's length; 0 skips the sweep.
	sweepDuration time.Duration
	// queueJobs is how many jobs each pass of the queue phase enqueues and
	// processes.
	queueJobs int
	// eventsRate is the events phase's admission rate; 0 is half the
	// admission peak.
	eventsRate float64
	// sustainedDuration is the events phase's sustained load's length (0
	// skips it); sustainedRate its rate, 0 for half the matching phase's
	// spread rate.
	sustainedDuration time.Duration
	sustainedRate     float64
	// settlement is the settlement phase's flags (settlement.go).
	settlement settlementConfig
	// matching is the matching phase's flags (matching.go).
	matching matchingConfig
	// soak is the soak phase's flags (soak.go).
	soak soakConfig
	// cpuProfile is where the HTTP closed loop's CPU profile goes; none when
	// empty.
	cpuProfile string
	// eventsCPUProfile is where the events phase's Go CPU profiles go (the
	// bench process's over the sustained load, the gateway process's over
	// its life); none when empty.
	eventsCPUProfile string
}

// phaseNames are the phases in the order a run takes them; a run without
// -phases takes all but the soak (make soak runs it alone).
var phaseNames = []string{"admission", "replication", "queue", "settlement", "matching", "memory", "recovery", "tracking", "events", "soak"}

// defaultPhases are the phases of a run without -phases.
var defaultPhases = phaseNames[:len(phaseNames)-1]

func parseConfig(args []string, stdout io.Writer) (config, error) {
	var c config
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	flags.DurationVar(&c.duration, "duration", 10*time.Second, "length of each admission load phase")
	flags.DurationVar(&c.sweepDuration, "sweep-duration", 4*time.Second, "length of each rate of the admission open-loop sweep (0 skips it)")
	flags.IntVar(&c.concurrency, "concurrency", 32, "closed-loop concurrency of the admission phases; the queue phase's enqueuers and workers")
	flags.IntVar(&c.jobs, "jobs", 100_000, "order jobs admitted for the memory measurement")
	flags.IntVar(&c.eventOrders, "event-orders", 10_000, "orders the memory phase settles to measure their events in Redis and PostgreSQL (0 skips it)")
	flags.IntVar(&c.queueJobs, "queue-jobs", 40_000, "jobs per pass of the queue phase (emq against asynq)")
	flags.Float64Var(&c.eventsRate, "events-rate", 0, "orders/s of the events phase's second load; 0 is half the admission peak")
	flags.DurationVar(&c.sustainedDuration, "sustained-duration", 60*time.Second, "length of the events phase's sustained open loop over three instruments (0 skips it)")
	flags.Float64Var(&c.sustainedRate, "sustained-rate", 0, "orders/s of the events phase's sustained load; 0 is half the matching phase's spread rate (a short matching run finds it when that phase does not run)")
	c.settlement.register(flags)
	c.matching.register(flags)
	c.soak.register(flags)
	flags.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the admission closed loop over HTTP (gateway and load generator; an extra run, not counted) to this file")
	flags.StringVar(&c.eventsCPUProfile, "events-cpuprofile", "", "write Go CPU profiles of the events phase: the bench process's over the sustained load to this path plus .bench, the gateway process's over its life plus .gateway")
	flags.StringVar(&c.out, "out", "bench/results", "directory for the JSON and Markdown reports")
	phases := flags.String("phases", strings.Join(defaultPhases, ","), "comma-separated phases to run, of "+strings.Join(phaseNames, ", "))
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	c.phases = map[string]bool{}
	for _, name := range strings.Split(*phases, ",") {
		if !slices.Contains(phaseNames, name) {
			return config{}, fmt.Errorf("unknown phase %q; the phases are %s", name, strings.Join(phaseNames, ", "))
		}
		c.phases[name] = true
	}
	if c.duration < time.Second || c.concurrency < 1 || c.jobs < 1000 {
		return config{}, errors.New("want -duration ≥ 1s, -concurrency ≥ 1 and -jobs ≥ 1000")
	}
	if c.queueJobs < 1 {
		return config{}, errors.New("want -queue-jobs ≥ 1")
	}
	if err := c.settlement.validate(); err != nil {
		return config{}, err
	}
	if err := c.matching.validate(); err != nil {
		return config{}, err
	}
	if err := c.soak.validate(); err != nil {
		return config{}, err
	}
	if c.sustainedDuration != 0 && c.sustainedDuration < time.Second || c.sustainedRate < 0 || c.eventsRate < 0 {
		return config{}, errors.New("want -sustained-duration ≥ 1s (or 0 to skip it), -sustained-rate ≥ 0 and -events-rate ≥ 0")
	}
	if c.sweepDuration != 0 && c.sweepDuration < time.Second {
		return config{}, errors.New("want -sweep-duration ≥ 1s, or 0 to skip the sweep")
	}
	return c, nil
}

// report is everything one run measured; JSON and Markdown are made from it.
type report struct {
	Started     time.Time `json:"started"`
	GoVersion   string    `json:"go_version"`
	CPUs        int       `json:"cpus"`
	Concurrency int       `json:"concurrency"`
	Duration    string    `json:"duration"`

	Ceiling    loadResult `json:"admit_script_ceiling"`
	HTTPClosed loadResult `json:"http_closed_loop"`
	HTTPOpen   loadResult `json:"http_open_loop"`
	// HTTPRatio is HTTP closed-loop orders/s over the ceiling's, the two
	// measured in alternating rounds (see alternating); HTTPRounds is that
	// ratio in each round.
	HTTPRatio  float64   `json:"http_to_ceiling_ratio"`
	HTTPRounds []float64 `json:"http_to_ceiling_ratio_rounds"`
	// CeilingCost and HTTPCost are what each side's rounds cost: CPU by
	// process and Redis commands (admission_cost.go).
	CeilingCost sideCost `json:"admit_script_ceiling_cost"`
	HTTPCost    sideCost `json:"http_closed_loop_cost"`
	// Sweep is the open loop at rising shares of the closed-loop peak: the
	// latency-vs-throughput chart.
	Sweep         []loadResult `json:"http_open_loop_sweep,omitempty"`
	SweepDuration string       `json:"sweep_duration,omitempty"`

	Replication replicationResult `json:"replication"`
	Queue       queueResult       `json:"queue"`
	Settlement  settlementResult  `json:"settlement"`
	Matching    matchingResult    `json:"matching"`
	Memory      memoryResult      `json:"memory"`
	Recovery    []recoveryResult  `json:"recovery"`
	Events      eventsResult      `json:"events"`
	Tracking    trackingResult    `json:"tracking"`
	Soak        soakResult        `json:"soak"`
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	c, err := parseConfig(args, stdout)
	if err != nil {
		return err
	}
	started := time.Now()
	progress := func(format string, a ...any) {
		fmt.Fprintf(stdout, "[%5.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, a...))
	}
	servers, err := startServers(ctx, getenv, progress, c.postgresSettings())
	if err != nil {
		return err
	}
	defer servers.stop()

	// The gateway's request logs cost what they cost in production (the
	// handler cmd/gateway uses), but go nowhere.
	logger := slog.New(jsonlog.New(io.Discard, nil))
	if err := migrations.Up(servers.databaseURL); err != nil {
		return err
	}
	db, err := pgxpool.New(ctx, servers.databaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	queue, err := emq.Dial(ctx, servers.redisURL, emq.WithLogger(logger))
	if err != nil {
		return err
	}
	defer queue.Close()
	e := &env{queue: queue, db: db, logger: logger, run: started.UTC().Format("150405")}
	if err := e.fundAccounts(ctx); err != nil {
		return err
	}

	r := report{Started: started.UTC(), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(), Concurrency: c.concurrency, Duration: c.duration.String()}
	phases := map[string]func() error{
		"admission": func() error { return e.admission(ctx, c, &r, progress) },
		"replication": func() (err error) {
			r.Replication, err = e.replication(ctx, c, servers, progress)
			return err
		},
		"queue": func() (err error) {
			r.Queue, err = e.compareQueues(ctx, c, servers.redisURL, progress)
			return err
		},
		"settlement": func() (err error) {
			r.Settlement, err = e.settlement(ctx, c.settlement, servers, c.duration, progress)
			return err
		},
		"matching": func() (err error) {
			r.Matching, err = e.matching(ctx, c.matching, c.settlement.pgbenchClients, servers, c.duration, progress)
			return err
		},
		"memory": func() (err error) {
			progress("memory: admitting %d order jobs…", c.jobs)
			if r.Memory, err = e.measureMemory(ctx, c.jobs, progress); err != nil {
				return fmt.Errorf("memory: %w", err)
			}
			if c.eventOrders > 0 {
				progress("memory: events of %d orders settled…", c.eventOrders)
				if r.Memory.Events, err = e.measureEvents(ctx, servers, c.eventOrders, progress); err != nil {
					return fmt.Errorf("memory: %w", err)
				}
			}
			return nil
		},
		"events": func() (err error) {
			r.Events, err = e.events(ctx, c, servers, r.HTTPClosed.PerSecond, r.Matching.spreadRate(), progress)
			return err
		},
		"soak": func() (err error) {
			r.Soak, err = e.soak(ctx, c.soak, servers, progress)
			return err
		},
		"tracking": func() (err error) {
			r.Tracking, err = e.tracking(ctx, c, servers, progress)
			return err
		},
		"recovery": func() error {
			for _, reap := range []struct {
				name     string
				interval time.Duration
			}{{"default", 0}, {"1s", time.Second}} {
				result, err := e.measureRecovery(ctx, servers.redisURL, reap.name, reap.interval, progress)
				if err != nil {
					return err
				}
				r.Recovery = append(r.Recovery, result)
			}
			return nil
		},
	}
	for _, name := range phaseNames {
		if !c.phases[name] {
			continue
		}
		if err := phases[name](); err != nil {
			return err
		}
	}
	table := r.markdown()
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, table)
	paths, err := r.write(c.out)
	if err != nil {
		return err
	}
	progress("reports: %s", strings.Join(paths, ", "))
	return nil
}

func (e *env) admission(ctx context.Context, c config, r *report, progress func(string, ...any)) error {
	admit, err := e.ceilingAdmit(ctx)
	if err != nil {
		return err
	}
	url, stopGateway, err := e.startGateway(ctx)
	if err != nil {
		return err
	}
	defer stopGateway()
	senders := 4 * c.concurrency
	client := newOrderClient(url, e.keys, "b"+e.run+"-", senders)
	if err := client.place(ctx); err != nil { // one order first: fail fast when the gateway refuses
		return err
	}
	ceiling := closedLoopOp{name: "admit script ceiling", op: admit}
	overHTTP := closedLoopOp{name: "admission closed loop", op: client.place}
	// A second of each first, not counted: connections, scripts and the
	// queues' first keys are in place before the rounds compare them.
	progress("warming up: the admit script and the gateway, %d callers each", c.concurrency)
	alternating(ctx, c.concurrency, time.Second, time.Second, func(string, ...any) {}, ceiling, overHTTP)
	progress("admit script ceiling and admission closed loop, %d callers, taking turns for %s each…", c.concurrency, c.duration)
	ceiling.cost, overHTTP.cost = newCostWatch(e.queue.Redis()), newCostWatch(e.queue.Redis())
	r.Ceiling, r.HTTPClosed, r.HTTPRounds = alternating(ctx, c.concurrency, c.duration, time.Second, progress, ceiling, overHTTP)
	var costErr error
	r.CeilingCost, costErr = ceiling.cost.result()
	if r.HTTPCost, err = overHTTP.cost.result(); costErr == nil {
		costErr = err
	}
	if costErr != nil {
		progress("admission: the rounds' CPU and commands were not read: %v", costErr)
	}
	if r.HTTPClosed.Orders == 0 {
		return fmt.Errorf("admission closed loop placed no order: %s", r.HTTPClosed.FirstError)
	}
	if c.cpuProfile != "" {
		progress("admission closed loop under the CPU profiler for %s (not counted)…", c.duration)
		stopProfile, err := cpuprofile.Start(c.cpuProfile)
		if err != nil {
			return err
		}
		closedLoop(ctx, "profiled closed loop", c.concurrency, c.duration, progress, client.place)
		if err := stopProfile(); err != nil {
			return err
		}
	}
	rate := r.HTTPClosed.PerSecond / 2
	progress("admission open loop: %.0f orders/s (half the closed-loop peak) for %s…", rate, c.duration)
	r.HTTPOpen = openLoop(ctx, "admission open loop", rate, senders, c.duration, progress, client.place)
	if r.Ceiling.PerSecond > 0 {
		r.HTTPRatio = r.HTTPClosed.PerSecond / r.Ceiling.PerSecond
	}
	if c.sweepDuration == 0 {
		return ctx.Err()
	}
	// The sweep draws the latency-vs-throughput curve; past 100% the open
	// loop's backlog grows for the whole step, which shows how fast overload
	// turns into waiting.
	r.SweepDuration = c.sweepDuration.String()
	for _, share := range []float64{0.10, 0.25, 0.50, 0.75, 0.90, 1.00, 1.10} {
		if ctx.Err() != nil {
			break
		}
		rate := share * r.HTTPClosed.PerSecond
		name := fmt.Sprintf("admission sweep %.0f%%", 100*share)
		progress("%s: %.0f orders/s for %s…", name, rate, c.sweepDuration)
		r.Sweep = append(r.Sweep, openLoop(ctx, name, rate, senders, c.sweepDuration, progress, client.place))
	}
	return ctx.Err()
}
