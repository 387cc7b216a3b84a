package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"
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

// benchEventJSON is the part of an event's JSON the phase decodes.
type benchEventJSON struct {
	Time time.Time `json:"time"`
	Data *struct {
		ID            string     `json:"id"`
		ClientOrderID string     `json:"client_order_id"`
		FinishedAt    *time.Time `json:"finished_at"`
	} `json:"data"`
}

// benchTimeJSON is the event's time alone, for an event that is not an
// order's.
type benchTimeJSON struct {
	Time time.Time `json:"time"`
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

// parseBenchEvent decodes what the phase reads of an event of type kind
// whose JSON is data.
func parseBenchEvent(kind, data []byte) (benchEvent, error) {
	event := benchEvent{Type: string(kind)}
	if !bytes.HasPrefix(kind, []byte("order.")) {
		var e benchTimeJSON
		if err := json.Unmarshal(data, &e); err != nil {
			return benchEvent{}, fmt.Errorf("event %s: %w", kind, err)
		}
		event.Time = e.Time
		return event, nil
	}
	var e benchEventJSON
	if err := json.Unmarshal(data, &e); err != nil {
		return benchEvent{}, fmt.Errorf("event %s: %w", kind, err)
	}
	event.Time = e.Time
	if e.Data != nil {
		event.OrderID, event.ClientOrderID, event.FinishedAt = e.Data.ID, e.Data.ClientOrderID, e.Data.FinishedAt
	}
	return event, nil
}
