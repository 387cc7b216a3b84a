package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// eventsClient is the generated client on the gateway at base, which
// authenticates with editor.
func eventsClient(t testing.TB, base string, editor client.RequestEditorFn) *client.ClientWithResponses {
	t.Helper()
	c, err := client.NewClientWithResponses(base,
		client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, nil, apitest.ValidateRequests())}),
		client.WithRequestEditorFn(editor))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func bearer(key string) client.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+key)
		return nil
	}
}

// hostOf is the host:port of a URL.
func hostOf(t testing.TB, raw string) string {
	t.Helper()
	parsed, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Host
}

// nextEvents reads count events and fails unless they are the sequences
// from first on, each a balance.
func nextEvents(t testing.TB, stream *client.EventStream, first int64, count int) {
	t.Helper()
	for want := first; want < first+int64(count); want++ {
		event, err := stream.Next()
		if err != nil {
			t.Fatalf("event %d: %v", want, err)
		}
		balance, err := event.Data.AsBalance()
		if event.Sequence != want || event.Type != client.EventTypeBalance || err != nil || balance.Asset != "USD" {
			t.Fatalf("event %+v, %v; want balance event %d", event, err, want)
		}
	}
}

// The Go client reads the stream, with a plain key and with one whose
// requests are signed, and when its connection is cut and the gateway
// behind the address is another, reconnects (signing anew) and goes on
// after the last event it returned: nothing lost, nothing twice.
func TestGoClientReadsAndResumesTheEventStream(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	for _, tt := range []struct {
		name string
		spec orders.KeySpec
	}{
		{"a bearer key", orders.KeySpec{Scopes: orders.ScopeRead}},
		{"a signed key", orders.KeySpec{Scopes: orders.ScopeRead, Signed: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			issued := newFixtureKey(t, f, tt.spec)
			account := f.accounts[len(f.accounts)-1]
			editor := bearer(issued.Key.Reveal())
			if tt.spec.Signed {
				editor = client.NewSigner(issued.Key.Reveal(), issued.SigningSecret.Reveal()).Edit
			}
			first, _ := f.startGateway(t, prometheus.NewRegistry())
			second, _ := f.startGateway(t, prometheus.NewRegistry())
			proxy := testserver.StartProxy(t, hostOf(t, first))
			sdk := eventsClient(t, "http://"+proxy.Addr(hostOf(t, first)), editor)

			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			after := int64(0)
			stream, err := sdk.Events(ctx, client.EventsOptions{After: &after, RetryWait: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			appendAccountEvents(t, f.events, account, 6, 3, 0)
			nextEvents(t, stream, 1, 4)
			if err := proxy.Repoint(hostOf(t, first), hostOf(t, second)); err != nil {
				t.Fatal(err)
			}
			appendAccountEvents(t, f.events, account, 4, 1, 0)
			nextEvents(t, stream, 5, 6)
			if position, known := stream.Position(); !known || position != 10 {
				t.Errorf("position %d, %v; want 10", position, known)
			}
		})
	}
}

// The client's errors say what no reconnection fixes: a position past the
// stream's retention or its end, with the sequence to resume after, and a
// key that may not read.
func TestGoClientReportsStreamsItCannotOpen(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	tradeOnly := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.ScopeTrade}).Key.Reveal()
	appendAccountEvents(t, f.events, f.accounts[0], 3, 3, 0)
	ahead := int64(7)
	_, err := eventsClient(t, f.url, bearer(f.keys[0])).Events(context.Background(), client.EventsOptions{After: &ahead})
	var expired *client.EventsExpiredError
	if !errors.As(err, &expired) || expired.LastSequence != 3 || expired.Problem.Type != client.ProblemTypeEventsExpired {
		t.Errorf("a stream after 7 of 3: %v", err)
	}
	_, err = eventsClient(t, f.url, bearer(tradeOnly)).Events(context.Background(), client.EventsOptions{})
	var refused *client.StreamRefusedError
	if !errors.As(err, &refused) || refused.StatusCode != http.StatusForbidden || refused.Problem.Type != client.ProblemTypeForbidden {
		t.Errorf("a trade-only key's stream: %v", err)
	}
}
