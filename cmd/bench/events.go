package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/cpuprofile"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// eventStreams is how many event streams the events phase holds open on
// one gateway, each of an account of its own.
const eventStreams = 1_000

// eventSenders is how many of the events phase's orders may be in flight
// at once: as many as the accounts, though any sender takes any account's
// order. With fewer, a door slower than senders ÷ rate turned the open
// loop into a closed one (docs/performance.md). Connections are dialed
// only as requests overlap, so the phase may hold one a sender beside
// its streams.
const eventSenders = eventStreams

// eventsFiles is the open files the phase may need in the bench process and
// in the gateway's: a stream and an order connection an account, and room
// for the pools, the listeners and the workers.
const eventsFiles = eventStreams + eventSenders + 1_000

// checkFileLimit fails the phase up front when the processes may not open
// what it needs, rather than half way through a load with EMFILE. Go raised
// the soft limit to the hard one at start, in the gateway too.
func checkFileLimit() error {
	var limit syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit); err != nil {
		return nil // unknown: the phase will tell
	}
	if limit.Max < eventsFiles {
		return fmt.Errorf("events: the open-file limit is %d (hard), the phase needs up to %d: raise it (ulimit -Hn)", limit.Max, eventsFiles)
	}
	return nil
}

// eventsSeed makes every run's sustained load the same orders; the load at
// half the admission peak draws others.
const eventsSeed = 2

// eventsResult is the events phase: 1,000 streams (GET /v1/events) open on
// one gateway process, one per account, on a database of the phase's own,
// while those accounts' orders are placed over HTTP in an open loop over
// the matching phase's three instruments (its order mix: resting and
// crossing orders, so they trade) and settled by the matching phase's
// in-process workers: first a sustained load at half the matching phase's
// spread rate, then a load at half the admission peak. For each load:
// placement → decided (from each order's scheduled send to its first
// state event at its account's client), how long events took to reach the
// clients, the backlog left; and what an idle stream costs the gateway and
// Redis.
type eventsResult struct {
	Streams  int      `json:"streams"`
	Accounts int      `json:"accounts"`
	Workers  int      `json:"workers"`
	Symbols  []string `json:"symbols"`
	// Sustained is the load at half the matching peak; AdmissionHalf the
	// one at half the admission peak.
	Sustained     streamLoad `json:"sustained"`
	AdmissionHalf streamLoad `json:"admission_half_peak"`
	// GatewayBytesPerStream is the gateway process's resident memory per
	// idle stream; RedisBytesPerStream is Redis's used memory per idle
	// stream, and RedisClients its connections with every stream open.
	GatewayBytesPerStream float64 `json:"gateway_bytes_per_idle_stream"`
	RedisBytesPerStream   float64 `json:"redis_bytes_per_idle_stream"`
	RedisClients          int64   `json:"redis_clients_with_streams_open"`
	// Idle is what the open streams cost the gateway with no order
	// flowing (idleStreamsWindow).
	Idle gatewayCost `json:"idle_streams_cost"`
}

