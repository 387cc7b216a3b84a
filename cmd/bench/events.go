package main

import (
	"context"
	"fmt"
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

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
)

// eventStreams is how many event streams the events phase holds open on
// one gateway, each of an account of its own.
const eventStreams = 1_000

// eventsResult is the events phase: 1,000 streams (GET /v1/events) open on
// one gateway process, one per account, while those accounts' orders are
// admitted at half the gateway's peak, buys and sells at one price so they
// trade, and settled by a worker; how long events took to reach the
// clients, and what an idle stream costs the gateway and Redis.
type eventsResult struct {
	Streams   int        `json:"streams"`
	Accounts  int        `json:"accounts"`
	Admission loadResult `json:"admission"`
	// Events is what the streams received; Reconnects how often one had
	// to reconnect (a slow client is dropped and resumes).
	Events     int64 `json:"events_received"`
	Reconnects int64 `json:"reconnects"`
	// CommitToClient is order.filled events, from the commit of the
	// settlement that filled the order (PostgreSQL's commit timestamp of
	// the order's row; its finished_at, the transaction's start, when the
	// server does not track them: CommitFrom says which) to the client;
	// AppendToClient every event, from its append to the account's log
	// (the event's time) to the client.
	CommitFrom  string  `json:"commit_from"`
	CommitP50Ms float64 `json:"commit_to_client_p50_ms"`
	CommitP99Ms float64 `json:"commit_to_client_p99_ms"`
	AppendP50Ms float64 `json:"append_to_client_p50_ms"`
	AppendP99Ms float64 `json:"append_to_client_p99_ms"`
	// GatewayBytesPerStream is the gateway process's resident memory per
	// idle stream; RedisBytesPerStream is Redis's used memory per idle
	// stream, and RedisClients its connections with every stream open.
	GatewayBytesPerStream float64 `json:"gateway_bytes_per_idle_stream"`
	RedisBytesPerStream   float64 `json:"redis_bytes_per_idle_stream"`
	RedisClients          int64   `json:"redis_clients_with_streams_open"`
}

