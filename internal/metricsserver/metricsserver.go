// Package metricsserver serves a process's operational endpoints, /metrics
// (Prometheus) and /healthz, on a listener of their own: apart from the
// public API, so the port can stay off the public network. The gateway and
// the worker each run one on their METRICS_ADDR.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownTimeout bounds how long stop waits for scrapes in flight.
const shutdownTimeout = 2 * time.Second

// Serve serves GET /metrics (registry's series) and GET /healthz on addr
// until the returned stop is called; an empty addr serves nothing. A port
// that cannot be listened on is an error now, not a log line later. Once
// listening it logs "metrics listening" with the address bound: given port
// 0, the port chosen (scripts/run.sh reads it from there). stop waits up to
// 2 s for scrapes in flight.
func Serve(addr string, registry *prometheus.Registry, logger *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	logger.Info("metrics listening", "addr", listener.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := server.Shutdown(ctx); err != nil {
			logger.Warn("metrics server shutdown", "err", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics server stopped", "err", err)
		}
	}, nil
}
