package apitest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"

	"github.com/tmaxmax/go-sse"
)

const eventStream = "text/event-stream"

func isEventStream(resp *http.Response) bool {
	mediaType, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mediaType == eventStream
}

// checkStream hands back the body of an event stream, unread, in a reader
// that checks each message as the caller reads it: its data is an Event of
// the spec, its id the event's sequence and its event field the event's
// type. A message with an id alone (the stream's starting position) has
// no data to check.
func (tr *transport) checkStream(req *http.Request, body io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	s := &checkedStream{body: body, copy: pw, done: make(chan struct{})}
	fail := func(format string, args ...any) {
		tr.t.Errorf("apitest: %s %s: a message breaks api/openapi.yaml: %s", req.Method, req.URL.RequestURI(), fmt.Sprintf(format, args...))
	}
	go func() {
		defer close(s.done)
		// The caller's reads wait for this copy: take it all, checked or not.
		defer func() { _, _ = io.Copy(io.Discard, pr) }()
		for message, err := range sse.Read(pr, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
			if err != nil {
				return
			}
			if message.Data == "" {
				if _, err := strconv.ParseInt(message.LastEventID, 10, 64); err != nil {
					fail("an id alone, %q, is not a sequence", message.LastEventID)
				}
				continue
			}
			var event map[string]any
			if err := json.Unmarshal([]byte(message.Data), &event); err != nil {
				fail("data is not JSON: %v\n%s", err, excerpt([]byte(message.Data)))
				continue
			}
			if err := tr.spec.event.VisitJSON(event); err != nil {
				fail("data is not an Event: %v\n%s", err, excerpt([]byte(message.Data)))
				continue
			}
			if sequence := strconv.FormatFloat(event["sequence"].(float64), 'f', -1, 64); message.LastEventID != sequence {
				fail("id %q, but the event's sequence is %s", message.LastEventID, sequence)
			}
			if message.Type != event["type"] {
				fail("event %q, but the event's type is %v", message.Type, event["type"])
			}
		}
	}()
	tr.t.Cleanup(func() { _ = s.Close() })
	return s
}

// checkedStream reads a stream's body and copies what it reads to the
// checker.
type checkedStream struct {
	body  io.ReadCloser
	copy  *io.PipeWriter
	done  chan struct{}
	close sync.Once
}

func (s *checkedStream) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 {
		_, _ = s.copy.Write(p[:n])
	}
	return n, err
}

// Close closes the body and waits for the checks of what was read.
func (s *checkedStream) Close() error {
	err := s.body.Close()
	s.close.Do(func() { _ = s.copy.Close() })
	<-s.done
	return err
}
