package metricsserver

import (
	"io"
	"log/slog"
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
