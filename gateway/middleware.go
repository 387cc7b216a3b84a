package gateway

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"

	"github.com/ordergate/ordergate/orders"
)

const (
	headerRequestID = "X-Request-Id"
	contextRequest  = "gateway.request"
)

// requestState is what the middleware and handlers learn of one request,
// kept in one value (requestContext's) rather than an entry each.
type requestState struct {
	// account and bucket are the API key's account and rate-limit bucket, once
	// authenticate has found them, and scopes the key's scopes.
	account, bucket string
	scopes          orders.Scopes
	// key is the API key as sent, digest its digest (keyDigest): what an
	// event stream's key is checked and capped by.
	key, digest string
	// order is the order a placement admitted or replayed, for the access
	// log line.
	order string
	// untimed is the request's context before deadline bounded it: a
	// stream lives past the request timeout, which bounds its opening.
	untimed context.Context
	// stopTimer ends the request's current deadline (restartDeadline), which
	// started at timerStarted.
	stopTimer    context.CancelFunc
	timerStarted time.Time
	// logger adds the request id to every line; made on first use.
	logger *slog.Logger
}

// requestContext is the echo.Context every request's handlers get
// (around): Echo's own, with the request's requestState beside it. Kept in
// Echo's store instead, it cost a map of its own for every request (Echo
// empties the store of a pooled context, and makes a new one on the first
// Set), and a lock for each look-up.
type requestContext struct {
	echo.Context
	state requestState
}

// state is the request's requestState; around puts it on every request.
// A context Echo made alone (its error handler's, in a test) keeps one in
// its store.
func state(c echo.Context) *requestState {
	if rc, ok := c.(*requestContext); ok {
		return &rc.state
	}
	if st, ok := c.Get(contextRequest).(*requestState); ok {
		return st
	}
	st := &requestState{}
	c.Set(contextRequest, st)
	return st
}

// maxRequestID is the longest X-Request-Id used as it is, in bytes.
const maxRequestID = 128

// observe gives every request an id (the caller's X-Request-Id when it is
// well-formed) that every log line about it carries, and one access log
// line, which names the order a placement admitted; a refusal's line only
// when it is its client's first in a second (refusalLog). Headers are
// never logged: they carry API keys.
func (s *Server) observe(c echo.Context, next echo.HandlerFunc) error {
	start := time.Now()
	id := c.Request().Header.Get(headerRequestID)
	if !idCharacters(id, maxRequestID) {
		id = newRequestID()
	}
	c.Response().Header().Set(headerRequestID, id)
	st := state(c)
	err := s.recoverPanics(c, next)
	if err != nil {
		// What c.Error does, with this context: Echo's would hand its
		// own, without the request's state, to the error handler.
		s.handleError(err, c)
	}
	status := c.Response().Status
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	ctx := c.Request().Context()
	if !s.logger.Enabled(ctx, level) {
		return nil
	}
	if status >= 400 && status < 500 && !s.refusals.admit(limitAddress(c), status, start) {
		return nil // counted, and summarized once its client's second is over
	}
	// Straight to the handler: Logger.LogAttrs would walk the stack for
	// a source position the line does not carry.
	record := slog.NewRecord(time.Now(), level, "request", 0)
	// The attributes go in at once: the record holds five itself and
	// grows its slice for the rest once, not once per AddAttrs.
	attrs := [8]slog.Attr{
		slog.String("request_id", id),
		slog.String("method", c.Request().Method),
		slog.String("path", c.Request().URL.Path),
		slog.Int("status", status),
		slog.Int64("bytes", c.Response().Size),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
	}
	n := 6
	if st.account != "" {
		attrs[n] = slog.String("account", st.account)
		n++
	}
	if st.order != "" {
		attrs[n] = slog.String("order_id", st.order)
		n++
	}
	record.AddAttrs(attrs[:n]...)
	_ = s.logger.Handler().Handle(ctx, record)
	return nil
}

func requestID(c echo.Context) string { return c.Response().Header().Get(headerRequestID) }

// newRequestID mints a ULID for a request that brought no id of its own.
// Its random part comes from the runtime's per-thread generator: the ids
// need to be unique, not secret, and ulid's default source would queue
// every request on one lock. Filled in place, not through ulid.New, whose
// io.Reader puts the id on the heap.
func newRequestID() string {
	var id ulid.ULID
	_ = id.SetTime(ulid.Now()) // errors only past the year 10889
	binary.LittleEndian.PutUint64(id[6:14], rand.Uint64())
	binary.LittleEndian.PutUint16(id[14:], uint16(rand.Uint32()))
	return id.String()
}