// streamLoad is one open-loop load of the events phase.
type streamLoad struct {
	// Peak is the rate the load is half of, and PeakFrom where it comes
	// from; Rate the rate offered.
	Peak     float64 `json:"peak_orders_per_second,omitempty"`
	PeakFrom string  `json:"peak_from,omitempty"`
	Rate     float64 `json:"rate"`
	Duration string  `json:"duration"`
	// Admission is the placements, each timed from its scheduled send to
	// the gateway's 202.
	Admission loadResult `json:"admission"`
	// Decided is placement → decided: from each accepted order's scheduled
	// send to its first state event (order.open, .partially_filled,
	// .filled, .canceled or .rejected) at its account's client; DecidedToLog the
	// same to that event's append to the account's log (its time, after
	// the settlement's commit and the relay). Undecided counts accepted
	// orders whose stream showed no event.
	Decided      latency `json:"placement_to_decided_at_client"`
	DecidedToLog latency `json:"placement_to_decided_in_log"`
	Undecided    int     `json:"undecided"`
	// Backlog is the jobs left on the instruments' queues when the load
	// ended; DrainSeconds how long they then took to settle.
	Backlog      int64   `json:"backlog_at_end"`
	DrainSeconds float64 `json:"drain_seconds"`
	// Events is what the streams received from the load's start until the
	// next load's. Commit is order.filled events, from the commit of the
	// settlement that filled the order (PostgreSQL's commit timestamp of
	// the order's row; its finished_at, the transaction's start, when the
	// server does not track them: CommitFrom says which) to the client;
	// Append every event, from its append to the account's log (the
	// event's time) to the client.
	Events     int64   `json:"events_received"`
	CommitFrom string  `json:"commit_from"`
	Commit     latency `json:"commit_to_client"`
	Append     latency `json:"append_to_client"`
	// Cost is what the gateway spent while the load was offered.
	Cost gatewayCost `json:"gateway_cost"`
	// Stages split the owners' part of each order's way, from its
	// creation at the gateway to its answer
	// (orders_settlement_owned_stage_seconds, summed over the workers).
	Stages []phaseProfile `json:"owner_stages"`
	// ClaimWait is the part of the admitted stage spent pending on the
	// instrument's queue in Redis, from the admission to the claim, by the
	// server's clock (emq_claim_wait_seconds of the instruments' queues).
	ClaimWait phaseProfile `json:"claim_wait"`
}

