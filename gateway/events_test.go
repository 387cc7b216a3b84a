package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/tmaxmax/go-sse"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/gateway"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// appendAccountEvents appends count balance events to the account's log,
// count/batch appends of batch events each, numbered from the log's next
// sequence; each event's data names its account and its number.
func appendAccountEvents(t testing.TB, logs *placement.EventLogs, account string, count, batch int, size int) {
	t.Helper()
	padding := strings.Repeat("x", size)
	for start := 0; start < count; start += batch {
		entries := make([]emq.LogEntry, 0, batch)
		for i := start; i < min(start+batch, count); i++ {
			data := fmt.Sprintf(`{"asset":"USD","available":"%d","held":"0","version":%d,"account":%q,"padding":%q}`, i, i, account, padding)
			entries = append(entries, emq.LogEntry{ID: fmt.Sprintf("%s.%d", account, i), Type: string(orders.EventBalance), Data: []byte(data)})
		}
		if _, err := logs.For(account).AppendLog(context.Background(), account, emq.LogSource{}, entries); err != nil {
			t.Error(err)
			return
		}
	}
}

// eventStream is one open GET /v1/events, read message by message.
type eventStream struct {
	response *http.Response
	next     func() (sse.Event, error, bool)
	stop     func()
}

// openEvents opens the caller's stream on the gateway at url with the
// query and header given, through the contract-checking client, and fails
// the test unless it is open.
func openEvents(t testing.TB, client *http.Client, url, key, query string, header http.Header) *eventStream {
	t.Helper()
	res := requestEvents(t, client, url, key, query, header)
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Fatalf("GET /v1/events%s: %d %s", query, res.StatusCode, body)
	}
	next, stop := iter.Pull2(sse.Read(res.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}))
	stream := &eventStream{response: res, next: next, stop: stop}
	t.Cleanup(stream.close)
	return stream
}

