package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// A stream that resumes further back than the log's hot tail is served
// from the history in PostgreSQL, then joins the live events, each event
// once and in turn; a position the history dropped too is answered 410.
func TestEventStreamResumesFromTheHistory(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	ctx := context.Background()
	account := f.accounts[0]
	history := postgres.NewEventHistory(f.db)
	archiver := placement.NewEventArchiver(f.events.For(account), history, nil,
		placement.WithHotTail(emq.LogHotTail{Count: 5, Age: time.Hour}), placement.WithArchiveDelay(0))
	if err := archiver.Pass(ctx, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	appendAccountEvents(t, f.events, account, 40, 4, 0)
	for range 2 {
		if err := archiver.Pass(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if first, last, err := f.events.For(account).LogBounds(ctx, account); err != nil || first != 36 || last != 40 {
		t.Fatalf("the log holds %d..%d, %v; want its newest five", first, last, err)
	}
	url, _ := f.startGateway(t, prometheus.NewRegistry(), placement.WithEventHistory(history))
	stream := openEvents(t, f.http, url, f.keys[0], "?after=3", nil)
	if position := stream.position(t); position != 3 {
		t.Fatalf("the stream starts after %d, want 3", position)
	}
	for _, event := range stream.expectSequences(t, 4, 40) {
		if want := fmt.Sprintf("%s.%d", account, event.Sequence-1); event.ID != want {
			t.Fatalf("event %d is %s, want %s", event.Sequence, event.ID, want)
		}
	}
	appendAccountEvents(t, f.events, account, 2, 1, 0)
	stream.expectSequences(t, 41, 42)

	if _, err := f.db.Exec(ctx, `DELETE FROM account_event_chunks WHERE first_sequence = 1`); err != nil {
		t.Fatal(err)
	}
	res := requestEvents(t, f.http, url, f.keys[0], "?after=3", nil)
	res.Body.Close()
	if res.StatusCode != http.StatusGone {
		t.Errorf("a position the history no longer holds: %d, want 410", res.StatusCode)
	}
}