// events runs the phase. admissionPeak is the admission phase's
// closed-loop orders/s over HTTP, matchingPeak the matching phase's spread
// orders/s (0 when the phase did not run: a short closed loop, a short
// matching run, finds it).
func (e *env) events(ctx context.Context, c config, s *servers, admissionPeak, matchingPeak float64, progress func(string, ...any)) (eventsResult, error) {
	symbols := matchingRuns[len(matchingRuns)-1].symbols
	r := eventsResult{Streams: eventStreams, Accounts: eventStreams, Workers: c.matching.workers, Symbols: symbols}
	if err := checkFileLimit(); err != nil {
		return r, err
	}
	if s.redisAddr == "" {
		progress("events: skipped (REDIS_URL given: the phase empties the orders queue of the bench's Redis first)")
		return r, nil
	}
	// The workers run in this process, as in the matching phase: with
	// cmd/worker's collector target (the streams' readers share it).
	defer settlement.TuneGC(os.Getenv)()
	sustainedFrom, admissionFrom := "the matching phase's spread run", "the admission phase's closed loop"
	if c.sustainedDuration > 0 && c.sustainedRate <= 0 && matchingPeak <= 0 {
		progress("events: the matching phase did not run; a short spread run finds its peak…")
		probe := c.matching
		probe.orders, probe.profile, probe.rate = 3000, false, 0
		run, err := e.matchRun(ctx, probe, s, "probe", symbols, progress)
		if err != nil {
			return r, fmt.Errorf("events: matching peak probe: %w", err)
		}
		matchingPeak, sustainedFrom = run.PerSecond, fmt.Sprintf("a %d-order spread matching run", probe.orders)
	}

	database := "bench_events_" + e.run
	databaseURL, drop, err := createDatabase(ctx, s.databaseURL, database)
	if err != nil {
		return r, err
	}
	defer func() {
		if err := drop(); err != nil {
			progress("events: %v", err)
		}
	}()
	if err := migrations.Up(databaseURL); err != nil {
		return r, err
	}
	db, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return r, err
	}
	defer db.Close()
	progress("events: funding %d accounts on a database of the phase's own…", eventStreams)
	accounts, keys, err := streamAccounts(ctx, db, eventStreams, e.run)
	if err != nil {
		return r, err
	}
	if admissionPeak <= 0 && c.eventsRate <= 0 {
		if admissionPeak, err = probePeak(ctx, s, databaseURL, keys, "p"+e.run+"-", progress); err != nil {
			return r, err
		}
		admissionFrom = "a 2 s closed loop"
	}
	instruments, err := readInstruments(ctx, db, symbols)
	if err != nil {
		return r, err
	}
	// The admission phase's orders (or the probe's) wait on the orders
	// queues; the workers would settle that backlog first, while the
	// streams are timed. Purge drops every key of a queue, logs included.
	queues, err := e.orderQueues(ctx)
	if err != nil {
		return r, err
	}
	for _, queue := range queues {
		if err := queue.Purge(ctx); err != nil {
			return r, err
		}
	}
	progress("events: building and starting a gateway process, %d workers…", c.matching.workers)
	var gatewayEnv []string
	if c.eventsCPUProfile != "" {
		gatewayEnv = append(gatewayEnv, "CPU_PROFILE="+c.eventsCPUProfile+".gateway")
	}
	gateway, err := startGatewayProcess(ctx, s, databaseURL, gatewayEnv...)
	if err != nil {
		return r, err
	}
	defer gateway.stop()
	base, gatewayPID := gateway.base, gateway.pid
	stopWorkers, registries := e.startWorkers(ctx, databaseURL, s.redisURL, c.matching.workers)
	defer func() {
		if err := stopWorkers(); err != nil {
			progress("events: the workers: %v", err)
		}
	}()

	gatewayBefore, redisBefore, err := e.memoryNow(ctx, gatewayPID)
	if err != nil {
		return r, err
	}
	progress("events: opening %d streams, one per account…", eventStreams)
	streams, err := openStreams(ctx, base, keys)
	if err != nil {
		return r, err
	}
	defer streams.stop()
	time.Sleep(time.Second)
	gatewayAfter, redisAfter, err := e.memoryNow(ctx, gatewayPID)
	if err != nil {
		return r, err
	}
	r.GatewayBytesPerStream = (float64(gatewayAfter) - float64(gatewayBefore)) / eventStreams
	r.RedisBytesPerStream = float64(redisAfter-redisBefore) / eventStreams
	if r.RedisClients, err = e.redisClients(ctx); err != nil {
		return r, err
	}
	idle, err := startCost(ctx, db, gateway)
	if err != nil {
		return r, err
	}
	time.Sleep(idleStreamsWindow)
	if r.Idle, err = idle.stop(ctx); err != nil {
		return r, err
	}
	progress("events: %d idle streams: %s", eventStreams, r.Idle)

	keyOf := make(map[string]int, len(accounts))
	for i, account := range accounts {
		keyOf[account] = i
	}
	load := func(name, prefix string, seed uint64, peak float64, from string, rate float64, duration time.Duration) (streamLoad, error) {
		l := streamLoad{Peak: peak, PeakFrom: from, Rate: rate, Duration: duration.String()}
		n := int(rate * duration.Seconds())
		backlog, err := matchBacklog(instruments, accounts, n, prefix, seed)
		if err != nil {
			return l, err
		}
		bodies := make([][]byte, n)
		for i, o := range backlog {
			if bodies[i], err = placeOrderBody(o.cmd); err != nil {
				return l, err
			}
		}
		stagesBefore, err := gatherHistograms(registries, "orders_settlement_owned_stage_seconds", "stage")
		if err != nil {
			return l, err
		}
		waitsBefore, err := gatherHistograms(registries, "emq_claim_wait_seconds", "queue")
		if err != nil {
			return l, err
		}
		track := newOrderTrack(prefix, n)
		streams.follow(track)
		client := newOrderClient(base+"/v1/orders", keys, prefix, eventSenders)
		defer client.close()
		cost, err := startCost(ctx, db, gateway)
		if err != nil {
			return l, err
		}
		l.Admission = openLoopAt(ctx, "events: "+name, rate, eventSenders, duration, progress, func(ctx context.Context, i int, scheduled time.Time) error {
			err := client.placeBody(ctx, keyOf[backlog[i].cmd.Account], bodies[i])
			track.sent(i, scheduled, err == nil)
			return err
		})
		if l.Admission.Orders == 0 {
			return l, fmt.Errorf("events: %s placed no order: %s", name, l.Admission.FirstError)
		}
		if l.Admission.Errors > 0 {
			progress("events: %s: %d placements failed, the first: %s", name, l.Admission.Errors, l.Admission.FirstError)
		}
		ended := time.Now()
		if l.Cost, err = cost.stop(ctx); err != nil {
			return l, err
		}
		if l.Backlog, err = backlogOf(ctx, queues); err != nil {
			return l, err
		}
		// The backlog settles; its events still count.
		drainCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := waitFor(drainCtx, 2*time.Minute, func() error {
			left, err := backlogOf(drainCtx, queues)
			if err == nil && left > 0 {
				err = fmt.Errorf("%d orders left on the instruments' queues", left)
			}
			return err
		}); err != nil {
			return l, fmt.Errorf("events: %s: the backlog did not settle: %w", name, err)
		}
		l.DrainSeconds = time.Since(ended).Seconds()
		time.Sleep(2 * time.Second) // the last events' relay and fan-out
		toClient, toLog, undecided := track.decided()
		l.Decided, l.DecidedToLog, l.Undecided = summarize(&toClient), summarize(&toLog), undecided
		track.mu.Lock()
		filled, every := track.filled, track.every
		l.Events = track.events
		track.mu.Unlock()
		commit, from, err := commitToClient(ctx, db, filled)
		if err != nil {
			return l, err
		}
		l.CommitFrom, l.Commit, l.Append = from, summarize(&commit), summarize(&every)
		stagesAfter, err := gatherHistograms(registries, "orders_settlement_owned_stage_seconds", "stage")
		if err != nil {
			return l, err
		}
		var split []string
		for _, name := range []string{"admitted", "queued", "decided", "held", "written", "answered"} {
			if h := stagesAfter[name].minus(stagesBefore[name]); h.count > 0 {
				stage := h.profile(name)
				l.Stages = append(l.Stages, stage)
				split = append(split, fmt.Sprintf("%s %.1f/%.1f", name, stage.P50Ms, stage.P99Ms))
			}
		}
		waitsAfter, err := gatherHistograms(registries, "emq_claim_wait_seconds", "queue")
		if err != nil {
			return l, err
		}
		var waits histogramSum
		for _, queue := range queues {
			waits = waits.plus(waitsAfter[queue.Name()].minus(waitsBefore[queue.Name()]))
		}
		l.ClaimWait = waits.profile("claim wait")
		split = append(split, fmt.Sprintf("(of admitted: pending in Redis %.1f/%.1f)", l.ClaimWait.P50Ms, l.ClaimWait.P99Ms))
		progress("events: %s: the owners' stages, p50/p99 ms: %s", name, strings.Join(split, ", "))
		progress("events: %s: %d orders at %.0f/s (%.0f offered), backlog %d at the end, drained in %.1f s; placement → decided p50 %.1f p99 %.1f max %.1f ms (%d undecided); commit → client p50 %.1f p99 %.1f ms; append → client p50 %.1f p99 %.1f ms",
			name, l.Admission.Orders, l.Admission.PerSecond, rate, l.Backlog, l.DrainSeconds, l.Decided.P50Ms, l.Decided.P99Ms, l.Decided.MaxMs, l.Undecided,
			l.Commit.P50Ms, l.Commit.P99Ms, l.Append.P50Ms, l.Append.P99Ms)
		progress("events: %s: %s", name, l.Cost)
		return l, nil
	}
	if c.sustainedDuration > 0 {
		rate := matchingPeak / 2
		if c.sustainedRate > 0 {
			rate, matchingPeak, sustainedFrom = c.sustainedRate, 0, "-sustained-rate"
		}
		stopProfile := func() error { return nil }
		if c.eventsCPUProfile != "" {
			if stopProfile, err = cpuprofile.Start(c.eventsCPUProfile + ".bench"); err != nil {
				return r, err
			}
		}
		r.Sustained, err = load("sustained, half the matching peak", "s"+e.run, eventsSeed, matchingPeak, sustainedFrom, rate, c.sustainedDuration)
		if err = errors.Join(err, stopProfile()); err != nil {
			return r, err
		}
	}
	rate := admissionPeak / 2
	if c.eventsRate > 0 {
		rate, admissionPeak, admissionFrom = c.eventsRate, 0, "-events-rate"
	}
	if r.AdmissionHalf, err = load("half the admission peak", "a"+e.run, eventsSeed+1, admissionPeak, admissionFrom, rate, c.duration/2); err != nil {
		return r, err
	}
	return r, nil
}

