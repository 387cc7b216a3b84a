package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

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
// whose JSON is data. It scans the JSON for the members it reads, the
// event's time and its order's ids and finished_at, and decodes those
// alone: json.Unmarshal into a struct of them cost about half of what the
// readers took (they run on the box they measure). The JSON must be
// well-formed as far as the scan goes; it is the gateway's own.
func parseBenchEvent(kind, data []byte) (benchEvent, error) {
	event := benchEvent{Type: eventTypes[string(kind)]}
	if event.Type == "" {
		event.Type = string(kind)
	}
	order := bytes.HasPrefix(kind, []byte("order."))
	err := scanMembers(data, func(key, value []byte) error {
		switch string(key) {
		case "time":
			return parseJSONTime(value, &event.Time)
		case "data":
			if !order || value[0] != '{' {
				return nil
			}
			return scanMembers(value, func(key, value []byte) error {
				switch string(key) {
				case "id":
					return parseJSONString(value, &event.OrderID)
				case "client_order_id":
					return parseJSONString(value, &event.ClientOrderID)
				case "finished_at":
					if value[0] == 'n' {
						return nil
					}
					event.FinishedAt = new(time.Time)
					return parseJSONTime(value, event.FinishedAt)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return benchEvent{}, fmt.Errorf("event %s: %w", kind, err)
	}
	return event, nil
}

var errBadJSON = errors.New("malformed JSON")

// scanMembers calls each with the key (as written, between its quotes)
// and the value (as written) of every member of the JSON object b.
func scanMembers(b []byte, each func(key, value []byte) error) error {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '{' {
		return errBadJSON
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for i < len(b) {
		end, err := skipValue(b, i)
		if err != nil || b[i] != '"' {
			return errBadJSON
		}
		key := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i == len(b) || b[i] != ':' {
			return errBadJSON
		}
		i = skipSpace(b, i+1)
		if end, err = skipValue(b, i); err != nil {
			return err
		}
		if err := each(key, b[i:end]); err != nil {
			return err
		}
		i = skipSpace(b, end)
		switch {
		case i == len(b):
			return errBadJSON
		case b[i] == '}':
			return nil
		case b[i] != ',':
			return errBadJSON
		}
		i = skipSpace(b, i+1)
	}
	return errBadJSON
}

// skipValue returns the end of the JSON value at b[i:].
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errBadJSON
	}
	switch b[i] {
	case '"':
		for j := i + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return j + 1, nil
			}
		}
		return 0, errBadJSON
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipValue(b, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errBadJSON
	}
	// A number, true, false or null.
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && skipSpace(b, j) == j {
		j++
	}
	if j == i {
		return 0, errBadJSON
	}
	return j, nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// parseJSONString decodes a JSON string; json.Unmarshal only for one with
// escapes.
func parseJSONString(value []byte, dst *string) error {
	if len(value) < 2 || value[0] != '"' {
		return errBadJSON
	}
	if bytes.IndexByte(value, '\\') < 0 {
		*dst = string(value[1 : len(value)-1])
		return nil
	}
	return json.Unmarshal(value, dst)
}

// parseJSONTime decodes a JSON string holding an RFC 3339 time, as
// time.Time's UnmarshalJSON does.
func parseJSONTime(value []byte, dst *time.Time) error {
	if len(value) < 2 || value[0] != '"' || bytes.IndexByte(value, '\\') >= 0 {
		return dst.UnmarshalJSON(value)
	}
	t, err := time.Parse(time.RFC3339, string(value[1:len(value)-1]))
	if err != nil {
		return err
	}
	*dst = t
	return nil
}
