package main

import (
	"bufio"
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

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/logbuffer"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

func envOf(values map[string]string) func(string) string {
	return func(name string) string { return values[name] }
}

func TestGatewayRefusesAnotherProtocolVersion(t *testing.T) {
	redisServer := testserver.QueueRedisServer(t)
	redisServer.Client(t).Set(context.Background(), "{emq}:version", "echomq:1.0.0", 0)
	database := testserver.Postgres(t)
	var out bytes.Buffer
	err := run(context.Background(), []string{"gateway"}, envOf(map[string]string{
		"REDIS_URL": redisServer.URL(), "DATABASE_URL": database.URL, "GATEWAY_ADDR": "127.0.0.1:0", "METRICS_ADDR": "",
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

// TestGatewayServesAndShutsDown runs the gateway as main does: the API on
// GATEWAY_ADDR, its metrics on METRICS_ADDR and not on the API, and a
// shutdown that drains a request in flight while the metrics still answer.
func TestGatewayServesAndShutsDown(t *testing.T) {
	redisServer := testserver.QueueRedisServer(t)
	database := testserver.Postgres(t)
	addr, metricsAddr := testserver.FreeAddr(t), testserver.FreeAddr(t)
	ctx := context.Background()
	gateway := runGateway(t, map[string]string{
		"REDIS_URL": redisServer.URL(), "DATABASE_URL": database.URL, "GATEWAY_ADDR": addr,
		"METRICS_ADDR": metricsAddr, "DEDUP_RETENTION": "2h",
	})
	out := gateway.out
	// DEDUP_RETENTION is each instrument queue's, stored with it.
	queues, err := emq.Connect(ctx, redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if retention, err := queues.Queue(orders.InstrumentQueue("BTC-USD")).DedupRetention(ctx); err != nil || retention != 2*time.Hour {
		t.Errorf("BTC-USD's queue's dedup retention = %v, %v; want DEDUP_RETENTION's 2h", retention, err)
	}
	balances := queues.Queue(placement.CoherenceQueues(placement.BalancesTable)[0])
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
	// An event stream is open when the signal comes: the shutdown ends it
	// rather than waits for it.
	req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	streamed := bufio.NewReader(stream.Body)
	if line, err := streamed.ReadString('\n'); stream.StatusCode != http.StatusOK || line != "id: 0\n" {
		t.Fatalf("GET /v1/events: %d, first line %q, %v", stream.StatusCode, line, err)
	}
	status, metrics := get(t, "http://"+metricsAddr+"/metrics")
	for _, series := range []string{"http_requests_total", "api_key_stale_answers_total", "api_key_lookups_total", "event_streams_open", "go_goroutines", "process_open_fds"} {
		if status != http.StatusOK || !strings.Contains(metrics, "\n"+series) {
			t.Errorf("GET /metrics on METRICS_ADDR: %d, no %s series", status, series)
		}
	}
	// The local copy of Redis reads is refused on a cluster (trackedCaches),
	// and with it its series.
	for _, series := range []string{"coherence_tracking_hits_total", "coherence_tracking_flushes_total"} {
		if tracked := strings.Contains(metrics, "\n"+series); tracked == testserver.ClusterMode() {
			t.Errorf("GET /metrics on METRICS_ADDR: %s series present %v on a cluster %v; want it only on a single server",
				series, tracked, testserver.ClusterMode())
		}
	}
	if status, body := get(t, "http://"+metricsAddr+"/healthz"); status != http.StatusOK {
		t.Errorf("GET /healthz on METRICS_ADDR: %d %s", status, body)
	}
	// The API's listener serves no metrics: /metrics is a path it does not
	// have, answered as any other.
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/problem+json" ||
		strings.Contains(string(body), "go_goroutines") {
		t.Errorf("GET /metrics on GATEWAY_ADDR: %d %q %s, want a 404 problem", res.StatusCode, res.Header.Get("Content-Type"), body)
	}

	// A request in flight when the signal comes: a placement whose handler
	// waits for its body (it asked for it: 100 Continue). The shutdown waits
	// for it, and the metrics answer meanwhile.
	order := `{"client_order_id":"drain-1","symbol":"BTC-USD","side":"buy","type":"limit","quantity":"0.01000","price":"50000.00"}`
	inFlight, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer inFlight.Close()
	head := fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", key, len(order))
	if _, err := io.WriteString(inFlight, head); err != nil {
		t.Fatal(err)
	}
	answers := bufio.NewReader(inFlight)
	if proceed, err := http.ReadResponse(answers, nil); err != nil || proceed.StatusCode != http.StatusContinue {
		t.Fatalf("the placement's handler did not ask for its body: %v", err)
	}
	gateway.cancel()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), `"msg":"gateway shutting down"`); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no shutdown logged:\n%s", out.String())
		}
	}
	if status, _ := get(t, "http://"+metricsAddr+"/metrics"); status != http.StatusOK {
		t.Errorf("GET /metrics during the drain: %d, want 200", status)
	}
	select {
	case <-gateway.stopped:
		t.Fatalf("run returned %v with a request in flight", gateway.err)
	default:
	}
	if _, err := io.WriteString(inFlight, order); err != nil {
		t.Fatal(err)
	}
	answer, err := http.ReadResponse(answers, nil)
	if err != nil {
		t.Fatalf("the request in flight got no answer: %v", err)
	}
	answer.Body.Close()
	if answer.StatusCode != http.StatusAccepted {
		t.Errorf("the placement in flight: %d, want 202", answer.StatusCode)
	}
	select {
	case <-gateway.stopped:
		if gateway.err != nil {
			t.Fatalf("run: %v", gateway.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not stop")
	}
	if !strings.Contains(out.String(), `"msg":"gateway stopped"`) {
		t.Errorf("no clean stop logged:\n%s", out.String())
	}
	if rest, err := io.ReadAll(streamed); err != nil || strings.Contains(string(rest), "data:") {
		t.Errorf("the event stream after the shutdown: %q, %v; want its end", rest, err)
	}
	if conn, err := net.Dial("tcp", metricsAddr); err == nil {
		conn.Close()
		t.Error("the metrics listener outlives run")
	}
}

// runningGateway is a gateway run as main runs it.
type runningGateway struct {
	out *logbuffer.Buffer
	// cancel is the signal to stop; stopped is closed when run returned
	// err.
	cancel  context.CancelFunc
	stopped chan struct{}
	err     error
}

// runGateway runs the gateway as main does, with env and
// LOG_FLUSH_INTERVAL 0, and returns once /readyz answers 200 on its
// GATEWAY_ADDR. Cleanup stops it.
func runGateway(t testing.TB, env map[string]string) *runningGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	g := &runningGateway{out: &logbuffer.Buffer{}, cancel: cancel, stopped: make(chan struct{})}
	env["LOG_FLUSH_INTERVAL"] = "0"
	go func() {
		defer close(g.stopped)
		g.err = run(ctx, []string{"gateway"}, envOf(env), g.out)
	}()
	t.Cleanup(func() {
		cancel()
		<-g.stopped
	})
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		res, err := http.Get("http://" + env["GATEWAY_ADDR"] + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return g
			}
		}
	}
	cancel()
	<-g.stopped
	t.Fatalf("gateway never became ready: %v\n%s", g.err, g.out.String())
	return nil
}

// get answers a plain GET's status and body, outside the API contract.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}