// placeOrderBody is cmd as the body of POST /v1/orders.
func placeOrderBody(cmd orders.PlaceCommand) ([]byte, error) {
	return json.Marshal(struct {
		ClientOrderID string `json:"client_order_id"`
		Symbol        string `json:"symbol"`
		Side          string `json:"side"`
		Type          string `json:"type"`
		TimeInForce   string `json:"time_in_force,omitempty"`
		Quantity      string `json:"quantity"`
		Price         string `json:"price"`
	}{cmd.ClientOrderID, cmd.Symbol, string(cmd.Side), string(cmd.Type), string(cmd.TimeInForce), cmd.Quantity.String(), cmd.Price.String()})
}

// backlogOf is the jobs pending, leased or waiting for a retry on queues.
func backlogOf(ctx context.Context, queues []*emq.Queue) (int64, error) {
	var n int64
	for _, queue := range queues {
		stats, err := queue.Stats(ctx)
		if err != nil {
			return 0, err
		}
		n += stats.Pending + stats.Active + stats.Delayed
	}
	return n, nil
}

// startWorkers runs n in-process workers wired as cmd/worker at its
// defaults, as the matching phase does; stop stops them and returns what
// failed.
func (e *env) startWorkers(ctx context.Context, databaseURL, redisURL string, n int) (stop func() error, registries []*prometheus.Registry) {
	workCtx, stopWork := context.WithCancel(ctx)
	errs := make([]error, n)
	var running sync.WaitGroup
	for i := range n {
		registry := prometheus.NewRegistry()
		registries = append(registries, registry)
		running.Go(func() {
			errs[i] = e.runWorker(workCtx, databaseURL, redisURL, settlement.DefaultConfig(), registry, nil, nil)
		})
	}
	return func() error {
		stopWork()
		running.Wait()
		return errors.Join(errs...)
	}, registries
}

