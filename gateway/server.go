// Package gateway is the HTTP face of the exchange: it authenticates callers,
// turns untrusted order requests into typed place commands, admits them through
// package orders, and answers every failure as RFC 9457 problem+json.
package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-playground/validator/v10"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

// Config tunes the HTTP layer.
type Config struct {
	// BodyLimit is the largest request body taken, in bytes.
	BodyLimit int64
	// RequestTimeout bounds the work behind one request, so a dependency that
	// hangs turns into a 503 instead of a hung client.
	RequestTimeout time.Duration
	// RateLimitBurst is how many requests one API key may make at once (the
	// rate-limit bucket's capacity); 0 turns rate limiting off. The buckets live
	// with the orders queue (Placer.TakePermit), so placements take their
	// permit in the admission.
	RateLimitBurst int
	// RateLimitPerSecond is how many requests a second one API key may make
	// sustained (the bucket's refill rate).
	RateLimitPerSecond int
	// SignatureSkew is how far from the gateway's clock, either way, a
	// signed request's timestamp may be. Its signature is remembered three
	// times as long, which covers every moment it is acceptable to
	// any gateway whose clock is within the skew of this one's.
	SignatureSkew time.Duration
	// EventHeartbeat is how long an event stream may be silent: a comment
	// then tells the client, and any proxy between, that it is alive.
	EventHeartbeat time.Duration
	// EventStreamsPerKey and EventStreamsPerAddress cap the event streams
	// open at once per API key and per client address, across the
	// gateways on one Redis (Deps.StreamSeats); 0 leaves one uncapped.
	EventStreamsPerKey, EventStreamsPerAddress int
}

// MaxSignatureSkew bounds Config.SignatureSkew. A wider skew is
// longer for a request caught on the wire to be sent after its signer
// meant it to go, or for a client's clock to go wrong unnoticed; a minute
// covers clocks that are kept in time at all.
const MaxSignatureSkew = time.Minute

// The default caps of the event streams open at once: a client needs one
// stream per key, a few while it reconnects; an address may hold several
// clients (a few keys each, or a small office behind one address).
const (
	DefaultEventStreamsPerKey     = 8
	DefaultEventStreamsPerAddress = 32
)

// DefaultConfig is what the gateway runs with unless told otherwise.
func DefaultConfig() Config {
	return Config{BodyLimit: 16 << 10, RequestTimeout: 5 * time.Second, RateLimitBurst: 100, RateLimitPerSecond: 50,
		SignatureSkew: 5 * time.Second, EventHeartbeat: 15 * time.Second,
		EventStreamsPerKey: DefaultEventStreamsPerKey, EventStreamsPerAddress: DefaultEventStreamsPerAddress}
}

// Validate reports a configuration the gateway would run badly with: a body
// limit or a request timeout that refuses every request, a signature
// skew out of bounds, or a rate limit
// whose bucket cannot refill (placements would answer 503 while reads went
// through).
func (c Config) Validate() error {
	const most = placement.MaxBucketSize
	switch b, r := c.RateLimitBurst, c.RateLimitPerSecond; {
	case c.BodyLimit < 1:
		return fmt.Errorf("body limit %d: want at least 1 byte", c.BodyLimit)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request timeout %s: want a positive duration", c.RequestTimeout)
	case c.SignatureSkew <= 0 || c.SignatureSkew > MaxSignatureSkew:
		return fmt.Errorf("signature skew %s: want a positive duration of at most %s", c.SignatureSkew, MaxSignatureSkew)
	case c.EventHeartbeat <= 0:
		return fmt.Errorf("event heartbeat %s: want a positive duration", c.EventHeartbeat)
	case c.EventStreamsPerKey < 0 || c.EventStreamsPerKey > placement.MaxStreamsPerLimit ||
		c.EventStreamsPerAddress < 0 || c.EventStreamsPerAddress > placement.MaxStreamsPerLimit:
		return fmt.Errorf("event streams per key %d and per address %d: want whole numbers from 0 (no cap) to %d",
			c.EventStreamsPerKey, c.EventStreamsPerAddress, placement.MaxStreamsPerLimit)
	case b < 0 || b > most || (b > 0 && (r < 1 || r > most)):
		return fmt.Errorf("rate limit: burst %d and per-second %d must be whole numbers from 1 to %d (burst 0 turns the limit off)", b, r, most)
	}
	return nil
}