func requestEvents(t testing.TB, client *http.Client, url, key, query string, header http.Header) *http.Response {
	t.Helper()
	res, err := client.Do(newRequest(t, http.MethodGet, url+"/v1/events"+query, key, header, nil))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func (s *eventStream) close() {
	s.response.Body.Close()
	s.stop()
}

// position reads the stream's first message, the position it starts after.
func (s *eventStream) position(t testing.TB) int64 {
	t.Helper()
	message, err, ok := s.next()
	if !ok || err != nil || message.Data != "" {
		t.Fatalf("the stream's first message: %+v, %v, %v; want its position alone", message, err, ok)
	}
	position, err := strconv.ParseInt(message.LastEventID, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return position
}

// event reads the stream's next event; false when the stream ended.
func (s *eventStream) event(t testing.TB) (orders.Event, bool) {
	t.Helper()
	message, err, ok := s.next()
	if !ok || err != nil {
		return orders.Event{}, false
	}
	var event orders.Event
	if err := json.Unmarshal([]byte(message.Data), &event); err != nil {
		t.Fatalf("event %q: %v", message.Data, err)
	}
	return event, true
}

// expectSequences reads the events from first to last, and fails unless
// each comes in turn.
func (s *eventStream) expectSequences(t testing.TB, first, last int64) []orders.Event {
	t.Helper()
	events := make([]orders.Event, 0, last-first+1)
	for want := first; want <= last; want++ {
		event, ok := s.event(t)
		if !ok {
			t.Fatalf("the stream ended before event %d", want)
		}
		if event.Sequence != want {
			t.Fatalf("event %d, want %d", event.Sequence, want)
		}
		events = append(events, event)
	}
	return events
}

// Events appended to ten accounts reach each account's stream, every one
// in order, and no other account's.
func TestEventStreamsCarryEachAccountsOwnEventsInOrder(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 10)
	streams := make([]*eventStream, len(f.accounts))
	for i := range f.accounts {
		streams[i] = openEvents(t, f.http, f.url, f.keys[i], "", nil)
		if position := streams[i].position(t); position != 0 {
			t.Fatalf("a new account's stream starts after %d", position)
		}
	}
	const each = 40
	var appends sync.WaitGroup
	for _, account := range f.accounts {
		appends.Go(func() { appendAccountEvents(t, f.events, account, each, 3, 0) })
	}
	appends.Wait()
	for i, stream := range streams {
		for n, event := range stream.expectSequences(t, 1, each) {
			if want := fmt.Sprintf("%s.%d", f.accounts[i], n); event.ID != want || event.Type != orders.EventBalance ||
				!strings.Contains(string(event.Data), `"account":"`+f.accounts[i]+`"`) {
				t.Fatalf("account %d's event %d: %+v, want %s", i, n+1, event, want)
			}
		}
	}
	if got := parseSamples(t, f.scrape(t))["events_sent_total"]; got != strconv.Itoa(10*each) {
		t.Errorf("events_sent_total %s, want %d", got, 10*each)
	}
}

// A client that drops its stream midway and resumes after the last event
// it read, by Last-Event-ID or by ?after=, gets every later event once;
// given both, the header wins.
func TestEventStreamResumesWithoutLossOrRepeat(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	key, account := f.keys[0], f.accounts[0]
	for _, tt := range []struct {
		name   string
		query  string
		header string
	}{
		{name: "Last-Event-ID", header: "%d"},
		{name: "after", query: "?after=%d"},
		{name: "both, the header winning", query: "?after=1", header: "%d"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stream := openEvents(t, f.http, f.url, key, "", nil)
			start := stream.position(t)
			appendAccountEvents(t, f.events, account, 10, 1, 0)
			stream.expectSequences(t, start+1, start+4)
			stream.close()
			appendAccountEvents(t, f.events, account, 5, 1, 0)

			query, header := tt.query, http.Header{}
			if strings.Contains(query, "%d") {
				query = fmt.Sprintf(query, start+4)
			}
			if tt.header != "" {
				header.Set("Last-Event-ID", fmt.Sprintf(tt.header, start+4))
			}
			resumed := openEvents(t, f.http, f.url, key, query, header)
			if position := resumed.position(t); position != start+4 {
				t.Fatalf("the resumed stream starts after %d, want %d", position, start+4)
			}
			resumed.expectSequences(t, start+5, start+15)
			appendAccountEvents(t, f.events, account, 1, 1, 0)
			resumed.expectSequences(t, start+16, start+16)
		})
	}
}

// A gateway that stops ends its streams; a client resumes on a new one,
// on the same Redis, after its last event, and gets the rest.
func TestEventStreamResumesOnARestartedGateway(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	first, stop := f.startGateway(t, prometheus.NewRegistry())
	stream := openEvents(t, f.http, first, f.keys[0], "?after=0", nil)
	stream.position(t)
	appendAccountEvents(t, f.events, f.accounts[0], 6, 2, 0)
	stream.expectSequences(t, 1, 3)
	stop()
	for range 3 {
		if _, ok := stream.event(t); !ok {
			break
		}
	}
	if event, ok := stream.event(t); ok {
		t.Fatalf("the stream of a stopped gateway goes on: %+v", event)
	}
	appendAccountEvents(t, f.events, f.accounts[0], 2, 1, 0)
	second, _ := f.startGateway(t, prometheus.NewRegistry())
	resumed := openEvents(t, f.http, second, f.keys[0], "", http.Header{"Last-Event-Id": {"3"}})
	resumed.position(t)
	resumed.expectSequences(t, 4, 8)
}

