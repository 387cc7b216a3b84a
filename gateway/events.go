package gateway

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

// eventsRoute streams the caller's events as Server-Sent Events.
const eventsRoute = "/v1/events"

// eventWriteTimeout bounds each write of a stream, as the HTTP server's
// WriteTimeout bounds a whole answer: a client that reads nothing for that
// long is disconnected.
const eventWriteTimeout = 15 * time.Second

// headerLastEventID is the resume position a reconnecting EventSource sends.
const headerLastEventID = "Last-Event-Id"

var sequencePattern = regexp.MustCompile(`^(0|[1-9][0-9]{0,18})$`)

// streamPosition is where a stream starts: after a sequence, or, when not
// resuming, after the last event so far.
type streamPosition struct {
	after  int64
	resume bool
}

// streamPositionOf reads Last-Event-ID and ?after=, strictly; the header
// wins when both are given, since a reconnecting client (EventSource) sends
// it beside the URL it first opened.
func streamPositionOf(c echo.Context) (streamPosition, error) {
	var position streamPosition
	read := func(value string, refuse func(string, ...any)) {
		after, err := strconv.ParseInt(value, 10, 64)
		if !sequencePattern.MatchString(value) || err != nil {
			refuse("must be a sequence: a whole number from 0, without sign or leading zeros")
			return
		}
		position = streamPosition{after: after, resume: true}
	}
	err := readQuery(c.QueryParams(), []string{"after"}, func(_, value string, refuse func(string, ...any)) {
		read(value, refuse)
	})
	if err != nil {
		return streamPosition{}, err
	}
	values := c.Request().Header.Values(headerLastEventID)
	if len(values) > 1 {
		return streamPosition{}, invalidHeader("Last-Event-ID", "is given %d times; give it at most once", len(values))
	}
	if len(values) == 1 && values[0] != "" {
		read(values[0], func(format string, args ...any) { err = invalidHeader("Last-Event-ID", format, args...) })
	}
	return position, err
}

// streamEvents answers the caller's events as Server-Sent Events until the
// client leaves, the gateway stops, the client falls behind its buffer,
// the stream's log fails it, or its key is revoked or loses the read
// scope (streams.go). Past the opening the answer is committed, so its
// end is the only error a client sees: it resumes with Last-Event-ID. A
// stream first takes its seats, which cap the streams open per key and
// per client address.
func (s *Server) streamEvents(c echo.Context) error {
	position, err := streamPositionOf(c)
	if err != nil {
		return err
	}
	st := state(c)
	// A fresh id, never the client's request id: two streams under one
	// holder would hold one seat.
	seat := placement.StreamSeat{ID: newRequestID(), Key: st.digest, Address: limitAddress(c)}
	if err := s.openSeats(c, seat); err != nil {
		return err
	}
	ctx, end := context.WithCancelCause(st.untimed)
	defer end(nil)
	response := c.Response()
	open := &openStream{seat: seat, end: end, control: http.NewResponseController(response)}
	s.streams.join(st.key, open)
	defer s.streams.leave(open)

	var subscription *placement.Subscription
	if position.resume {
		subscription, err = s.events.Subscribe(c.Request().Context(), account(c), position.after)
	} else {
		subscription, err = s.events.SubscribeNew(c.Request().Context(), account(c))
	}
	if err != nil {
		return err
	}
	defer subscription.Close()
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()

	header := response.Header()
	header.Set(echo.HeaderContentType, "text/event-stream")
	header.Set(echo.HeaderCacheControl, "no-cache")
	header.Set("X-Accel-Buffering", "no")
	response.WriteHeader(http.StatusOK)
	stream := &eventWriter{response: response, control: open.control}
	// The position first, so a client that reconnects before any event
	// resumes there.
	message := strconv.AppendInt(append(make([]byte, 0, 1024), "id: "...), subscription.Position(), 10)
	if err := stream.write(append(message, "\n\n"...)); err != nil {
		return nil
	}
	for err == nil {
		var event orders.Event
		var ok bool
		event, ok, err = subscription.Next(ctx, s.config.EventHeartbeat)
		if err != nil {
			break
		}
		message = message[:0]
		sent := 0
		if ok {
			// The events already at hand go out in the same write and
			// flush: a batch settled for the account, or a page read while
			// catching up, costs one write(2) instead of one per event. An
			// error ends the stream once the events before it are sent.
			message = appendEventMessage(message, event)
			for sent = 1; err == nil && len(message) < eventBatchBytes && subscription.Ready(); {
				if event, ok, err = subscription.Next(ctx, 0); err == nil && ok {
					message = appendEventMessage(message, event)
					sent++
				}
			}
		} else {
			message = append(message, ": heartbeat\n\n"...)
		}
		if err := stream.write(message); err != nil {
			s.requestLogger(c).Debug("event stream write failed", "err", err)
			return nil
		}
		s.metrics.eventsSent.Add(float64(sent))
	}
	var why *streamEnd
	if errors.As(context.Cause(ctx), &why) {
		s.requestLogger(c).Info("event stream ended: "+why.detail, "account", account(c))
		_ = stream.write(appendEndComment(message[:0], why))
		return nil
	}
	s.endStream(c, err)
	return nil
}