// events runs the phase. peak is the admission phase's closed-loop orders/s
// over HTTP (0 when it did not run: a short closed loop finds it).
func (e *env) events(ctx context.Context, c config, s *servers, peak float64, progress func(string, ...any)) (eventsResult, error) {
	r := eventsResult{Streams: eventStreams, Accounts: eventStreams}
	if s.redisAddr == "" {
		progress("events: skipped (REDIS_URL given: the phase empties the orders queue of the bench's Redis first)")
		return r, nil
	}
	progress("events: funding %d accounts, building and starting a gateway process…", eventStreams)
	keys, err := e.streamAccounts(ctx)
	if err != nil {
		return r, err
	}
	if peak <= 0 && c.eventsRate <= 0 {
		if peak, err = probePeak(ctx, s, keys, "p"+e.run+"-", progress); err != nil {
			return r, err
		}
	}
	// The admission phase's orders (or the probe's) wait on the orders
	// queue; the worker would settle that backlog first, while the streams
	// are timed. Purge drops every key of the queue, logs included.
	queues, err := e.orderQueues(ctx)
	if err != nil {
		return r, err
	}
	for _, queue := range queues {
		if err := queue.Purge(ctx); err != nil {
			return r, err
		}
	}
	base, gatewayPID, stopGateway, err := startGatewayProcess(ctx, s)
	if err != nil {
		return r, err
	}
	defer stopGateway()
	url := base + "/v1/orders"
	deps, err := settlement.Connect(ctx, s.databaseURL, s.redisURL, settlement.DefaultConfig(), e.logger)
	if err != nil {
		return r, err
	}
	defer deps.Close()
	worker, err := settlement.New(ctx, deps, settlement.DefaultConfig())
	if err != nil {
		return r, err
	}
	workCtx, stopWork := context.WithCancel(ctx)
	workDone := make(chan error, 1)
	go func() { workDone <- worker.Run(workCtx) }()
	defer func() { stopWork(); <-workDone }()

	gatewayBefore, redisBefore, err := e.memoryNow(ctx, gatewayPID)
	if err != nil {
		return r, err
	}
	progress("events: opening %d streams, one per account…", eventStreams)
	streamCtx, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	var (
		readers  sync.WaitGroup
		mu       sync.Mutex
		appended histogram
		filled   []filledEvent
		received atomic.Int64
	)
	transport := &http.Transport{MaxIdleConnsPerHost: eventStreams, MaxConnsPerHost: 0}
	defer transport.CloseIdleConnections()
	for i := range eventStreams {
		key := keys[i]
		api, err := client.NewClient(base, client.WithHTTPClient(&http.Client{Transport: transport}),
			client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
				req.Header.Set("Authorization", "Bearer "+key)
				return nil
			}))
		if err != nil {
			return r, err
		}
		stream, err := api.Events(streamCtx, client.EventsOptions{})
		if err != nil {
			return r, fmt.Errorf("events: stream %d: %w", i, err)
		}
		readers.Go(func() {
			defer stream.Close()
			var mineAppended histogram
			var mine []filledEvent
			for {
				event, err := stream.Next()
				if err != nil {
					break
				}
				now := time.Now()
				received.Add(1)
				mineAppended.record(now.Sub(event.Time))
				if event.Type == client.EventType(orders.EventOrderFilled) {
					if order, err := event.Data.AsOrder(); err == nil && order.FinishedAt != nil {
						mine = append(mine, filledEvent{order: order.ID, finished: *order.FinishedAt, received: now})
					}
				}
			}
			mu.Lock()
			filled = append(filled, mine...)
			appended.merge(&mineAppended)
			mu.Unlock()
		})
	}
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

	rate := peak / 2
	if c.eventsRate > 0 {
		rate = c.eventsRate
	}
	buys := newSidedOrderClient(url, keys, "eb"+e.run+"-", 64, "buy")
	sells := newSidedOrderClient(url, keys, "es"+e.run+"-", 64, "sell")
	defer buys.close()
	defer sells.close()
	var turn atomic.Int64
	place := func(ctx context.Context) error {
		if turn.Add(1)%2 == 0 {
			return sells.place(ctx)
		}
		return buys.place(ctx)
	}
	load := c.duration / 2
	r.Admission = openLoop(ctx, "events: admission at half its peak", rate, 128, load, progress, place)
	// The backlog settles; its events still count.
	drainCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitFor(drainCtx, 2*time.Minute, func() error {
		for _, queue := range queues {
			stats, err := queue.Stats(drainCtx)
			if err != nil {
				return err
			}
			if stats.Pending+stats.Active+stats.Delayed > 0 {
				return fmt.Errorf("%d orders left on %s", stats.Pending+stats.Active+stats.Delayed, queue.Name())
			}
		}
		return nil
	}); err != nil {
		return r, fmt.Errorf("events: the backlog did not settle: %w", err)
	}
	time.Sleep(2 * time.Second) // the last events' relay and fan-out
	stopStreams()
	readers.Wait()
	r.Events = received.Load()
	commit, from, err := e.commitToClient(ctx, filled)
	if err != nil {
		return r, err
	}
	r.CommitFrom = from
	r.CommitP50Ms, r.CommitP99Ms = ms(commit.quantile(0.5)), ms(commit.quantile(0.99))
	r.AppendP50Ms, r.AppendP99Ms = ms(appended.quantile(0.5)), ms(appended.quantile(0.99))
	progress("events: %d events to %d streams; commit to client p50 %.1f ms p99 %.1f ms; append to client p50 %.1f ms p99 %.1f ms",
		r.Events, eventStreams, r.CommitP50Ms, r.CommitP99Ms, r.AppendP50Ms, r.AppendP99Ms)
	return r, nil
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
func (e *env) commitToClient(ctx context.Context, filled []filledEvent) (h histogram, from string, err error) {
	ids := make([]string, len(filled))
	for i, event := range filled {
		ids[i] = event.order
	}
	commits := make(map[string]time.Time, len(ids))
	rows, err := e.db.Query(ctx, orderCommitsSQL, ids)
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
func probePeak(ctx context.Context, s *servers, keys []string, prefix string, progress func(string, ...any)) (float64, error) {
	base, _, stop, err := startGatewayProcess(ctx, s)
	if err != nil {
		return 0, err
	}
	defer stop()
	probe := newOrderClient(base+"/v1/orders", keys, prefix, 64)
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

// streamAccounts creates the phase's accounts, funded to trade, and returns
// their API keys.
func (e *env) streamAccounts(ctx context.Context) ([]string, error) {
	ledger := postgres.NewLedger(e.db)
	accounts := postgres.NewAccounts(e.db)
	keys := make([]string, eventStreams)
	for i := range keys {
		account, err := accounts.Create(ctx, "bench-stream-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		for _, funds := range [][2]string{{"USD", "1000000000.00"}, {"BTC", "1000"}} {
			if err := ledger.Deposit(ctx, account, funds[0], funds[1]); err != nil {
				return nil, fmt.Errorf("fund %s: %w", account, err)
			}
		}
		if _, keys[i], err = accounts.IssueKey(ctx, account); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// startGatewayProcess builds cmd/gateway and runs it against the bench's
// servers, its rate limit out of the way, and returns its base URL, its
// process id and what stops it.
func startGatewayProcess(ctx context.Context, s *servers) (base string, pid int, stop func(), err error) {
	binary := filepath.Join(s.dir, "gateway")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/gateway").CombinedOutput(); err != nil {
		return "", 0, nil, fmt.Errorf("build the gateway: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return "", 0, nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logFile, err := os.Create(filepath.Join(s.dir, "gateway.log"))
	if err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), "GATEWAY_ADDR="+addr, "METRICS_ADDR=", "REDIS_URL="+s.redisURL, "DATABASE_URL="+s.databaseURL,
		"MIGRATE=false", "RATE_LIMIT_BURST=1000000", "RATE_LIMIT_PER_SECOND=1000000", "LOG_LEVEL=warn",
		// Its streams all come from one address, one per key.
		"EVENTS_STREAMS_PER_ADDRESS=0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return "", 0, nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logFile.Close()
	}
	base = "http://" + addr
	if err := waitFor(ctx, 30*time.Second, func() error {
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
		return "", 0, nil, fmt.Errorf("the gateway process (log in %s): %w", logFile.Name(), err)
	}
	return base, cmd.Process.Pid, stop, nil
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

// markdown is the phase's table.
func (r eventsResult) markdown() string {
	if r.Streams == 0 || r.Admission.Orders == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %d event streams, one per account, admission at %.0f orders/s | p50 ms | p99 ms |\n|---|---:|---:|\n",
		r.Streams, r.Admission.TargetRate)
	start := "its commit timestamp"
	if r.CommitFrom != "commit" {
		start = "the order's finished_at, the transaction's start"
	}
	fmt.Fprintf(&b, "| settlement commit (%s) to order.filled at the client | %.1f | %.1f |\n", start, r.CommitP50Ms, r.CommitP99Ms)
	fmt.Fprintf(&b, "| append to the account's log to client (every event) | %.1f | %.1f |\n", r.AppendP50Ms, r.AppendP99Ms)
	fmt.Fprintf(&b, "\n%d events received, %d orders admitted. An idle stream costs the gateway %.0f B of resident memory and Redis %.0f B; Redis had %d connections with every stream open.\n\n",
		r.Events, r.Admission.Orders, r.GatewayBytesPerStream, r.RedisBytesPerStream, r.RedisClients)
	return b.String()
}
