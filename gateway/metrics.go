package gateway

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// unmatchedRoute labels requests for paths no route serves, so that scans of
// random paths cannot mint a series each.
const unmatchedRoute = "unmatched"

// metrics are the gateway's Prometheus series. Requests are labelled by route
// pattern (/v1/orders/:id), never by raw path, for the same reason.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	admitted prometheus.Counter
	replayed prometheus.Counter
	refused  *prometheus.CounterVec
	// rateLimited counts requests refused with 429; rateLimitFailOpen those
	// let through because the limiter's store did not answer.
	rateLimited       prometheus.Counter
	rateLimitFailOpen prometheus.Counter
	// streams are the event streams open, eventsSent the events they sent,
	// slowStreams those dropped for reading too slowly.
	streams     prometheus.Gauge
	eventsSent  prometheus.Counter
	slowStreams prometheus.Counter
	// refusalsUnlogged counts the refusals left out of the access log
	// (refusalLog).
	refusalsUnlogged prometheus.Counter
	// streamsEnded counts the streams ended for their key (revoked, or
	// without the read scope), by the problem a request would now get;
	// streamsRefused those refused for a cap, by cap.
	streamsEnded   *prometheus.CounterVec
	streamsRefused *prometheus.CounterVec
	// admissions are the series every admitted placement adds to, found
	// once rather than by their labels on each (admissionSeries).
	admissions     sync.Once
	admittedCount  prometheus.Counter
	admissionTimes prometheus.Observer
}

// newMetrics registers the gateway's series on registry; one registry backs
// one Server.
func newMetrics(registry *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "Time from receiving a request to having answered it, by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		admitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orders_admitted_total",
			Help: "Orders admitted onto the queue as new (placeOrder answered 202).",
		}),
		replayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "orders_replayed_total",
			Help: "Order placements that repeated an earlier identical request (placeOrder answered 200).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orders_refused_total",
			Help: "Order placements answered with an error, by HTTP status: a 4xx admitted nothing; a 5xx may have admitted the order (a 503 not replicated, a lost reply), which the client's retry then finds as a replay.",
		}, []string{"status"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rate_limited_total",
			Help: "Requests refused with 429 because their API key's rate-limit bucket was empty.",
		}),
		rateLimitFailOpen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rate_limit_fail_open_total",
			Help: "Requests let through unlimited because the rate limiter's store (Redis) did not answer.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "event_streams_open",
			Help: "Event streams (GET /v1/events) open now.",
		}),
		eventsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "events_sent_total",
			Help: "Events sent on event streams.",
		}),
		slowStreams: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "event_streams_slow_dropped_total",
			Help: "Event streams ended because their client read more slowly than its events came, by a whole buffer.",
		}),
		refusalsUnlogged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "access_log_refusals_unlogged_total",
			Help: "Refused requests (4xx) without an access log line: each client address's first refusal in a second is logged, the rest of that second counted here and summarized in one line (refusals not logged).",
		}),
		streamsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "event_streams_key_ended_total",
			Help: "Event streams ended because their API key was revoked (problem unauthorized) or lost the read scope (forbidden).",
		}, []string{"problem"}),
		streamsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "event_streams_refused_total",
			Help: "Event streams refused 429 too-many-streams, by the cap they met (key, address).",
		}, []string{"cap"}),
	}
	registry.MustRegister(m.requests, m.duration, m.admitted, m.replayed, m.refused, m.rateLimited, m.rateLimitFailOpen,
		m.streams, m.eventsSent, m.slowStreams, m.refusalsUnlogged, m.streamsEnded, m.streamsRefused)
	return m
}

// measure records every answer once it is written. It wraps observe, which
// turns errors into problem answers, so the status it reads is the one sent.
func (s *Server) measure(c echo.Context, next echo.HandlerFunc) error {
	start := time.Now()
	err := s.observe(c, next)
	route := c.Path()
	if _, known := s.routes[route]; !known {
		route = unmatchedRoute
	}
	method := methodLabel(c.Request().Method)
	status := c.Response().Status
	placement := route == placeOrderRoute && method == http.MethodPost
	var requests prometheus.Counter
	var times prometheus.Observer
	if placement && status == http.StatusAccepted {
		requests, times = s.metrics.admissionSeries()
	} else {
		requests = s.metrics.requests.WithLabelValues(route, method, strconv.Itoa(status))
		times = s.metrics.duration.WithLabelValues(route, method)
	}
	requests.Inc()
	times.Observe(time.Since(start).Seconds())
	if placement {
		s.metrics.countPlacement(status)
	}
	return err
}

// admissionSeries are the request count and duration of admitted
// placements (POST /v1/orders answered 202), the most frequent answer:
// the series' labels are looked up once.
func (m *metrics) admissionSeries() (prometheus.Counter, prometheus.Observer) {
	m.admissions.Do(func() {
		m.admittedCount = m.requests.WithLabelValues(placeOrderRoute, http.MethodPost, strconv.Itoa(http.StatusAccepted))
		m.admissionTimes = m.duration.WithLabelValues(placeOrderRoute, http.MethodPost)
	})
	return m.admittedCount, m.admissionTimes
}

// countPlacement reads the outcome of a placement from its status, which the
// contract defines (202 new, 200 replay), so the counts cannot disagree with
// what clients were told.
func (m *metrics) countPlacement(status int) {
	switch status {
	case http.StatusAccepted:
		m.admitted.Inc()
	case http.StatusOK:
		m.replayed.Inc()
	default:
		m.refused.WithLabelValues(strconv.Itoa(status)).Inc()
	}
}

// methodLabel keeps the method label to the methods HTTP defines: a client
// may send any permit as a method.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}