// Authenticator finds what requests with an API key act as
// (placement.KeyCache).
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (orders.Caller, error)
}

// SignatureRecord remembers the signatures of signed requests, so each is
// accepted once (placement.Signatures).
type SignatureRecord interface {
	// FirstUse records the signature of the API key whose SHA-256 starts
	// with digest for ttl, and reports whether it was not recorded yet.
	FirstUse(ctx context.Context, digest string, signature []byte, ttl time.Duration) (bool, error)
}

// Probe is one readiness check.
type Probe struct {
	Name  string
	Check func(ctx context.Context) error
}

// Deps are what the gateway serves with.
type Deps struct {
	Placer      *placement.Placer
	Instruments *placement.Instruments
	Accounts    Authenticator
	// Signatures remembers signed requests' signatures; without it, the
	// requests of keys that require signatures are refused.
	Signatures SignatureRecord
	Balances   BalanceReader
	// Depth reads instruments' books (postgres.Book).
	Depth DepthReader
	// Fills reads accounts' fills (postgres.Fills).
	Fills FillReader
	// Events serves accounts' event streams; GET /v1/events is not served
	// without it. Closing it ends the streams, which a server's Shutdown
	// waits for: register its Close with http.Server.RegisterOnShutdown.
	Events *placement.EventStreams
	// StreamSeats caps the event streams open per API key and per client
	// address (Config.EventStreamsPerKey, EventStreamsPerAddress) across
	// gateways; without it nothing is capped.
	StreamSeats *placement.StreamSeats
	Probes      []Probe
	Logger      *slog.Logger
	// Metrics is where the gateway registers its series; a private registry
	// when nil. One registry backs one Server. The gateway does not serve
	// it: /metrics belongs on a listener of its own, off the public network
	// (cmd/gateway's METRICS_ADDR).
	Metrics *prometheus.Registry
}

// Server is the gateway's HTTP handler.
type Server struct {
	echo        *echo.Echo
	config      Config
	placer      *placement.Placer
	instruments *placement.Instruments
	// rereadWarnings keeps a failing reread of the instruments from logging
	// once per request.
	rereadWarnings outage.Sparse
	accounts       Authenticator
	signatures     SignatureRecord
	keys           KeyRecognizer
	balances       BalanceReader
	depth          DepthReader
	fills          FillReader
	events         *placement.EventStreams
	streamSeats    *placement.StreamSeats
	// streams follows the open event streams, by API key.
	streams  streamRegistry
	probes   []Probe
	logger   *slog.Logger
	validate *validator.Validate
	metrics  *metrics
	// routes holds the registered route patterns and their methods, for the
	// metrics' route label and the answer to any other method.
	routes map[string]route
	// limitText is RateLimit-Limit's value, the same on every answer.
	limitText string
	// unverifiableLogs keeps the requests of a signed key this gateway
	// cannot verify from logging once each.
	unverifiableLogs outage.Sparse
	// ready holds the readiness probes' last answer.
	ready readinessCache
	// refusals decides which refusals have an access log line.
	refusals *refusalLog
}

// placeOrderRoute is the route placements arrive on.
const placeOrderRoute = "/v1/orders"

