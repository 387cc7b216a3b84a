package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/logbuffer"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func envOf(values map[string]string) func(string) string {
	return func(name string) string { return values[name] }
}

func TestParseConfig(t *testing.T) {
	const databaseURL = "postgres://postgres@db:5432/ordergate"
	defaults := config{
		redisURL: "redis://127.0.0.1:6379/0", databaseURL: databaseURL, migrate: true, metricsAddr: "127.0.0.1:9091", logLevel: slog.LevelInfo,
		logFlush: 100 * time.Millisecond,
		worker: settlement.Config{
			QueuePrefix: orders.QueuePrefix, OwnLease: 5 * time.Second, Concurrency: 512, Lease: 30 * time.Second,
			Retry:        emq.RetryPolicy{MaxAttempts: 60, BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second},
			DrainTimeout: 10 * time.Second, WaitTimeout: 500 * time.Millisecond,
			EventsHotTail: emq.LogHotTail{Count: 1000, Age: 10 * time.Minute}, EventsRetention: 7 * 24 * time.Hour,
			CoherenceJobSize: 64, OutboxRetention: 5 * time.Minute,
		},
	}
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    func(c *config)
		wantErr string
	}{
		{name: "defaults", want: func(*config) {}},
		{
			name: "environment",
			env: map[string]string{
				"REDIS_URL": "redis://queue:6379/1", "WORKER_CONCURRENCY": "32", "WORKER_BATCH": "16",
				"WORKER_LEASE": "45s", "WORKER_MAX_ATTEMPTS": "5", "WORKER_DRAIN_TIMEOUT": "20s",
				"METRICS_ADDR": ":9100", "LOG_LEVEL": "debug", "DATABASE_URL": "postgres://other/db", "MIGRATE": "false",
				"WORKER_RETRY_BASE": "1s", "WORKER_RETRY_CAP": "1m", "LOG_FLUSH_INTERVAL": "0", "WORKER_OWN_LEASE": "2s",
			},
			want: func(c *config) {
				c.redisURL, c.worker.Concurrency, c.worker.Batch, c.worker.Lease = "redis://queue:6379/1", 32, 16, 45*time.Second
				c.worker.Retry.MaxAttempts, c.worker.DrainTimeout, c.metricsAddr, c.logLevel = 5, 20*time.Second, ":9100", slog.LevelDebug
				c.databaseURL, c.migrate, c.worker.Retry.BaseDelay, c.worker.Retry.MaxDelay = "postgres://other/db", false, time.Second, time.Minute
				c.logFlush, c.worker.OwnLease = 0, 2*time.Second
			},
		},
		{
			name: "flags win over the environment",
			env:  map[string]string{"WORKER_CONCURRENCY": "32", "WORKER_LEASE": "45s"},
			args: []string{"-concurrency", "4", "-lease", "2s", "-metrics-addr", ""},
			want: func(c *config) { c.worker.Concurrency, c.worker.Lease, c.metricsAddr = 4, 2*time.Second, "" },
		},
		{name: "unparsable duration", env: map[string]string{"WORKER_LEASE": "30"}, wantErr: `WORKER_LEASE="30"`},
		{name: "unparsable integer", env: map[string]string{"WORKER_CONCURRENCY": "many"}, wantErr: `WORKER_CONCURRENCY="many"`},
		{name: "unknown log level", env: map[string]string{"LOG_LEVEL": "loud"}, wantErr: `LOG_LEVEL="loud"`},
		{name: "replicas waited for", env: map[string]string{"WORKER_WAIT_REPLICAS": "1", "WORKER_WAIT_TIMEOUT": "250ms"},
			want: func(c *config) { c.worker.WaitReplicas, c.worker.WaitTimeout = 1, 250*time.Millisecond }},
		{name: "negative replicas", env: map[string]string{"WORKER_WAIT_REPLICAS": "-1"}, wantErr: "WORKER_WAIT_REPLICAS"},
		{name: "events kept", env: map[string]string{"EVENTS_HOT_RETENTION": "2m", "EVENTS_HOT_COUNT": "0", "EVENTS_RETENTION": "72h"},
			want: func(c *config) {
				c.worker.EventsHotTail, c.worker.EventsRetention = emq.LogHotTail{Count: 0, Age: 2 * time.Minute}, 72*time.Hour
			}},
		{name: "events kept by flags", args: []string{"-events-hot-retention", "1m", "-events-hot-count", "50", "-events-retention", "1h"},
			want: func(c *config) {
				c.worker.EventsHotTail, c.worker.EventsRetention = emq.LogHotTail{Count: 50, Age: time.Minute}, time.Hour
			}},
		{name: "relayed outbox rows kept longer", env: map[string]string{"OUTBOX_RETENTION": "1h"},
			want: func(c *config) { c.worker.OutboxRetention = time.Hour }},
		{name: "relayed outbox rows kept the least", args: []string{"-outbox-retention", "1m"},
			want: func(c *config) { c.worker.OutboxRetention = time.Minute }},
		{name: "relayed outbox rows kept less than a relay reads back", env: map[string]string{"OUTBOX_RETENTION": "59s"}, wantErr: "OUTBOX_RETENTION"},
		{name: "one balance change a coherence job", env: map[string]string{"COHERENCE_JOB_SIZE": "1"},
			want: func(c *config) { c.worker.CoherenceJobSize = 1 }},
		{name: "coherence jobs of no change", env: map[string]string{"COHERENCE_JOB_SIZE": "0"}, wantErr: "COHERENCE_JOB_SIZE"},
		{name: "coherence jobs past a consumer's batch", args: []string{"-coherence-job-size", "65"}, wantErr: "COHERENCE_JOB_SIZE"},
		{name: "no hot retention", env: map[string]string{"EVENTS_HOT_RETENTION": "0s"}, wantErr: "EVENTS_HOT_RETENTION"},
		{name: "a negative hot count", env: map[string]string{"EVENTS_HOT_COUNT": "-1"}, wantErr: "EVENTS_HOT_COUNT"},
		{name: "a history shorter than the hot tail", env: map[string]string{"EVENTS_RETENTION": "5m"}, wantErr: "EVENTS_RETENTION"},
		{name: "the events' retention by its old name", env: map[string]string{"EVENTS_RETENTION_AGE": "1h"}, wantErr: `EVENTS_RETENTION_AGE="1h": no longer read`},
		{name: "the events' count by its old name", env: map[string]string{"EVENTS_RETENTION_COUNT": "500"}, wantErr: `EVENTS_RETENTION_COUNT="500": no longer read`},
		{name: "replicas without a timeout", env: map[string]string{"WORKER_WAIT_REPLICAS": "1", "WORKER_WAIT_TIMEOUT": "0s"}, wantErr: "WORKER_WAIT_TIMEOUT"},
		{name: "no concurrency", args: []string{"-concurrency", "0"}, wantErr: "concurrency 0"},
		{name: "lease too short", env: map[string]string{"WORKER_LEASE": "100ms"}, wantErr: "lease 100ms"},
		{name: "no attempts", env: map[string]string{"WORKER_MAX_ATTEMPTS": "0"}, wantErr: "max attempts 0"},
		{name: "no database", env: map[string]string{"DATABASE_URL": ""}, wantErr: "DATABASE_URL"},
		{name: "database by flag", env: map[string]string{"DATABASE_URL": ""}, args: []string{"-database-url", "postgres://flag/db"},
			want: func(c *config) { c.databaseURL = "postgres://flag/db" }},
		{name: "unparsable MIGRATE", env: map[string]string{"MIGRATE": "sometimes"}, wantErr: `MIGRATE="sometimes"`},
		{name: "no migrations by flag", args: []string{"-migrate=false"}, want: func(c *config) { c.migrate = false }},
		{name: "zero retry base", env: map[string]string{"WORKER_RETRY_BASE": "0s"}, wantErr: "retry base 0s"},
		{name: "retry cap under the base", env: map[string]string{"WORKER_RETRY_BASE": "2s", "WORKER_RETRY_CAP": "1s"}, wantErr: "retry cap 1s"},
		{name: "negative log flush interval", args: []string{"-log-flush-interval", "-1s"}, wantErr: "log flush interval -1s"},
		{name: "stray argument", args: []string{"now"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			env := map[string]string{"DATABASE_URL": databaseURL}
			maps.Copy(env, tt.env)
			got, err := parseConfig(append([]string{"worker"}, tt.args...), envOf(env), &out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig: %v", err)
			}
			want := defaults
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config = %+v\nwant     %+v", got, want)
			}
		})
	}
}

func TestUsageNamesEveryEnvironmentVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"worker", "-h"}, envOf(nil), &out); err != nil {
		t.Fatalf("run -h: %v", err)
	}
	for _, name := range []string{"REDIS_URL", "DATABASE_URL", "MIGRATE", "WORKER_CONCURRENCY", "WORKER_BATCH", "WORKER_LEASE",
		"WORKER_MAX_ATTEMPTS", "WORKER_RETRY_BASE", "WORKER_RETRY_CAP", "WORKER_DRAIN_TIMEOUT", "METRICS_ADDR", "LOG_LEVEL",
		"EVENTS_HOT_RETENTION", "EVENTS_HOT_COUNT", "EVENTS_RETENTION", "OUTBOX_RETENTION"} {
		if !strings.Contains(out.String(), "("+name+")") {
			t.Errorf("usage does not document %s:\n%s", name, out.String())
		}
	}
}

func TestWorkerRefusesAnotherProtocolVersion(t *testing.T) {
	redisServer := testserver.QueueRedisServer(t)
	redisServer.Client(t).Set(context.Background(), "{emq}:version", "echomq:1.0.0", 0)
	var out bytes.Buffer
	err := run(context.Background(), []string{"worker"}, envOf(map[string]string{
		"REDIS_URL": redisServer.URL(), "METRICS_ADDR": "", "DATABASE_URL": testserver.Postgres(t).URL,
	}), &out)
	if err == nil || !strings.Contains(err.Error(), "echomq:1.0.0") {
		t.Fatalf("run = %v, want a refusal naming the foreign version", err)
	}
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func waitUntil(t testing.TB, timeout time.Duration, what string, condition func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !condition(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
	}
}

// TestWorkerSettlesOrders runs the worker as main does, on a database it
// migrates itself: an order admitted through the Placer is settled, an
// unaffordable one rejected, a job that is no order buried; the coherence
// consumer brings the cached balances up to the settlement; it serves its
// metrics and drains on cancel.
func TestWorkerSettlesOrders(t *testing.T) {
	redisServer := testserver.QueueRedisServer(t)
	database := testserver.Postgres(t)
	metricsAddr := testserver.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuffer.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"worker", "-lease", "2s"}, envOf(map[string]string{
			"REDIS_URL": redisServer.URL(), "DATABASE_URL": database.URL, "METRICS_ADDR": metricsAddr,
		}), &out)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker output:\n%s", out.String())
		}
	})
	// The metrics listener starts after the migrations.
	waitUntil(t, 30*time.Second, "/healthz answers 200", func() bool {
		status, _ := get(t, "http://"+metricsAddr+"/healthz")
		return status == http.StatusOK
	})

	background := context.Background()
	db := database.Pool(t)
	account, err := postgres.NewAccounts(db).Create(background, "worker test")
	if err != nil {
		t.Fatal(err)
	}
	seller, err := postgres.NewAccounts(db).Create(background, "worker test seller")
	if err != nil {
		t.Fatal(err)
	}
	ledger := postgres.NewLedger(db)
	for _, funds := range []struct{ account, asset, amount string }{
		{seller, "BTC", "1"}, {account, "USD", "1000.00"},
	} {
		if err := ledger.Deposit(background, funds.account, funds.asset, funds.amount); err != nil {
			t.Fatal(err)
		}
	}
	client, err := emq.Connect(background, redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue(orders.InstrumentQueue("BTC-USD"))
	placer := placement.NewPlacer(placement.NewOrderQueues(client))
	place := func(account, clientOrderID string, side orders.Side, quantity string) orders.Order {
		t.Helper()
		placement, err := placer.Place(background, orders.PlaceCommand{
			Account: account, ClientOrderID: clientOrderID, Symbol: "BTC-USD", Side: side, Type: orders.Limit,
			Quantity: decimal.MustParse(quantity), Price: decimal.MustParse("50000.00"),
		})
		if err != nil {
			t.Fatal(err)
		}
		return placement.Order
	}
	// The seller's ask rests first, so the buy has a counterparty.
	ask := place(seller, "s-1", orders.Sell, "0.01")
	waitUntil(t, 15*time.Second, "the ask rests in the book", func() bool {
		var status string
		_ = db.QueryRow(background, `SELECT status FROM orders WHERE id = $1`, ask.ID).Scan(&status)
		return status == string(orders.StatusOpen)
	})
	affordable, unaffordable := place(account, "c-1", orders.Buy, "0.01"), place(account, "c-2", orders.Buy, "1")
	broken := orders.NewOrderID()
	if _, err := queue.Admit(background, emq.Job{ID: broken, Kind: orders.KindPlace, Group: account, Payload: []byte("{not json")}); err != nil {
		t.Fatalf("admit %s: %v", broken, err)
	}

	stateOf := func(id string) string {
		info, err := queue.Job(background, id)
		if err != nil {
			return err.Error()
		}
		return info.State
	}
	finalOf := func(id string) (status, reason string) {
		var rejectReason *string
		if err := db.QueryRow(background, `SELECT status, reject_reason FROM orders WHERE id = $1`, id).Scan(&status, &rejectReason); err != nil {
			return err.Error(), ""
		}
		if rejectReason != nil {
			reason = *rejectReason
		}
		return status, reason
	}
	waitUntil(t, 15*time.Second, "both orders done and the broken job dead", func() bool {
		return stateOf(affordable.ID) == emq.StateDone && stateOf(unaffordable.ID) == emq.StateDone && stateOf(broken) == emq.StateDead
	})
	if status, _ := finalOf(affordable.ID); status != string(orders.StatusFilled) {
		t.Errorf("affordable order: %s, want filled", status)
	}
	if status, reason := finalOf(unaffordable.ID); status != "rejected" || reason != orders.ReasonInsufficientFunds {
		t.Errorf("unaffordable order: %s %s, want rejected for insufficient funds", status, reason)
	}
	var usd string
	if err := db.QueryRow(background, `SELECT trim_scale(available)::text FROM balances WHERE account_id = $1 AND asset = 'USD'`,
		account).Scan(&usd); err != nil || usd != "499" {
		t.Errorf("USD after the fill: %s (%v), want 499 (500 for the BTC, 1 the taker's fee at 20 bps)", usd, err)
	}
	if violations, err := postgres.Audit(background, db); err != nil || len(violations) > 0 {
		t.Errorf("audit: %v, %v", violations, err)
	}
	// Nothing but the worker's relay and coherence consumer writes the cache here.
	stored, err := placement.NewBalances(postgres.NewBalances(db), nil, nil).Of(background, account)
	if err != nil || len(stored) != 2 {
		t.Fatalf("balances after the fill: %v (%v), want BTC and USD", stored, err)
	}
	waitUntil(t, 15*time.Second, "the cache holds the balances the settlement wrote", func() bool {
		cached, err := coherence.New(client.Redis()).ReadCache(background, placement.BalanceCacheKey(account))
		if err != nil {
			return false
		}
		for _, balance := range stored {
			if entry := cached[balance.Asset]; entry.Version != balance.Version || entry.Value != balance.Available+" "+balance.Held {
				return false
			}
		}
		return true
	})
	// Each account's log holds its events, in one gapless sequence: the
	// admissions' order.accepted, settlement's fills and order states after
	// them, and the balances the coherence consumer refilled.
	for _, want := range []struct {
		account string
		events  []string // "<type> <order id>" (fills: the order filled), in order per order
	}{
		{seller, []string{"order.accepted " + ask.ID, "order.open " + ask.ID, "fill " + ask.ID, "order.filled " + ask.ID}},
		{account, []string{"order.accepted " + affordable.ID, "fill " + affordable.ID, "order.filled " + affordable.ID,
			"order.accepted " + unaffordable.ID, "order.rejected " + unaffordable.ID}},
	} {
		var got []string
		waitUntil(t, 15*time.Second, "the events of "+want.account, func() bool {
			got = accountEvents(t, placement.NewEventLogs(client).For(want.account), want.account)
			return containsInOrder(got, want.events) && slices.ContainsFunc(got, func(e string) bool { return strings.HasPrefix(e, "balance ") })
		})
	}
	if info, _ := queue.Job(background, broken); !strings.Contains(info.LastError, "malformed order payload") || info.Attempts != 1 {
		t.Errorf("broken job: attempts %d, last error %q; want dead on its first attempt with the decode error", info.Attempts, info.LastError)
	}
	for _, line := range []string{
		fmt.Sprintf(`"msg":"order settled","order_id":%q`, affordable.ID),
		fmt.Sprintf(`"msg":"order rejected","order_id":%q`, unaffordable.ID),
	} {
		// Log lines are written together every LOG_FLUSH_INTERVAL.
		waitUntil(t, 5*time.Second, line+" in the log", func() bool { return strings.Contains(out.String(), line) })
	}
	if strings.Contains(out.String(), "50000") || strings.Contains(out.String(), "not json") {
		t.Error("a payload made it into the log")
	}

	// The counters move once the queue's answer is back, a moment after the
	// jobs show their states.
	var missing []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		status, body := get(t, "http://"+metricsAddr+"/metrics")
		missing = missing[:0]
		for _, series := range []string{
			`emq_jobs_claimed_total{queue="orders.BTC-USD"} 4`,
			`emq_jobs_completed_total{queue="orders.BTC-USD"} 3`,
			`emq_jobs_dead_total{queue="orders.BTC-USD"} 1`,
			`emq_claim_to_complete_seconds_count{queue="orders.BTC-USD"} 3`,
			`emq_pending_jobs{queue="orders.BTC-USD"}`,
			`go_goroutines`,
		} {
			if status != http.StatusOK || !strings.Contains(body, series) {
				missing = append(missing, series)
			}
		}
		if len(missing) == 0 {
			break
		}
	}
	if len(missing) > 0 {
		t.Errorf("/metrics lacks %q", missing)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run = %v, want nil after a clean drain", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the worker did not stop")
	}
	if !strings.Contains(out.String(), `"msg":"worker exiting"`) {
		t.Error("no clean exit logged")
	}
	if status, _ := get(t, "http://"+metricsAddr+"/healthz"); status != 0 {
		t.Errorf("/healthz still answers %d after the worker stopped", status)
	}
}

