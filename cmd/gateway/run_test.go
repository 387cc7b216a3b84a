package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/logbuffer"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func envOf(values map[string]string) func(string) string {
	return func(name string) string { return values[name] }
}

func TestGatewayRefusesAnotherProtocolVersion(t *testing.T) {
	redisServer := testserver.StartRedis(t)
	redisServer.Client(t).Set(context.Background(), "{emq}:version", "echomq:1.0.0", 0)
	database := testserver.Postgres(t)
	var out bytes.Buffer
	err := run(context.Background(), []string{"gateway"}, envOf(map[string]string{
		"REDIS_URL": redisServer.URL(), "DATABASE_URL": database.URL, "GATEWAY_ADDR": "127.0.0.1:0",
	}), &out)
	if err == nil {
		t.Fatal("the gateway started against a foreign protocol version")
	}
	for _, version := range []string{"echomq:1.0.0", emq.ProtocolVersion} {
		if !strings.Contains(err.Error(), version) {
			t.Errorf("error %q does not name %s", err, version)
		}
	}
}

func TestGatewayServesAndShutsDown(t *testing.T) {
	redisServer := testserver.StartRedis(t)
	database := testserver.Postgres(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out logbuffer.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"gateway"}, envOf(map[string]string{
			"REDIS_URL": redisServer.URL(), "DATABASE_URL": database.URL, "GATEWAY_ADDR": addr,
			"DEDUP_RETENTION": "2h",
		}), &out)
	}()
	ready := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(50 * time.Millisecond) {
		res, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			res.Body.Close()
			ready = res.StatusCode == http.StatusOK
		}
	}
	if !ready {
		cancel()
		t.Fatalf("gateway never became ready: %v\n%s", <-done, out.String())
	}
	// DEDUP_RETENTION is the orders queue's, stored with it.
	queues, err := emq.Connect(ctx, redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if retention, err := queues.Queue(orders.Queue).DedupRetention(ctx); err != nil || retention != 2*time.Hour {
		t.Errorf("orders queue's dedup retention = %v, %v; want DEDUP_RETENTION's 2h", retention, err)
	}
	balances := queues.Queue(coherence.Queue(placement.BalancesTable))
	if retention, err := balances.DedupRetention(ctx); err != nil || retention != placement.CoherenceDedupRetention {
		t.Errorf("balances coherence queue's dedup retention = %v, %v; want %v", retention, err, placement.CoherenceDedupRetention)
	}
	// Every reader is wired: an authenticated read of the fills answers.
	accounts := postgres.NewAccounts(database.Pool(t))
	account, err := accounts.Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := accounts.IssueKey(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/fills", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	fills, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(fills.Body)
	fills.Body.Close()
	if fills.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"fills":[]}` {
		t.Errorf("GET /v1/fills: %d %s, want an empty list", fills.StatusCode, body)
	}
	scrape, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(scrape.Body)
	scrape.Body.Close()
	for _, series := range []string{"http_requests_total", "api_key_stale_answers_total", "go_goroutines", "process_open_fds"} {
		if scrape.StatusCode != http.StatusOK || !strings.Contains(string(metrics), "\n"+series) {
			t.Errorf("GET /metrics: %d, no %s series", scrape.StatusCode, series)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not stop")
	}
	if !strings.Contains(out.String(), `"msg":"gateway stopped"`) {
		t.Errorf("no clean stop logged:\n%s", out.String())
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close()
	return fmt.Sprint(listener.Addr())
}