// A client that stops reading is dropped once its stream's buffer is full;
// the account's other client gets every event meanwhile, each within a
// moment of its append.
func TestASlowEventStreamIsDroppedWithoutDelayingAFastOne(t *testing.T) {
	f := newFixture(t, 1)
	registry := prometheus.NewRegistry()
	url, _ := f.startGateway(t, registry, placement.WithEventBuffer(64))
	// A small receive buffer, so the gateway's writes to the slow client
	// block after a few events rather than after megabytes.
	slowClient := &http.Client{Transport: apitest.Transport(t, &http.Transport{DialContext: (&net.Dialer{
		Control: func(_, _ string, conn syscall.RawConn) error {
			var err error
			if controlErr := conn.Control(func(fd uintptr) {
				err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			}); controlErr != nil {
				return controlErr
			}
			return err
		}}).DialContext})}
	slow := openEvents(t, slowClient, url, f.keys[0], "", nil)
	slow.position(t)
	fast := openEvents(t, f.http, url, f.keys[0], "", nil)
	fast.position(t)

	// Appended a batch at a time, each once the fast client read the one
	// before, so what is timed is the gateway's delay: at a fixed pace the
	// appends outran the test's own reading under the race detector on a
	// loaded machine, and the backlog timed was the test's (over 2 s with
	// no slow client at all). The slow client reads nothing, so its stream
	// fills all the same; the events are big, so its socket is full after a
	// few.
	const total, batch = 300, 5
	var slowest time.Duration
	for want := int64(1); want <= total; {
		appendAccountEvents(t, f.events, f.accounts[0], batch, batch, 16<<10)
		for range batch {
			event, ok := fast.event(t)
			if !ok || event.Sequence != want {
				t.Fatalf("the fast stream's event %d: %+v, %v", want, event, ok)
			}
			// The event's time is Redis's clock, to the millisecond.
			slowest = max(slowest, time.Since(event.Time))
			want++
		}
	}
	if slowest > time.Second {
		t.Errorf("the fast stream got an event %v after its append", slowest)
	}
	read := 0
	for {
		if _, ok := slow.event(t); !ok {
			break
		}
		read++
	}
	if read >= total {
		t.Errorf("the slow stream got all %d events; want it dropped", read)
	}
	if got := parseSamples(t, scrapeRegistry(t, registry))["event_streams_slow_dropped_total"]; got != "1" {
		t.Errorf("event_streams_slow_dropped_total %s, want 1", got)
	}
	t.Logf("the slow stream got %d of %d events; the fast one each within %v", read, total, slowest)
}

// A position the stream cannot resume from is answered 410 with the last
// sequence to resume after once the state is read again: one past the
// retention, and one past the last event; a malformed one is answered 400.
func TestEventStreamRefusesPositionsItCannotResume(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	// Archived, the log keeps its newest 3: the older ones drop (the
	// fixture's streams read no history).
	appendAccountEvents(t, f.events, f.accounts[0], 10, 1, 0)
	if _, err := f.events.For(f.accounts[0]).MarkLogsArchived(context.Background(), []emq.LogMark{{Group: f.accounts[0], Archived: 10}}, emq.LogHotTail{Count: 3, Age: time.Hour}); err != nil {
		t.Fatal(err)
	}
	first, last, err := f.events.For(f.accounts[0]).LogBounds(context.Background(), f.accounts[0])
	if err != nil || first < 3 || last != 10 {
		t.Fatalf("log holds %d to %d, %v; want the oldest dropped", first, last, err)
	}
	position := func(n int64) string { return strconv.FormatInt(n, 10) }
	for _, tt := range []struct {
		name        string
		query       string
		lastEventID []string
		status      int
		problem     string
	}{
		{name: "the start, dropped", query: "?after=0", status: http.StatusGone, problem: "events-expired"},
		{name: "the last dropped", lastEventID: []string{position(first - 2)}, status: http.StatusGone, problem: "events-expired"},
		{name: "past the last", query: "?after=" + position(last+1), status: http.StatusGone, problem: "events-expired"},
		{name: "past the last, by the header", query: "?after=" + position(last), lastEventID: []string{position(last + 1)}, status: http.StatusGone, problem: "events-expired"},
		{name: "a negative after", query: "?after=-1", status: http.StatusBadRequest, problem: "invalid-query"},
		{name: "a leading zero", query: "?after=01", status: http.StatusBadRequest, problem: "invalid-query"},
		{name: "after twice", query: "?after=1&after=2", status: http.StatusBadRequest, problem: "invalid-query"},
		{name: "after too big", query: "?after=9223372036854775808", status: http.StatusBadRequest, problem: "invalid-query"},
		{name: "another parameter", query: "?since=1", status: http.StatusBadRequest, problem: "invalid-query"},
		{name: "a Last-Event-ID not a number", lastEventID: []string{"ev-4"}, status: http.StatusBadRequest, problem: "invalid-header"},
		{name: "two Last-Event-IDs", lastEventID: []string{"4", "5"}, status: http.StatusBadRequest, problem: "invalid-header"},
		{name: "a bad header beside a good query", query: "?after=4", lastEventID: []string{"4.0"}, status: http.StatusBadRequest, problem: "invalid-header"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := requestEvents(t, f.http, f.url, f.keys[0], tt.query, http.Header{"Last-Event-Id": tt.lastEventID})
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var problem gateway.Problem
			if err := json.Unmarshal(body, &problem); err != nil || res.StatusCode != tt.status || problem.Type != "urn:ordergate:problem:"+tt.problem {
				t.Fatalf("%d %s, want %d %s", res.StatusCode, body, tt.status, tt.problem)
			}
			if tt.status == http.StatusGone && (problem.LastSequence == nil || *problem.LastSequence != last) {
				t.Errorf("last_sequence %v, want %d: %s", problem.LastSequence, last, body)
			}
		})
	}
	stream := openEvents(t, f.http, f.url, f.keys[0], "?after="+position(first-1), nil)
	stream.position(t)
	stream.expectSequences(t, first, last)
}

