package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func envOf(values map[string]string) func(string) string {
	return func(name string) string { return values[name] }
}

func TestParseConfig(t *testing.T) {
	defaults := config{
		redisURL: "redis://127.0.0.1:6379/0", concurrency: 8, lease: 30 * time.Second, maxAttempts: 10,
		drainTimeout: 10 * time.Second, metricsAddr: "127.0.0.1:9091", logLevel: slog.LevelInfo,
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
				"METRICS_ADDR": ":9100", "LOG_LEVEL": "debug",
			},
			want: func(c *config) {
				c.redisURL, c.concurrency, c.batch, c.lease = "redis://queue:6379/1", 32, 16, 45*time.Second
				c.maxAttempts, c.drainTimeout, c.metricsAddr, c.logLevel = 5, 20*time.Second, ":9100", slog.LevelDebug
			},
		},
		{
			name: "flags win over the environment",
			env:  map[string]string{"WORKER_CONCURRENCY": "32", "WORKER_LEASE": "45s"},
			args: []string{"-concurrency", "4", "-lease", "2s", "-metrics-addr", ""},
			want: func(c *config) { c.concurrency, c.lease, c.metricsAddr = 4, 2*time.Second, "" },
		},
		{name: "unparsable duration", env: map[string]string{"WORKER_LEASE": "30"}, wantErr: `WORKER_LEASE="30"`},
		{name: "unparsable integer", env: map[string]string{"WORKER_CONCURRENCY": "many"}, wantErr: `WORKER_CONCURRENCY="many"`},
		{name: "unknown log level", env: map[string]string{"LOG_LEVEL": "loud"}, wantErr: `LOG_LEVEL="loud"`},
		{name: "no concurrency", args: []string{"-concurrency", "0"}, wantErr: "concurrency 0"},
		{name: "lease too short", env: map[string]string{"WORKER_LEASE": "100ms"}, wantErr: "lease 100ms"},
		{name: "no attempts", env: map[string]string{"WORKER_MAX_ATTEMPTS": "0"}, wantErr: "max attempts 0"},
		{name: "stray argument", args: []string{"now"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			got, err := parseConfig(append([]string{"worker"}, tt.args...), envOf(tt.env), &out)
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
			if got != want {
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
	for _, name := range []string{"REDIS_URL", "WORKER_CONCURRENCY", "WORKER_BATCH", "WORKER_LEASE",
		"WORKER_MAX_ATTEMPTS", "WORKER_DRAIN_TIMEOUT", "METRICS_ADDR", "LOG_LEVEL"} {
		if !strings.Contains(out.String(), "("+name+")") {
			t.Errorf("usage does not document %s:\n%s", name, out.String())
		}
	}
}

func TestWorkerRefusesAnotherProtocolVersion(t *testing.T) {
	redisServer := testserver.StartRedis(t)
	redisServer.Client(t).Set(context.Background(), "{emq}:version", "echomq:1.0.0", 0)
	var out bytes.Buffer
	err := run(context.Background(), []string{"worker"}, envOf(map[string]string{
		"REDIS_URL": redisServer.URL(), "METRICS_ADDR": "",
	}), &out)
	if err == nil || !strings.Contains(err.Error(), "echomq:1.0.0") {
		t.Fatalf("run = %v, want a refusal naming the foreign version", err)
	}
}

// syncBuffer is the worker's stdout, written by its goroutines while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return listener.Addr().String()
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

// TestWorkerAcceptsOrders runs the worker as main does: it accepts an order,
// buries a job that is no order, serves its metrics and drains on cancel.
func TestWorkerAcceptsOrders(t *testing.T) {
	redisServer := testserver.StartRedis(t)
	metricsAddr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"worker", "-lease", "2s"}, envOf(map[string]string{
			"REDIS_URL": redisServer.URL(), "METRICS_ADDR": metricsAddr,
		}), &out)
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker output:\n%s", out.String())
		}
	})
	waitUntil(t, 10*time.Second, "/healthz answers 200", func() bool {
		status, _ := get(t, "http://"+metricsAddr+"/healthz")
		return status == http.StatusOK
	})

	client, err := emq.Connect(context.Background(), redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue(orders.Queue)
	price := decimal.MustParse("50000.00")
	order := orders.Order{
		ID: orders.NewOrderID(), ClientOrderID: "c-1", Account: "ACC_TEST", Symbol: "BTC-USD",
		Side: orders.Buy, Type: orders.Limit, Quantity: decimal.MustParse("0.01000"), Price: &price,
		Status: orders.StatusPending, CreatedAt: time.Now().UTC(),
	}
	payload, err := json.Marshal(order)
	if err != nil {
		t.Fatal(err)
	}
	broken := orders.NewOrderID()
	for _, job := range []emq.Job{
		{ID: order.ID, Kind: orders.KindPlace, Group: order.Account, Payload: payload},
		{ID: broken, Kind: orders.KindPlace, Group: order.Account, Payload: []byte("{not json")},
	} {
		if _, err := queue.Admit(context.Background(), job); err != nil {
			t.Fatalf("admit %s: %v", job.ID, err)
		}
	}
	stateOf := func(id string) string {
		info, err := queue.Job(context.Background(), id)
		if err != nil {
			return err.Error()
		}
		return info.State
	}
	waitUntil(t, 10*time.Second, "the order done and the broken job dead", func() bool {
		return stateOf(order.ID) == emq.StateDone && stateOf(broken) == emq.StateDead
	})
	if accepted := fmt.Sprintf(`"msg":"order accepted","queue":"orders","order_id":%q`, order.ID); !strings.Contains(out.String(), accepted) {
		t.Errorf("no %s in the log", accepted)
	}
	if info, _ := queue.Job(context.Background(), broken); !strings.Contains(info.LastError, "decode order") || info.Attempts != 1 {
		t.Errorf("broken job: attempts %d, last error %q; want dead on its first attempt with the decode error", info.Attempts, info.LastError)
	}
	if strings.Contains(out.String(), "BTC-USD") || strings.Contains(out.String(), "not json") {
		t.Error("a payload made it into the log")
	}

	// The counters move once the queue's answer is back, a moment after the
	// jobs show their states.
	var missing []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		status, body := get(t, "http://"+metricsAddr+"/metrics")
		missing = missing[:0]
		for _, series := range []string{
			`emq_jobs_claimed_total{queue="orders"} 2`,
			`emq_jobs_completed_total{queue="orders"} 1`,
			`emq_jobs_dead_total{queue="orders"} 1`,
			`emq_claim_to_complete_seconds_count{queue="orders"} 1`,
			`emq_pending_jobs{queue="orders"}`,
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