// New builds the gateway's routes. It panics on a config Validate refuses:
// check one that comes from outside first.
func New(deps Deps, config Config) *Server {
	if err := config.Validate(); err != nil {
		panic("gateway: " + err.Error())
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Metrics == nil {
		deps.Metrics = prometheus.NewRegistry()
	}
	s := &Server{
		echo:        echo.New(),
		config:      config,
		placer:      deps.Placer,
		instruments: deps.Instruments,
		accounts:    deps.Accounts,
		signatures:  deps.Signatures,
		balances:    deps.Balances,
		depth:       deps.Depth,
		fills:       deps.Fills,
		events:      deps.Events,
		streamSeats: deps.StreamSeats,
		probes:      deps.Probes,
		logger:      deps.Logger,
		validate:    newValidator(),
		metrics:     newMetrics(deps.Metrics),
		routes:      map[string]route{},
		limitText:   strconv.Itoa(config.RateLimitBurst),
	}
	s.refusals = newRefusalLog(s.logger, s.metrics.refusalsUnlogged.Inc)
	s.streams.watch(s, deps.Accounts)
	s.keys, _ = deps.Accounts.(KeyRecognizer)
	e := s.echo
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(s.around)

	// The public routes have no API key: they are limited per client
	// address, one bucket for all of them (rateLimitByAddress).
	e.GET("/healthz", with(s.health, s.rateLimitByAddress))
	e.GET("/readyz", with(s.readiness, s.rateLimitByAddress))
	// Authentication and the rate limit are per route: group middleware would
	// answer a wrong method on a known path with 404 instead of 405. The
	// limit runs after authentication: its buckets are per API key. A
	// placement takes its permit in the admission (placeOrder). A request
	// whose key may cost a lookup is limited before it (lookuplimit.go).
	// Reads need the key's read scope, places and cancels its trade scope.
	read := []echo.MiddlewareFunc{s.authenticate(orders.ScopeRead), s.rateLimit}
	trade := []echo.MiddlewareFunc{s.authenticate(orders.ScopeTrade), s.rateLimit}
	e.POST(placeOrderRoute, with(s.placeOrder, trade[0]))
	e.GET(placeOrderRoute, with(s.listOrders, read...))
	e.GET("/v1/orders/:id", with(s.getOrder, read...))
	e.DELETE("/v1/orders/:id", with(s.cancelOrder, trade...))
	e.DELETE(placeOrderRoute, with(s.cancelAllOrders, trade...))
	e.GET("/v1/balances", with(s.listBalances, read...))
	e.GET("/v1/fills", with(s.listFills, read...))
	if s.events != nil {
		e.GET(eventsRoute, with(s.streamEvents, read...))
	}
	// Public market data: no API key. The instruments come from memory; the
	// book is read from PostgreSQL.
	e.GET("/v1/instruments", with(s.listInstruments, s.rateLimitByAddress))
	e.GET("/v1/instruments/:symbol/book", with(s.getBook, s.rateLimitByAddress))
	for _, r := range e.Routes() {
		methods := s.routes[r.Path].methods
		if methods == nil {
			methods = map[string]bool{}
		}
		methods[r.Method] = true
		s.routes[r.Path] = route{methods: methods, allow: strings.Join(slices.Sorted(maps.Keys(methods)), ", ")}
	}
	return s
}

// route is one route pattern's methods, and its Allow header naming them.
type route struct {
	methods map[string]bool
	allow   string
}

// refuseOtherMethods answers a method the matched route does not serve with a
// 405 problem whose Allow names exactly the methods it does. Echo's own
// answers would list OPTIONS in Allow and answer OPTIONS itself with a 204,
// neither of which the contract has: no route serves OPTIONS (nor HEAD).
// It runs before authentication (route middleware), as Echo's 405 did.
func (s *Server) refuseOtherMethods(c echo.Context, next echo.HandlerFunc) error {
	r, known := s.routes[c.Path()]
	if !known || r.methods[c.Request().Method] {
		return s.deadline(c, next)
	}
	c.Response().Header().Set(echo.HeaderAllow, r.allow)
	return &requestError{kind: kindMethodNotAllowed, detail: "this resource answers " + r.allow + " only (see the Allow header)"}
}

// around is every request's middleware, each step calling the next as a
// method: measure, observe, recoverPanics, refuseOtherMethods, deadline.
// Echo builds a request's middleware chain anew for each request, a
// closure a middleware; as one middleware the chain is one closure.
func (s *Server) around(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error { return s.measure(&requestContext{Context: c}, next) }
}

// with is h behind the route middleware m, the first outermost, as Echo
// would apply them. Composed once here: Echo's own route middleware is
// applied anew on each request, a closure a middleware.
func with(h echo.HandlerFunc, m ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(m) - 1; i >= 0; i-- {
		h = m[i](h)
	}
	return h
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.echo.ServeHTTP(w, r) }

// MaxHeaderBytes is the most a request's head may take: its request line,
// header lines and the empty line that ends them, as sent. net/http refuses
// a longer one with its own 431, text/plain (docs/api.md), before any
// handler runs.
const MaxHeaderBytes = 16 << 10

// headerSlack is what net/http reads beyond http.Server.MaxHeaderBytes before
// it refuses a head (its initialReadLimitSize adds 4096 bytes of "bufio
// slop"): MaxHeaderBytes 16 KiB alone let heads of 20 KiB through.
const headerSlack = 4096

// NewHTTPServer wraps a handler in an http.Server whose timeouts keep slow or
// idle clients from holding connections, and which refuses a request head
// over MaxHeaderBytes.
func NewHTTPServer(addr string, handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes - headerSlack,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}