// requestLogger is the request's logger, which adds its id to every line; made
// on first use, since most requests log nothing but their access line.
func (s *Server) requestLogger(c echo.Context) *slog.Logger {
	st := state(c)
	if st.logger == nil {
		st.logger = s.logger.With("request_id", requestID(c))
	}
	return st.logger
}

func (s *Server) recoverPanics(c echo.Context, next echo.HandlerFunc) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if r == http.ErrAbortHandler {
				panic(r)
			}
			err = fmt.Errorf("gateway: panic: %v", r)
		}
	}()
	return s.refuseOtherMethods(c, next)
}

// deadline bounds the request's work by the request timeout.
func (s *Server) deadline(c echo.Context, next echo.HandlerFunc) error {
	st := state(c)
	st.untimed = c.Request().Context()
	s.startDeadline(c, st)
	defer func() { st.stopTimer() }()
	return next(c)
}

// startDeadline gives the request the request timeout from now.
func (s *Server) startDeadline(c echo.Context, st *requestState) {
	st.timerStarted = time.Now()
	ctx, cancel := context.WithDeadline(st.untimed, st.timerStarted.Add(s.config.RequestTimeout))
	st.stopTimer = cancel
	c.SetRequest(c.Request().WithContext(ctx))
}

// restartShare: a body that arrived within this share of the request
// timeout keeps the first deadline, which leaves the work all but that
// share of it. A restart costs a context, a timer and a copy of the
// request, and nearly every body comes with its headers.
const restartShare = 100

// restartDeadline gives the request the whole request timeout again once
// its body has arrived: the timeout bounds the gateway's work, not the
// client's sending (the server's ReadTimeout bounds that). A body that
// came whole only after the first deadline passed would otherwise be
// worked on with a context already ended: an admission sent with it may
// still reach Redis while the answer is 503, and a permit taken with it
// fails as if the limiter were down. A body that came within a hundredth
// of the timeout keeps the first deadline (restartShare).
func (s *Server) restartDeadline(c echo.Context) {
	st := state(c)
	if st.stopTimer == nil || time.Since(st.timerStarted) < s.config.RequestTimeout/restartShare {
		return
	}
	st.stopTimer()
	s.startDeadline(c, st)
}

// authenticate takes "Authorization: Bearer <key>", checks the signature
// of a request whose key requires signatures, refuses a key without the
// scopes need (those refusals limited apart: limitRefusal), and puts the
// key's account on the context.
func (s *Server) authenticate(need orders.Scopes) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			scheme, key, found := strings.Cut(c.Request().Header.Get("Authorization"), " ")
			if !found || !strings.EqualFold(scheme, "Bearer") || key == "" {
				if err := s.limitLookup(c, noLookup); err != nil {
					return err
				}
				return &requestError{kind: kindUnauthorized, detail: "send the API key as Authorization: Bearer <key>"}
			}
			key = strings.TrimSpace(key)
			if s.keys == nil || !s.keys.Recognizes(key) {
				cost := lookup
				if s.keys != nil && !s.keys.NeedsLookup(key) {
					cost = noLookup
				}
				if err := s.limitLookup(c, cost); err != nil {
					return err
				}
			}
			caller, err := s.accounts.Authenticate(c.Request().Context(), key)
			if err != nil {
				return err
			}
			digest := keyDigest(key)
			st := state(c)
			st.account, st.bucket, st.scopes = caller.Account, keyBucketPrefix+digest, caller.Scopes
			st.key, st.digest = key, digest
			if err := s.authorize(c, caller, digest, need); err != nil {
				return s.limitRefusal(c, digest, err)
			}
			return next(c)
		}
	}
}

// authorize lets a found key's request through when its signature checks
// out (for a key that requires one) and the key has the scopes need.
func (s *Server) authorize(c echo.Context, caller orders.Caller, digest string, need orders.Scopes) error {
	if caller.Signed {
		if err := s.verifySignature(c, caller, digest); err != nil {
			return err
		}
	}
	return caller.Permits(need)
}

func account(c echo.Context) string { return state(c).account }

// reads reports whether the request's key may read (its read scope): a
// key that may not is told what it asked for, never an order's state.
func reads(c echo.Context) bool { return state(c).scopes&orders.ScopeRead != 0 }
