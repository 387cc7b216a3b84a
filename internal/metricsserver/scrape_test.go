package metricsserver

import (
	"context"
	"log/slog"
	"maps"
	"net/http"
	"testing"

	"github.com/ordergate/ordergate/testkit/testserver"
	"github.com/prometheus/client_golang/prometheus"
)

// TestCounters reads counters back as Serve serves them: summed over the
// series whose labels match, and a name with no such series absent.
func TestCounters(t *testing.T) {
	registry := prometheus.NewRegistry()
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jobs_total", Help: "Jobs."}, []string{"queue"})
	quiet := prometheus.NewCounter(prometheus.CounterOpts{Name: "quiet_total", Help: "Never counted."})
	registry.MustRegister(jobs, quiet)
	jobs.WithLabelValues("orders.BTC-USD").Add(3)
	jobs.WithLabelValues("orders.ETH-USD").Add(4)
	jobs.WithLabelValues("limits.0").Add(5)
	addr := testserver.FreeAddr(t)
	stop, err := Serve(addr, registry, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	url := "http://" + addr + "/metrics"
	for _, tt := range []struct {
		name  string
		label string
		names []string
		want  map[string]float64
	}{
		{name: "every series", names: []string{"jobs_total"}, want: map[string]float64{"jobs_total": 12}},
		{name: "the series a label matches", label: `queue="orders.`, names: []string{"jobs_total"}, want: map[string]float64{"jobs_total": 7}},
		{name: "a counter at zero is there", names: []string{"quiet_total"}, want: map[string]float64{"quiet_total": 0}},
		{name: "a name with no series is not", names: []string{"renamed_total"}, want: map[string]float64{}},
		{name: "a label no series has", label: `queue="nowhere"`, names: []string{"jobs_total"}, want: map[string]float64{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Counters(context.Background(), http.DefaultClient, url, tt.label, tt.names...)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("Counters(%q, %v) = %v, want %v", tt.label, tt.names, got, tt.want)
			}
		})
	}
}
