package metricsserver

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
	"github.com/prometheus/client_golang/prometheus"
)

func TestServeAndStop(t *testing.T) {
	registry := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "Things."})
	registry.MustRegister(counter)
	counter.Add(3)
	addr := testserver.FreeAddr(t)
	stop, err := Serve(addr, registry, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	if status, body := get(t, "http://"+addr+"/metrics"); status != http.StatusOK || !strings.Contains(body, "\nthings_total 3\n") {
		t.Errorf("GET /metrics: %d %q, want things_total 3", status, body)
	}
	if status, body := get(t, "http://"+addr+"/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz: %d %q", status, body)
	}
	if status, _ := get(t, "http://"+addr+"/v1/orders"); status != http.StatusNotFound {
		t.Errorf("GET /v1/orders: %d, want 404: the listener serves nothing else", status)
	}
	// A second listener on the same port is refused at once.
	if _, err := Serve(addr, registry, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "metrics listener") {
		t.Errorf("a second Serve on %s: %v, want a metrics listener error", addr, err)
	}
	stop()
	stopped = true
	if _, err := http.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("the listener still answers after stop")
	}
}

// TestServeLogsThePortBound: given port 0, the log names the port the
// kernel chose, not ":0", so whoever started the process (scripts/run.sh
// reads its "metrics listening" line) can find the listener.
func TestServeLogsThePortBound(t *testing.T) {
	var out bytes.Buffer
	stop, err := Serve("127.0.0.1:0", prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&out, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	var line struct{ Msg, Addr string }
	if err := json.Unmarshal(out.Bytes(), &line); err != nil || line.Msg != "metrics listening" {
		t.Fatalf("log %q (%v), want one metrics listening line", out.String(), err)
	}
	if _, port, err := net.SplitHostPort(line.Addr); err != nil || port == "0" {
		t.Fatalf("logged addr %q, want the port bound", line.Addr)
	}
	if status, body := get(t, "http://"+line.Addr+"/healthz"); status != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz on the logged %s: %d %q", line.Addr, status, body)
	}
}

func TestEmptyAddressServesNothing(t *testing.T) {
	stop, err := Serve("", prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stop()
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}
