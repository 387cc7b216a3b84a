package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tidwall/gjson"

	"github.com/ordergate/ordergate/orders"
)

// The events phase's 1,000 stream readers run on the box they measure, so
// they read the streams themselves rather than through api/client (an SSE
// parser, the whole event decoded, an order decoded again from it): each
// event is taken apart only as far as the latency figures need, its type,
// its time and, for an order's event, the order's ids and finished_at.

// benchEvent is what the phase reads of one event.
type benchEvent struct {
	Type string
	// Time is the event's time: its append to the account's log.
	Time time.Time
	// The order's, for an order.* event.
	OrderID, ClientOrderID string
	FinishedAt             *time.Time
}

// readEvents reads a Server-Sent Events stream and calls each for every
// event, with when its last line was read, until the stream ends (io.EOF)
// or fails. Comments (heartbeats) and ids are skipped; data lines are
// joined with a line feed, as an EventSource does.
func readEvents(body io.Reader, each func(benchEvent, time.Time)) error {
	lines := bufio.NewReaderSize(body, 64<<10)
	var kind []byte
	var data []byte
	for {
		line, err := lines.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				received := time.Now()
				event, err := parseBenchEvent(kind, data)
				if err != nil {
					return err
				}
				each(event, received)
			}
			kind, data = kind[:0], data[:0]
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("event:")):
			kind = append(kind[:0], bytes.TrimPrefix(line[len("event:"):], []byte(" "))...)
		case bytes.HasPrefix(line, []byte("data:")):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
		}
	}
}

// eventTypes are the event types, so an event's type costs no string.
var eventTypes = func() map[string]string {
	types := map[string]string{}
	for _, kind := range []orders.EventType{orders.EventOrderAccepted, orders.EventOrderOpen, orders.EventOrderPartiallyFilled,
		orders.EventOrderFilled, orders.EventOrderCanceled, orders.EventOrderRejected, orders.EventFill, orders.EventBalance} {
		types[string(kind)] = string(kind)
	}
	return types
}()

// parseBenchEvent decodes what the phase reads of an event of type kind
// whose JSON is data: the event's time and, for an order's event, its
// order's ids and finished_at. gjson picks those members out of the JSON
// without decoding the rest: json.Unmarshal into a struct of them cost
// about half of what the readers took, and they run on the box they
// measure (BenchmarkParseBenchEvent).
func parseBenchEvent(kind, data []byte) (benchEvent, error) {
	event := benchEvent{Type: eventTypes[string(kind)]}
	if event.Type == "" {
		event.Type = string(kind)
	}
	// One copy into a string: gjson's results are then slices of it.
	js := string(data)
	if !gjson.Valid(js) || !gjson.Parse(js).IsObject() {
		return benchEvent{}, fmt.Errorf("event %s: %w", kind, errBadJSON)
	}
	if !bytes.HasPrefix(kind, []byte("order.")) {
		if err := parseJSONTime(gjson.Get(js, "time"), &event.Time); err != nil {
			return benchEvent{}, fmt.Errorf("event %s: %w", kind, err)
		}
		return event, nil
	}
	if err := parseJSONTime(gjson.Get(js, "time"), &event.Time); err != nil {
		return benchEvent{}, fmt.Errorf("event %s: %w", kind, err)
	}
	order := gjson.Get(js, "data")
	if !order.IsObject() {
		return event, nil
	}
	members := gjson.GetMany(order.Raw, "id", "client_order_id", "finished_at")
	event.OrderID, event.ClientOrderID = members[0].String(), members[1].String()
	if finished := members[2]; finished.Exists() && finished.Type != gjson.Null {
		event.FinishedAt = new(time.Time)
		if err := parseJSONTime(finished, event.FinishedAt); err != nil {
			return benchEvent{}, fmt.Errorf("event %s: %w", kind, err)
		}
	}
	return event, nil
}

var errBadJSON = errors.New("malformed JSON")

// parseJSONTime decodes a JSON string holding an RFC 3339 time, as
// time.Time's UnmarshalJSON does; an absent member leaves dst zero.
func parseJSONTime(value gjson.Result, dst *time.Time) error {
	if !value.Exists() {
		return nil
	}
	if value.Type != gjson.String {
		return fmt.Errorf("%s: %w", value.Raw, errBadJSON)
	}
	t, err := time.Parse(time.RFC3339, value.Str)
	if err != nil {
		return err
	}
	*dst = t
	return nil
}