// An idle stream carries a heartbeat comment every EventHeartbeat.
func TestEventStreamHeartbeatsWhenIdle(t *testing.T) {
	config := gateway.DefaultConfig()
	config.EventHeartbeat = 50 * time.Millisecond
	f := newFixtureWith(t, 1, config)
	res := requestEvents(t, f.http, f.url, f.keys[0], "", nil)
	defer res.Body.Close()
	for name, want := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := res.Header.Get(name); got != want {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	lines := bufio.NewScanner(res.Body)
	var read []string
	for len(read) < 6 && lines.Scan() {
		read = append(read, lines.Text())
	}
	if want := []string{"id: 0", "", ": heartbeat", "", ": heartbeat", ""}; !slices.Equal(read, want) {
		t.Errorf("an idle stream reads %q, want %q", read, want)
	}
}

// The stream needs an API key with the read scope, as the other reads do.
func TestEventStreamNeedsAKeyThatReads(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 0)
	tradeOnly := newFixtureKey(t, f, orders.KeySpec{Scopes: orders.ScopeTrade}).Key.Reveal()
	for _, tt := range []struct {
		name, key string
		status    int
		problem   string
	}{
		{"no key", "", http.StatusUnauthorized, "unauthorized"},
		{"an unknown key", "ogk_unknown", http.StatusUnauthorized, "unauthorized"},
		{"a trade-only key", tradeOnly, http.StatusForbidden, "forbidden"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := requestEvents(t, f.http, f.url, tt.key, "", nil)
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.status || !strings.Contains(string(body), "urn:ordergate:problem:"+tt.problem) {
				t.Errorf("%d %s, want %d %s", res.StatusCode, body, tt.status, tt.problem)
			}
		})
	}
}

// A stream outlives the HTTP server's read and write timeouts, and a
// shutdown ends it rather than waits for it.
func TestEventStreamOutlivesServerTimeoutsAndEndsAtShutdown(t *testing.T) {
	config := gateway.DefaultConfig()
	config.EventHeartbeat = 50 * time.Millisecond
	f := newFixtureWith(t, 1, config)
	deps := f.deps
	deps.Metrics = prometheus.NewRegistry()
	deps.Events = placement.NewEventStreams(f.events, placement.WithEventTailBlock(eventTailBlock))
	server := gateway.NewHTTPServer("127.0.0.1:0", gateway.New(deps, config), deps.Logger)
	server.ReadTimeout, server.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	server.RegisterOnShutdown(deps.Events.Close)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- server.Serve(listener) }()
	t.Cleanup(func() { _ = server.Close() })

	stream := openEvents(t, f.http, "http://"+listener.Addr().String(), f.keys[0], "", nil)
	stream.position(t)
	time.Sleep(600 * time.Millisecond)
	appendAccountEvents(t, f.events, f.accounts[0], 1, 1, 0)
	stream.expectSequences(t, 1, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := server.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v after %v", err, time.Since(start))
	}
	if event, ok := stream.event(t); ok {
		t.Errorf("the stream goes on after shutdown: %+v", event)
	}
	if err := <-served; err != http.ErrServerClosed {
		t.Errorf("serve: %v", err)
	}
}