// eventBatchBytes is about the most a stream writes at once: the events
// at hand past it wait for the next write.
const eventBatchBytes = 64 << 10

// appendEndComment appends the comment that ends a stream the gateway
// ended for its key: ": ended <problem slug>: <why>", the slug being the
// problem a request with the key now gets.
func appendEndComment(dst []byte, why *streamEnd) []byte {
	dst = append(dst, ": ended "...)
	dst = append(dst, why.kind.slug...)
	dst = append(dst, ": "...)
	dst = append(dst, why.detail...)
	return append(dst, "\n\n"...)
}

// endStream logs why a stream ended, when the client did not end it.
func (s *Server) endStream(c echo.Context, err error) {
	var expired *placement.EventsExpiredError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, placement.ErrEventStreamsClosed):
	case errors.Is(err, placement.ErrSlowSubscriber):
		s.metrics.slowStreams.Inc()
		s.requestLogger(c).Info("event stream dropped: the client reads more slowly than its events come", "account", account(c))
	case errors.As(err, &expired):
		s.requestLogger(c).Warn("event stream ended: its log dropped events before they were sent", "account", account(c), "err", err)
	default:
		s.requestLogger(c).Warn("event stream ended", "account", account(c), "err", err)
	}
}

// eventWriter writes a stream's messages, each write sent at once.
type eventWriter struct {
	response *echo.Response
	control  *http.ResponseController
	// deadline is the write deadline last set.
	deadline time.Time
}

// write sends messages, with a write deadline of its own: the server's
// WriteTimeout would otherwise end the stream. The deadline moves on once
// a second at most, not at each write (each move resets a runtime timer):
// a write may thus have a second less than eventWriteTimeout.
func (w *eventWriter) write(message []byte) error {
	if now := time.Now(); w.deadline.Sub(now) < eventWriteTimeout-time.Second {
		w.deadline = now.Add(eventWriteTimeout)
		if err := w.control.SetWriteDeadline(w.deadline); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
	}
	if _, err := w.response.Write(message); err != nil {
		return err
	}
	return w.control.Flush()
}

// appendEventMessage appends one Server-Sent Events message: the event's
// sequence as its id, its type as its event, and its JSON as its data, one
// data field per line (a stored resource may hold line breaks, which the
// client joins again with a line feed).
func appendEventMessage(dst []byte, event orders.Event) []byte {
	dst = append(dst, "id: "...)
	dst = strconv.AppendInt(dst, event.Sequence, 10)
	dst = append(dst, "\nevent: "...)
	dst = append(dst, event.Type...)
	dst = append(dst, "\ndata: "...)
	start := len(dst)
	dst = event.AppendJSON(dst)
	if bytes.ContainsAny(dst[start:], "\r\n") {
		envelope := bytes.Clone(dst[start:])
		dst = dst[:start-len("\ndata: ")]
		for more := true; more; {
			var line []byte
			line, envelope, more = cutLine(envelope)
			dst = append(dst, "\ndata: "...)
			dst = append(dst, line...)
		}
	}
	return append(dst, "\n\n"...)
}

// cutLine cuts b at its first line break: CR, LF or CRLF, each of which
// ends a line of an event stream.
func cutLine(b []byte) (line, rest []byte, found bool) {
	i := bytes.IndexAny(b, "\r\n")
	if i < 0 {
		return b, nil, false
	}
	if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
		return b[:i], b[i+2:], true
	}
	return b[:i], b[i+1:], true
}
