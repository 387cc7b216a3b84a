package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/testkit/cputime"
)

// BenchmarkPlaceOrder is one admitted order per operation over real HTTP,
// through authentication, the rate limiter (set too high to refuse), the
// decoder, the instrument rules and the admit script. It reports the
// process's CPU an order (cpu-µs/op, client and server; Redis is another
// process) beside the time, which on a shared machine follows the load
// more than the code. Profile it with
//
//	go test -run '^$' -bench PlaceOrder -benchmem -cpuprofile cpu.prof ./gateway/
func BenchmarkPlaceOrder(b *testing.B) {
	f := newFixtureWith(b, 8, unlimited())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	b.Cleanup(client.CloseIdleConnections)
	benchmarkPlacements(b, f, f.url+"/v1/orders", func(req *http.Request) (int, error) {
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode, nil
	})
}

// BenchmarkPlaceOrderHandler is BenchmarkPlaceOrder without the sockets:
// each operation hands a placement straight to the gateway's handler, so
// its allocs/op and cpu-µs/op are the gateway's own work an order (the
// middleware, the decoder, the rules, the admission's client side and the
// access line) with none of net/http's connection handling nor an HTTP
// client's. The request and the answer's writer are built per operation
// (a few allocations of its own); the access lines are formatted and
// discarded.
func BenchmarkPlaceOrderHandler(b *testing.B) {
	config := unlimited()
	f := newFixtureWith(b, 8, config)
	// The access lines go nowhere, formatted as cmd/gateway formats them:
	// the fixture's buffer would grow by each one.
	deps := f.deps
	deps.Logger = slog.New(jsonlog.New(io.Discard, nil))
	server := gateway.New(deps, config)
	benchmarkPlacements(b, f, "/v1/orders", func(req *http.Request) (int, error) {
		w := &discardWriter{header: make(http.Header, 8)}
		server.ServeHTTP(w, req)
		return w.status, nil
	})
}

// unlimited is the gateway's defaults with a rate limit too high to refuse.
func unlimited() gateway.Config {
	config := gateway.DefaultConfig()
	config.RateLimitBurst, config.RateLimitPerSecond = 1_000_000, 1_000_000
	return config
}

// benchmarkPlacements places one order an operation through send, from 8
// goroutines a P, each under one of f's keys, and reports the process's
// CPU an order beside the time. send answers the placement's status.
func benchmarkPlacements(b *testing.B, f *fixture, target string, send func(*http.Request) (int, error)) {
	var sent atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cputime.Process(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := sent.Add(1)
			req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(limitOrder("bench-"+strconv.FormatInt(n, 10))))
			if err != nil {
				b.Error(err)
				return
			}
			req.RemoteAddr = "192.0.2.1:40000" // a handler's caller; a client ignores it
			req.Header.Set("Authorization", "Bearer "+f.keys[n%int64(len(f.keys))])
			req.Header.Set("Content-Type", "application/json")
			status, err := send(req)
			if err != nil {
				b.Error(err)
				return
			}
			if status != http.StatusAccepted {
				b.Errorf("status %d, want 202", status)
				return
			}
		}
	})
	b.ReportMetric(float64((cputime.Process(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
}

// discardWriter is an http.ResponseWriter that keeps the status only.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(status int) { w.status = status }

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