// streamSet is the phase's open streams, one reader each; each event goes
// to the load being followed.
type streamSet struct {
	stopStreams context.CancelFunc
	readers     sync.WaitGroup
	transport   *http.Transport
	// loads are every load followed so far; an order's events go to its
	// load by its client order id, other events to the current one, the
	// last.
	mu    sync.RWMutex
	loads []*orderTrack
}

// openStreams opens an event stream for each key on the gateway at base.
func openStreams(ctx context.Context, base string, keys []string) (*streamSet, error) {
	streamCtx, stopStreams := context.WithCancel(ctx)
	set := &streamSet{stopStreams: stopStreams, transport: &http.Transport{MaxIdleConnsPerHost: len(keys)}}
	for i, key := range keys {
		request, err := http.NewRequestWithContext(streamCtx, http.MethodGet, base+"/v1/events", nil)
		if err != nil {
			set.stop()
			return nil, err
		}
		request.Header.Set("Authorization", "Bearer "+key)
		request.Header.Set("Accept", "text/event-stream")
		response, err := set.transport.RoundTrip(request)
		if err != nil {
			set.stop()
			return nil, fmt.Errorf("events: stream %d: %w", i, err)
		}
		if response.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(response.Body, 4096))
			response.Body.Close()
			set.stop()
			return nil, fmt.Errorf("events: stream %d: %s: %s", i, response.Status, body)
		}
		set.readers.Go(func() {
			defer response.Body.Close()
			_ = readEvents(response.Body, set.received)
		})
	}
	return set, nil
}

// follow makes track the current load.
func (s *streamSet) follow(track *orderTrack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads = append(s.loads, track)
}

// received routes an event that reached a client at now.
func (s *streamSet) received(event benchEvent, now time.Time) {
	s.mu.RLock()
	loads := s.loads
	s.mu.RUnlock()
	if len(loads) == 0 {
		return
	}
	if event.ClientOrderID != "" {
		for _, track := range loads {
			i, ok := track.index(event.ClientOrderID)
			if !ok {
				continue
			}
			// order.accepted tells the admission, whoever appends it; the
			// order's state events are rendered from the batch that
			// decided it.
			if event.Type != string(orders.EventOrderAccepted) {
				track.orderEvent(i, event.Time, now)
			}
			if event.Type == string(orders.EventOrderFilled) && event.FinishedAt != nil {
				track.orderFilled(filledEvent{order: event.OrderID, finished: *event.FinishedAt, received: now})
			}
			break
		}
	}
	loads[len(loads)-1].event(event.Time, now)
}

