package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/tmaxmax/go-sse"
)

// The generated StreamEvents opens GET /v1/events and leaves its body, a
// Server-Sent Events stream, to be read; StreamEventsWithResponse would
// read it to its end, which a stream never reaches. Events reads it: it
// parses the messages with go-sse's Read and keeps the stream going
// itself, since resuming is this API's (Last-Event-ID from the last
// sequence, a 410 that no retry fixes, each request signed anew).

// EventsOptions says where an event stream starts and how it reconnects.
// The zero value starts with new events and uses the defaults below.
type EventsOptions struct {
	// After starts the stream after this sequence (0 replays every event
	// the stream holds); nil starts it with the events that come from now
	// on.
	After *int64
	// RetryWait bounds the first wait before a reconnection (500 ms when
	// zero): each wait is drawn at random up to the bound, which doubles
	// with each failed attempt, up to MaxRetryWait (30 s when zero).
	RetryWait, MaxRetryWait time.Duration
	// IdleTimeout is how long a connection may carry nothing, not even a
	// heartbeat, before it is taken for dead and replaced (45 s, three
	// heartbeats, when zero).
	IdleTimeout time.Duration
}

// EventsExpiredError: the stream cannot resume where it was asked to (410
// events-expired): the events after it are past the retention, or the
// gateway's store lost them. Read the current state from the REST routes,
// then open a stream after LastSequence.
type EventsExpiredError struct {
	LastSequence int64
	Problem      Problem
}

func (e *EventsExpiredError) Error() string {
	return fmt.Sprintf("client: event stream expired (last sequence %d): %s", e.LastSequence, problemText(e.Problem))
}

// StreamRefusedError: the gateway answered a connection of an event
// stream with a status no retry fixes (400, 401, 403, ...), or with what is
// not an event stream.
type StreamRefusedError struct {
	StatusCode int
	// Problem is the answer's problem; its Type is empty when the answer
	// had none.
	Problem Problem
}

func (e *StreamRefusedError) Error() string {
	return fmt.Sprintf("client: event stream refused with %d: %s", e.StatusCode, problemText(e.Problem))
}

func problemText(p Problem) string {
	if p.Detail != nil {
		return string(p.Type) + ": " + *p.Detail
	}
	return string(p.Type)
}

// ErrEventGap: an event came whose sequence is past the one after the
// last returned, which the gateway never sends; the stream stops rather
// than skip events silently.
var ErrEventGap = errors.New("client: the event stream skipped events")

// EventStream is one account's stream of events; Next returns them in
// turn. Its methods are for one goroutine at a time: to end a Next that
// waits from another, cancel the context given to Events.
type EventStream struct {
	api     ClientInterface
	options EventsOptions
	ctx     context.Context
	cancel  context.CancelFunc
	// position is the sequence of the last event returned, or the one the
	// stream started after; known once the gateway said it or After did.
	position int64
	known    bool
	// connection is the open response's body, read message by message
	// through next; nil between connections.
	connection *idleReader
	next       func() (sse.Event, error, bool)
	stop       func()
	// failures counts the failed connections since an event came.
	failures int
}

// Events opens the caller's event stream (GET /v1/events). An error means
// the first connection failed: an *EventsExpiredError, a
// *StreamRefusedError, or the transport's. The client's HTTP client must
// have no Timeout, which would end every stream.
func (c *Client) Events(ctx context.Context, options EventsOptions) (*EventStream, error) {
	return openEvents(ctx, c, options)
}

// Events opens the caller's event stream, as Client.Events does.
func (c *ClientWithResponses) Events(ctx context.Context, options EventsOptions) (*EventStream, error) {
	return openEvents(ctx, c.ClientInterface, options)
}

