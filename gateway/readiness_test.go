package gateway_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/gateway"
)

// readyWithin asks /readyz until it answers status, for at most 3 s (its
// answer is cached for a fraction of a second), and returns the last answer.
func (f *fixture) readyWithin(t testing.TB, status int) response {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		res := f.do(t, f.http, http.MethodGet, "/readyz", "", "", "")
		if res.status == status || time.Now().After(deadline) {
			return res
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadinessRunsItsProbesAFewTimesASecond: /readyz is public, and each
// run of its probes costs Redis a PING and a fence check and PostgreSQL a
// ping; however many clients ask at once, the probes run at most a few
// times a second (every 250 ms at most), each answer served from the last
// run.
func TestReadinessRunsItsProbesAFewTimesASecond(t *testing.T) {
	f := newFixture(t, 0)
	deps := f.deps
	deps.Metrics = prometheus.NewRegistry()
	runs := make([]atomic.Int64, len(deps.Probes))
	deps.Probes = nil
	for i, probe := range f.deps.Probes {
		deps.Probes = append(deps.Probes, gateway.Probe{Name: probe.Name, Check: func(ctx context.Context) error {
			runs[i].Add(1)
			return probe.Check(ctx)
		}})
	}
	handler := gateway.New(deps, f.config)
	const clients, each = 8, 10
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			client := clientAt(t, handler, "192.0.2."+string(rune('1'+c))+":4000")
			for range each {
				if res := f.do(t, client, http.MethodGet, "/readyz", "", "", ""); res.status != http.StatusOK {
					t.Errorf("readyz: %d %s", res.status, res.body)
					return
				}
			}
		})
	}
	wg.Wait()
	most := 2 + int64(time.Since(start)/(250*time.Millisecond))
	for i := range runs {
		if got := runs[i].Load(); got < 1 || got > most {
			t.Errorf("probe %s ran %d times for %d answers in %v, want 1 to %d", deps.Probes[i].Name, got, clients*each, time.Since(start), most)
		}
	}
}