// stop closes the streams and waits for their readers.
func (s *streamSet) stop() {
	s.stopStreams()
	s.readers.Wait()
	s.transport.CloseIdleConnections()
}

// filledEvent is an order.filled event as a stream received it.
type filledEvent struct {
	order              string
	finished, received time.Time
}

// commitToClient times the filled events from the commit of the
// settlement that filled their order, read from PostgreSQL's commit
// timestamps; from the order's finished_at, the transaction's start, when
// the server keeps none. from names the start used.
func commitToClient(ctx context.Context, db *pgxpool.Pool, filled []filledEvent) (h histogram, from string, err error) {
	ids := make([]string, len(filled))
	for i, event := range filled {
		ids[i] = event.order
	}
	commits := make(map[string]time.Time, len(ids))
	rows, err := db.Query(ctx, orderCommitsSQL, ids)
	if err == nil {
		for rows.Next() {
			var id string
			var committed *time.Time
			if err = rows.Scan(&id, &committed); err != nil {
				break
			}
			if committed != nil {
				commits[id] = *committed
			}
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil || len(commits) < len(ids) {
		for _, event := range filled {
			h.record(event.received.Sub(event.finished))
		}
		return h, "finished_at", nil
	}
	for _, event := range filled {
		h.record(event.received.Sub(commits[event.order]))
	}
	return h, "commit", nil
}

// probePeak finds the admission peak of a gateway process with a short
// closed loop, for a phase run without the admission phase; the gateway
// is stopped after it.
func probePeak(ctx context.Context, s *servers, databaseURL string, keys []string, prefix string, progress func(string, ...any)) (float64, error) {
	gateway, err := startGatewayProcess(ctx, s, databaseURL)
	if err != nil {
		return 0, err
	}
	defer gateway.stop()
	probe := newOrderClient(gateway.base+"/v1/orders", keys, prefix, 64)
	defer probe.close()
	return closedLoop(ctx, "events: admission peak probe", 64, 2*time.Second, progress, probe.place).PerSecond, nil
}

// memoryNow is the resident memory of process pid and Redis's used memory.
func (e *env) memoryNow(ctx context.Context, pid int) (resident, redisUsed int64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	kB, err := infoField(strings.ReplaceAll(strings.ReplaceAll(string(status), "\t", ""), " kB", ""), "VmRSS")
	if err != nil {
		return 0, 0, err
	}
	info, err := e.queue.Redis().Info(ctx, "memory").Result()
	if err != nil {
		return 0, 0, err
	}
	used, err := infoField(info, "used_memory")
	return 1024 * kB, used, err
}

// streamAccounts creates n accounts on db, each funded in every asset of
// the matching phase's instruments beyond what its orders hold, with an
// API key each; 8 at a time.
func streamAccounts(ctx context.Context, db *pgxpool.Pool, n int, run string) (accounts, keys []string, err error) {
	ledger, store := postgres.NewLedger(db), postgres.NewAccounts(db)
	accounts, keys = make([]string, n), make([]string, n)
	var next atomic.Int64
	var creating sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		creating.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				account, err := store.Create(ctx, "bench-stream-"+run+"-"+strconv.Itoa(i))
				for _, funds := range matchFunds {
					if err == nil {
						err = ledger.Deposit(ctx, account, funds[0], funds[1])
					}
				}
				if err == nil {
					_, keys[i], err = store.IssueKey(ctx, account)
				}
				if err != nil {
					errs[w] = err
					return
				}
				accounts[i] = account
			}
		})
	}
	creating.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return accounts, keys, ctx.Err()
}

// gatewayProcess is a gateway process the bench started.
type gatewayProcess struct {
	// base is its API's URL, metrics its metrics listener's.
	base, metrics string
	pid           int
	stop          func()
}