// accountEvents reads an account's whole log as "<type> <order id>" (a
// balance's asset for a balance), checking the sequence is gapless, no event
// comes twice, and every event carries its resource.
func accountEvents(t testing.TB, queue *emq.Queue, account string) []string {
	t.Helper()
	events, err := queue.ReadLog(context.Background(), account, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var list []string
	for i, event := range events {
		if event.Sequence != int64(i+1) || seen[event.ID] {
			t.Fatalf("%s: event %d is %+v: a gap or a second %s", account, i+1, event, event.ID)
		}
		seen[event.ID] = true
		var data map[string]any
		if err := json.Unmarshal(event.Data, &data); err != nil {
			t.Fatalf("%s: event %s carries %s: %v", account, event.ID, event.Data, err)
		}
		subject, _ := data["id"].(string)
		switch orders.EventType(event.Type) {
		case orders.EventFill:
			subject, _ = data["order_id"].(string)
		case orders.EventBalance:
			subject, _ = data["asset"].(string)
		default:
			if status, _ := data["status"].(string); event.Type != string(orders.EventOrderAccepted) && orders.OrderEventType(orders.Status(status)) != orders.EventType(event.Type) {
				t.Errorf("%s: event %s of type %s carries an order %s", account, event.ID, event.Type, status)
			}
		}
		list = append(list, event.Type+" "+subject)
	}
	return list
}

// containsInOrder reports whether want's events are all in got, each
// order's in want's order.
func containsInOrder(got, want []string) bool {
	at := -1
	for _, w := range want {
		i := slices.Index(got, w)
		if i < 0 {
			return false
		}
		if strings.HasPrefix(w, "order.accepted ") {
			at = i
			continue
		}
		if i < at {
			return false
		}
		at = i
	}
	return true
}