func openEvents(ctx context.Context, api ClientInterface, options EventsOptions) (*EventStream, error) {
	if options.RetryWait <= 0 {
		options.RetryWait = 500 * time.Millisecond
	}
	if options.MaxRetryWait <= 0 {
		options.MaxRetryWait = 30 * time.Second
	}
	if options.IdleTimeout <= 0 {
		options.IdleTimeout = 45 * time.Second
	}
	s := &EventStream{api: api, options: options}
	s.ctx, s.cancel = context.WithCancel(ctx)
	if options.After != nil {
		s.position, s.known = *options.After, true
	}
	if _, err := s.connect(); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// Next returns the stream's next event, waiting for it as long as it
// takes. A dropped connection, an end of the stream (a gateway shutting
// down), a silent one, a 429 or a 5xx make it reconnect, with backoff,
// after the last event it returned: nothing is lost or returned twice. It
// returns an error when that cannot go on: the context's, an
// *EventsExpiredError, a *StreamRefusedError, or ErrEventGap.
func (s *EventStream) Next() (Event, error) {
	for {
		if err := s.ctx.Err(); err != nil {
			return Event{}, err
		}
		if s.next == nil {
			if err := s.reconnect(); err != nil {
				return Event{}, err
			}
		}
		message, err, ok := s.next()
		if !ok || err != nil {
			s.disconnect()
			continue
		}
		if message.Data == "" {
			// The stream's starting position, before its first event.
			if position, err := strconv.ParseInt(message.LastEventID, 10, 64); err == nil {
				s.position, s.known = position, true
			}
			continue
		}
		var event Event
		if err := json.Unmarshal([]byte(message.Data), &event); err != nil {
			s.disconnect()
			return Event{}, fmt.Errorf("client: event stream message %s: %w", message.LastEventID, err)
		}
		if s.known && event.Sequence <= s.position {
			continue
		}
		if s.known && event.Sequence != s.position+1 {
			s.disconnect()
			return Event{}, fmt.Errorf("%w: event %d after %d", ErrEventGap, event.Sequence, s.position)
		}
		s.position, s.known, s.failures = event.Sequence, true, 0
		return event, nil
	}
}

// Position is the sequence of the last event Next returned, or the one the
// stream started after; false while the gateway has not said it.
func (s *EventStream) Position() (int64, bool) { return s.position, s.known }

// Close ends the stream and its connection.
func (s *EventStream) Close() error {
	s.cancel()
	s.disconnect()
	return nil
}

// reconnect connects again after a wait, for as long as the failures are
// ones a retry may fix.
func (s *EventStream) reconnect() error {
	retryAfter := time.Duration(0)
	for {
		bound := min(s.options.RetryWait<<min(s.failures, 16), s.options.MaxRetryWait)
		wait := max(rand.N(bound+1), retryAfter)
		s.failures++
		select {
		case <-time.After(wait):
		case <-s.ctx.Done():
			return s.ctx.Err()
		}
		var err error
		if retryAfter, err = s.connect(); err == nil {
			return nil
		}
		var expired *EventsExpiredError
		var refused *StreamRefusedError
		if errors.As(err, &expired) || errors.As(err, &refused) || s.ctx.Err() != nil {
			return err
		}
	}
}

// connect opens a connection after the stream's position, if known. A
// failure a retry may fix comes with the wait its answer asked for, if
// any.
func (s *EventStream) connect() (time.Duration, error) {
	params := &StreamEventsParams{}
	if s.known {
		position := strconv.FormatInt(s.position, 10)
		params.LastEventID = &position
	}
	res, err := s.api.StreamEvents(s.ctx, params)
	if err != nil {
		return 0, err
	}
	mediaType, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type"))
	if res.StatusCode == http.StatusOK && mediaType == "text/event-stream" {
		s.connection = newIdleReader(res.Body, s.options.IdleTimeout)
		s.next, s.stop = iter.Pull2(sse.Read(s.connection, &sse.ReadConfig{MaxEventSize: 1 << 20}))
		return 0, nil
	}
	defer res.Body.Close()
	var problem Problem
	if mediaType == "application/problem+json" {
		_ = json.NewDecoder(io.LimitReader(res.Body, 64<<10)).Decode(&problem)
	}
	switch {
	case res.StatusCode == http.StatusGone && problem.LastSequence != nil:
		return 0, &EventsExpiredError{LastSequence: *problem.LastSequence, Problem: problem}
	case res.StatusCode == http.StatusTooManyRequests || res.StatusCode >= 500:
		seconds, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		return time.Duration(seconds) * time.Second, fmt.Errorf("client: event stream answered %d: %s", res.StatusCode, problemText(problem))
	}
	return 0, &StreamRefusedError{StatusCode: res.StatusCode, Problem: problem}
}

// disconnect drops the open connection.
func (s *EventStream) disconnect() {
	if s.next == nil {
		return
	}
	s.stop()
	_ = s.connection.Close()
	s.next, s.stop, s.connection = nil, nil, nil
}

// idleReader closes a body that carries nothing for idle, which ends the
// read waiting on it: a connection that died without a word (a peer gone,
// a proxy that dropped it) is noticed by its silence, as the gateway
// writes at least a heartbeat every 15 s.
type idleReader struct {
	body  io.ReadCloser
	idle  time.Duration
	timer *time.Timer
}

func newIdleReader(body io.ReadCloser, idle time.Duration) *idleReader {
	return &idleReader{body: body, idle: idle, timer: time.AfterFunc(idle, func() { _ = body.Close() })}
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	if n > 0 {
		r.timer.Reset(r.idle)
	}
	return n, err
}

func (r *idleReader) Close() error {
	r.timer.Stop()
	return r.body.Close()
}