// startGatewayProcess builds cmd/gateway and runs it against the bench's
// Redis and the database at databaseURL, its rate limit out of the way.
// env adds to its environment.
func startGatewayProcess(ctx context.Context, s *servers, databaseURL string, env ...string) (gatewayProcess, error) {
	binary := filepath.Join(s.dir, "gateway")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/gateway").CombinedOutput(); err != nil {
		return gatewayProcess{}, fmt.Errorf("build the gateway: %w\n%s", err, out)
	}
	var addrs [2]string
	for i := range addrs {
		port, err := freePort()
		if err != nil {
			return gatewayProcess{}, err
		}
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	addr, metricsAddr := addrs[0], addrs[1]
	logFile, err := os.Create(filepath.Join(s.dir, "gateway.log"))
	if err != nil {
		return gatewayProcess{}, err
	}
	cmd := exec.Command(binary)
	// METRICS_ADDR empty is its default, 127.0.0.1:9090, which another
	// gateway on the machine may hold: a free port.
	cmd.Env = append(os.Environ(), "GATEWAY_ADDR="+addr, "METRICS_ADDR="+metricsAddr, "REDIS_URL="+s.redisURL, "DATABASE_URL="+databaseURL,
		"MIGRATE=false", "RATE_LIMIT_BURST=1000000", "RATE_LIMIT_PER_SECOND=1000000", "LOG_LEVEL=warn",
		// Its streams all come from one address, one per key.
		"EVENTS_STREAMS_PER_ADDRESS=0")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return gatewayProcess{}, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logFile.Close()
	}
	base := "http://" + addr
	// A loaded machine (other runs beside the bench) has seen the gateway
	// take over 30 s to answer.
	if err := waitFor(ctx, 90*time.Second, func() error {
		response, err := http.Get(base + "/healthz")
		if err != nil {
			return err
		}
		response.Body.Close()
		if response.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz %d", response.StatusCode)
		}
		return nil
	}); err != nil {
		stop()
		log, _ := os.ReadFile(logFile.Name())
		return gatewayProcess{}, fmt.Errorf("the gateway process (log in %s): %w\n%s", logFile.Name(), err, log[max(0, len(log)-2000):])
	}
	return gatewayProcess{base: base, metrics: "http://" + metricsAddr + "/metrics", pid: cmd.Process.Pid, stop: stop}, nil
}

// redisClients is Redis's connected clients.
func (e *env) redisClients(ctx context.Context) (int64, error) {
	info, err := e.queue.Redis().Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	return infoField(info, "connected_clients")
}

