package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// A connection that carries nothing, not even a heartbeat, for the idle
// timeout is taken for dead: the stream reconnects after its position.
// (The gateway tests hold the client to a real gateway.)
func TestEventStreamReplacesASilentConnection(t *testing.T) {
	var connections atomic.Int32
	resumedAfter := make(chan string, 1)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "id: 41\n\n")
		w.(http.Flusher).Flush()
		if connections.Add(1) == 1 {
			<-r.Context().Done() // silent until the client leaves
			return
		}
		resumedAfter <- r.Header.Get("Last-Event-ID")
		fmt.Fprint(w, "id: 42\nevent: balance\n"+
			`data: {"sequence":42,"id":"e42","type":"balance","time":"2025-01-15T09:30:00.123Z","data":{"asset":"USD","available":"1","held":"0","version":1}}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer server.Close()
	c, err := NewClient(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.Events(ctx, EventsOptions{IdleTimeout: 100 * time.Millisecond, RetryWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	event, err := stream.Next()
	if err != nil || event.Sequence != 42 {
		t.Fatalf("next: %+v, %v", event, err)
	}
	if after := <-resumedAfter; after != "41" || connections.Load() != 2 {
		t.Errorf("reconnected with Last-Event-ID %q after %d connections; want 41 after 2", after, connections.Load())
	}
}