// A thousand streams on one gateway all get their accounts' events, and
// the gateway reads them over a few Redis connections, not one a stream.
// On the cluster and Valkey legs (testserver.RerunLeg) 200 streams of 50
// accounts do: five times the 40 connections allowed, and more accounts
// than that, so one connection a stream or one an account still fails;
// the first leg opens the thousand (5 s there, 24 s on the cluster).
func TestAThousandEventStreamsShareAFewRedisConnections(t *testing.T) {
	testserver.Parallel(t)
	accounts, perAccount := 50, 20
	if testing.Short() {
		accounts, perAccount = 10, 10
	} else if testserver.RerunLeg() {
		accounts, perAccount = 50, 4
	}
	// Every stream holds its seats: the caps sized to let them all open.
	config := gateway.DefaultConfig()
	config.EventStreamsPerKey, config.EventStreamsPerAddress = perAccount, accounts*perAccount
	f := newFixtureWith(t, accounts, config)
	// A transport of its own: the default one would keep 1,000
	// connections apart only by chance.
	transport := &http.Transport{MaxIdleConnsPerHost: -1}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: apitest.Transport(t, transport)}
	streams := make([][]*bufio.Reader, accounts)
	for i := range accounts {
		for range perAccount {
			res := requestEvents(t, client, f.url, f.keys[i], "", nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("stream %d: %d", len(streams[i]), res.StatusCode)
			}
			t.Cleanup(func() { res.Body.Close() })
			streams[i] = append(streams[i], bufio.NewReader(res.Body))
		}
	}
	if got := parseSamples(t, f.scrape(t))["event_streams_open"]; got != strconv.Itoa(accounts*perAccount) {
		t.Errorf("event_streams_open %s, want %d", got, accounts*perAccount)
	}
	for _, account := range f.accounts {
		appendAccountEvents(t, f.events, account, 2, 2, 0)
	}
	for i, readers := range streams {
		for _, reader := range readers {
			want := fmt.Sprintf(`"id":"%s.1"`, f.accounts[i])
			if err := readUntilLine(reader, want, 10*time.Second); err != nil {
				t.Fatalf("account %d: %v", i, err)
			}
		}
	}
	connected := connectedClients(t, f.rdb)
	if connected == 0 || connected > 40 {
		t.Errorf("%d Redis connections for %d streams, want a few", connected, accounts*perAccount)
	}
	t.Logf("%d streams, %d Redis connections", accounts*perAccount, connected)
}

// connectedClients is INFO clients' connected_clients, summed over the
// masters on a cluster: rdb.Info would ask one node.
func connectedClients(t testing.TB, rdb redis.UniversalClient) int {
	t.Helper()
	ctx := context.Background()
	var infos []string
	var mu sync.Mutex
	read := func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "clients").Result()
		mu.Lock()
		infos = append(infos, info)
		mu.Unlock()
		return err
	}
	var err error
	if cluster, ok := rdb.(*redis.ClusterClient); ok {
		err = cluster.ForEachMaster(ctx, read)
	} else {
		err = read(ctx, rdb.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
	connected := 0
	for _, info := range infos {
		for line := range strings.Lines(info) {
			if value, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
				n, _ := strconv.Atoi(value)
				connected += n
			}
		}
	}
	return connected
}

// readUntilLine reads lines until one holds want, for at most timeout.
func readUntilLine(reader *bufio.Reader, want string, timeout time.Duration) error {
	found := make(chan error, 1)
	go func() {
		for {
			line, err := reader.ReadString('\n')
			if err != nil {
				found <- err
				return
			}
			if strings.Contains(line, want) {
				found <- nil
				return
			}
		}
	}()
	select {
	case err := <-found:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("no line with %s within %v", want, timeout)
	}
}