// infoField reads an integer field of an INFO reply.
func infoField(info, name string) (int64, error) {
	for _, line := range strings.Split(info, "\n") {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", name)
}

// markdown is the phase's table, a column per load.
func (r eventsResult) markdown() string {
	loads := make([]streamLoad, 0, 2)
	names := make([]string, 0, 2)
	for i, l := range []streamLoad{r.Sustained, r.AdmissionHalf} {
		if l.Admission.Orders > 0 {
			loads, names = append(loads, l), append(names, []string{"sustained, half the matching peak", "half the admission peak"}[i])
		}
	}
	if len(loads) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %d event streams, one per account; their orders over HTTP, open loop, on %s; %d workers |",
		r.Streams, strings.Join(r.Symbols, ", "), r.Workers)
	for _, name := range names {
		b.WriteString(" " + name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(loads)) + "\n")
	row := func(label string, cell func(streamLoad) string) {
		b.WriteString("| " + label + " |")
		for _, l := range loads {
			b.WriteString(" " + cell(l) + " |")
		}
		b.WriteString("\n")
	}
	quantiles := func(l latency) string {
		return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs)
	}
	row("orders/s offered for (half of, from)", func(l streamLoad) string {
		if l.Peak > 0 {
			return fmt.Sprintf("%.0f for %s (½ of %.0f, %s)", l.Rate, l.Duration, l.Peak, l.PeakFrom)
		}
		return fmt.Sprintf("%.0f for %s (%s)", l.Rate, l.Duration, l.PeakFrom)
	})
	row("orders accepted (202) at orders/s; errors", func(l streamLoad) string {
		return fmt.Sprintf("%d at %.0f; %d", l.Admission.Orders, l.Admission.PerSecond, l.Admission.Errors)
	})
	row("scheduled send → 202, p50 / p90 / p99 / max ms", func(l streamLoad) string {
		return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f", l.Admission.P50Ms, l.Admission.P90Ms, l.Admission.P99Ms, l.Admission.MaxMs)
	})
	row("**placement → decided** (scheduled send → the order's first state event at its client), p50 / p90 / p99 / max ms", func(l streamLoad) string { return quantiles(l.Decided) })
	row("scheduled send → that event's append to the account's log (after the commit and the relay)", func(l streamLoad) string { return quantiles(l.DecidedToLog) })
	row("accepted orders whose stream showed no event", func(l streamLoad) string { return strconv.Itoa(l.Undecided) })
	row("backlog on the queues when the load ended; seconds to drain it", func(l streamLoad) string {
		return fmt.Sprintf("%d; %.1f", l.Backlog, l.DrainSeconds)
	})
	row("settlement commit → order.filled at the client, p50 / p90 / p99 / max ms", func(l streamLoad) string {
		if l.CommitFrom != "commit" {
			return quantiles(l.Commit) + " (from finished_at, the transaction's start)"
		}
		return quantiles(l.Commit)
	})
	row("append to the account's log → client, every event", func(l streamLoad) string { return quantiles(l.Append) })
	row("events received", func(l streamLoad) string { return strconv.FormatInt(l.Events, 10) })
	row("gateway CPU s/s; PostgreSQL key lookups/s (on requests' path), during the load", func(l streamLoad) string {
		return fmt.Sprintf("%.3f; %.0f (%.0f)", l.Cost.CPUPerSecond, l.Cost.KeyLookupsPerSecond, l.Cost.RequestKeyLookupsPerSecond)
	})
	fmt.Fprintf(&b, "\nAn idle stream costs the gateway %.0f B of resident memory and Redis %.0f B; Redis had %d connections with every stream open. The idle streams together cost the gateway %.3f s of CPU a second and PostgreSQL %.0f key lookups a second.\n\n",
		r.GatewayBytesPerStream, r.RedisBytesPerStream, r.RedisClients, r.Idle.CPUPerSecond, r.Idle.KeyLookupsPerSecond)
	return b.String()
}

// targets are the phase's rows of the targets table.
func (r eventsResult) targets() []string {
	var lines []string
	if l := r.Sustained; l.Admission.Orders > 0 {
		share := ""
		if l.Peak > 0 {
			share = fmt.Sprintf(" = %.1f%% of the matching peak %.0f", 100*l.Admission.PerSecond/l.Peak, l.Peak)
		}
		at := "half the matching peak"
		if l.Peak == 0 {
			at = fmt.Sprintf("%.0f orders/s (%s)", l.Rate, l.PeakFrom)
		}
		lines = append(lines, fmt.Sprintf("| sustained open loop, %d instruments at %s for %s: placement → decided p99 ≤ 50 ms | p99 %.1f ms (p50 %.1f, max %.1f; %d undecided) at %.0f orders/s%s; backlog %d at the end | %s |",
			len(r.Symbols), at, l.Duration, l.Decided.P99Ms, l.Decided.P50Ms, l.Decided.MaxMs, l.Undecided, l.Admission.PerSecond, share, l.Backlog,
			verdict(l.Decided.P99Ms <= 50 && l.Undecided == 0 && l.Admission.Errors == 0)))
	}
	for _, l := range []struct {
		load streamLoad
		at   string
	}{{r.Sustained, "half the matching peak"}, {r.AdmissionHalf, "half the admission peak"}} {
		if l.load.Admission.Orders == 0 {
			continue
		}
		if l.load.Peak == 0 {
			l.at = fmt.Sprintf("%.0f orders/s (%s)", l.load.Rate, l.load.PeakFrom)
		}
		lines = append(lines, fmt.Sprintf("| event stream p99 ≤ 20 ms, settlement commit to client, %d streams, at %s | %.1f ms (p50 %.1f) at %.0f orders/s | %s |",
			r.Streams, l.at, l.load.Commit.P99Ms, l.load.Commit.P50Ms, l.load.Admission.PerSecond, verdict(l.load.Commit.P99Ms <= 20 && l.load.Commit.Samples > 0)))
	}
	return lines
}
