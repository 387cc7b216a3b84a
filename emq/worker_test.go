package emq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/cputime"
	"github.com/ordergate/ordergate/testkit/logbuffer"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// workerLogger returns a debug-level JSON logger whose lines the test prints
// only when it fails, so passing runs stay quiet.
func workerLogger(t testing.TB) (*slog.Logger, *logbuffer.Buffer) {
	t.Helper()
	logs := &logbuffer.Buffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	return slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), logs
}

// runningWorker is a Queue.Work running in a goroutine.
type runningWorker struct {
	cancel  context.CancelFunc
	result  chan error
	once    sync.Once
	err     error
	stopped time.Duration
}

// startWorker runs queue.Work until the test stops it or ends.
func startWorker(t testing.TB, queue *emq.Queue, handler emq.Handler, opts emq.WorkerOptions) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	worker := &runningWorker{cancel: cancel, result: make(chan error, 1)}
	go func() { worker.result <- queue.Work(ctx, handler, opts) }()
	t.Cleanup(func() { worker.stop(t) })
	return worker
}

// stop cancels Work's context and returns Work's result and how long it took
// to return.
func (w *runningWorker) stop(t testing.TB) (time.Duration, error) {
	t.Helper()
	w.once.Do(func() {
		began := time.Now()
		w.cancel()
		select {
		case w.err = <-w.result:
			w.stopped = time.Since(began)
		case <-time.After(30 * time.Second):
			t.Fatal("Work did not return 30s after its context was cancelled")
		}
	})
	return w.stopped, w.err
}

// completions counts the completions a worker reports through OnComplete.
type completions struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *completions) record(job emq.Claim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[string]int)
	}
	c.counts[job.ID]++
}

func (c *completions) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[id]
}

func (c *completions) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.counts {
		total += n
	}
	return total
}

func eventually(t testing.TB, timeout time.Duration, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// admitPayloads admits one test.job per payload into group's lane and
// returns their ids in order.
func admitPayloads(t testing.TB, queue *emq.Queue, group string, payloads ...string) []string {
	t.Helper()
	ids := make([]string, len(payloads))
	for i, payload := range payloads {
		ids[i] = fmt.Sprintf("%s-%04d", group, i)
		if _, err := queue.Admit(context.Background(), emq.Job{ID: ids[i], Kind: "test.job", Group: group, Payload: []byte(payload)}); err != nil {
			t.Fatalf("admit %s: %v", ids[i], err)
		}
	}
	return ids
}

func repeated(payload string, n int) []string {
	payloads := make([]string, n)
	for i := range payloads {
		payloads[i] = payload
	}
	return payloads
}

func readJob(t testing.TB, queue *emq.Queue, id string) emq.JobInfo {
	t.Helper()
	info, err := queue.Job(context.Background(), id)
	if err != nil {
		t.Fatalf("read job %s: %v", id, err)
	}
	return info
}

// queueSizes counts the queue's sorted sets: pending, active, delayed, dead
// and done.
func queueSizes(t testing.TB, rdb redis.UniversalClient, queue *emq.Queue) map[string]int64 {
	t.Helper()
	sizes := make(map[string]int64)
	for _, set := range []string{"pending", "active", "delayed", "dead", "done"} {
		n, err := rdb.ZCard(context.Background(), queue.Key(set)).Result()
		if err != nil {
			t.Fatalf("ZCARD %s: %v", set, err)
		}
		sizes[set] = n
	}
	return sizes
}

// payloadHandler acts as each job's payload says: "ok" succeeds at once,
// "sleep=<d>" succeeds after d unless cancelled, "block" waits for its
// context to end and then returns nil (a result the worker must drop),
// "stubborn=<d>" ignores its context for d.
func payloadHandler(started chan<- emq.Claim, causes chan<- error) emq.Handler {
	return func(ctx context.Context, job emq.Claim) error {
		if started != nil {
			started <- job
		}
		payload := string(job.Payload)
		switch {
		case payload == "ok":
			return nil
		case payload == "block":
			<-ctx.Done()
			if causes != nil {
				causes <- context.Cause(ctx)
			}
			return nil
		case strings.HasPrefix(payload, "sleep="):
			took, _ := time.ParseDuration(strings.TrimPrefix(payload, "sleep="))
			select {
			case <-time.After(took):
				return nil
			case <-ctx.Done():
				if causes != nil {
					causes <- context.Cause(ctx)
				}
				return context.Cause(ctx)
			}
		case strings.HasPrefix(payload, "stubborn="):
			took, _ := time.ParseDuration(strings.TrimPrefix(payload, "stubborn="))
			time.Sleep(took)
			return nil
		}
		return emq.Permanent(fmt.Errorf("unknown payload %q", payload))
	}
}

// quickToGiveUp returns a client that fails a call to a stopped server in
// about 100ms. With go-redis's defaults each call spends ~1.7s retrying the
// dial, which hides a short outage from the worker entirely.
func quickToGiveUp(t testing.TB, server *testserver.Redis) redis.UniversalClient {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr: server.Addr, DialTimeout: 200 * time.Millisecond, DialerRetries: 1,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, PoolTimeout: 500 * time.Millisecond,
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// queueOn connects to rdb and returns the test queue, made with opts, for
// tests that need a server or queue options of their own.
func queueOn(t testing.TB, rdb redis.UniversalClient, opts ...emq.QueueOption) (*emq.Queue, redis.UniversalClient) {
	t.Helper()
	client, err := emq.Connect(context.Background(), rdb)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	queue := client.Queue("work", opts...)
	if err := queue.Declare(context.Background(), "test.job"); err != nil {
		t.Fatalf("declare: %v", err)
	}
	return queue, rdb
}

func TestWorkRefusesBadOptions(t *testing.T) {
	testserver.Parallel(t)
	queue, _ := newQueue(t)
	tests := []struct {
		name    string
		handler emq.Handler
		opts    emq.WorkerOptions
		want    string
	}{
		{name: "no handler", opts: emq.WorkerOptions{}, want: "no handler"},
		{name: "lease too short", handler: payloadHandler(nil, nil), opts: emq.WorkerOptions{Lease: time.Millisecond}, want: "under the minimum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := queue.Work(context.Background(), tt.handler, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Work = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	errDeclined := errors.New("card declined")
	tests := []struct {
		name          string
		err           error
		wantPermanent bool
		wantText      string
	}{
		{name: "marked", err: emq.Permanent(errDeclined), wantPermanent: true, wantText: "card declined"},
		{name: "wrapped after marking", err: fmt.Errorf("settle: %w", emq.Permanent(errDeclined)), wantPermanent: true, wantText: "settle: card declined"},
		{name: "plain", err: errDeclined, wantText: "card declined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, emq.ErrPermanent); got != tt.wantPermanent {
				t.Errorf("errors.Is(err, ErrPermanent) = %v, want %v", got, tt.wantPermanent)
			}
			if !errors.Is(tt.err, errDeclined) {
				t.Error("the marked error no longer wraps its cause")
			}
			if tt.err.Error() != tt.wantText {
				t.Errorf("text = %q, want %q", tt.err.Error(), tt.wantText)
			}
		})
	}
	if emq.Permanent(nil) != nil {
		t.Error("Permanent(nil) is not nil")
	}
}

// gathered returns every sample of registry by metric name; a histogram
// contributes its observation count as <name>_count and their sum as
// <name>_sum.
func gathered(t testing.TB, registry *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	values := make(map[string]float64)
	for _, family := range families {
		for _, metric := range family.GetMetric() {
			switch {
			case metric.GetCounter() != nil:
				values[family.GetName()] += metric.GetCounter().GetValue()
			case metric.GetGauge() != nil:
				values[family.GetName()] += metric.GetGauge().GetValue()
			case metric.GetHistogram() != nil:
				values[family.GetName()+"_count"] += float64(metric.GetHistogram().GetSampleCount())
				values[family.GetName()+"_sum"] += metric.GetHistogram().GetSampleSum()
			}
		}
	}
	return values
}

// BenchmarkWorkClaimComplete measures the runtime's throughput: claim,
// run, complete, per job, with a no-op handler and with one that decodes
// its payload as settlement's does (encoding/json, whose reflection grows
// the stack of the goroutine it runs on).
func BenchmarkWorkClaimComplete(b *testing.B) {
	type order struct {
		ID, Account, Symbol, Side, Type, Quantity, Price string
		Created                                          time.Time
	}
	payload := []byte(`{"ID":"ORD_01J9Z7W2X3Y4Z5A6B7C8D9E0F1","Account":"ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1",` +
		`"Symbol":"BTC-USD","Side":"buy","Type":"limit","Quantity":"0.010","Price":"50000.00",` +
		`"Created":"2025-01-01T00:00:00.123456789Z"}`)
	for _, tc := range []struct {
		name    string
		handler emq.Handler
	}{
		{"no-op", func(context.Context, emq.Claim) error { return nil }},
		{"json", func(_ context.Context, claim emq.Claim) error {
			var o order
			return json.Unmarshal(claim.Payload, &o)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) { benchmarkWork(b, payload, tc.handler) })
	}
}

func benchmarkWork(b *testing.B, payload []byte, handler emq.Handler) {
	queue, rdb := newQueue(b)
	jobs := make([]emq.Job, b.N)
	for i := range jobs {
		jobs[i] = emq.Job{ID: fmt.Sprintf("bench-%07d", i), Kind: "test.job", Group: fmt.Sprintf("g%d", i%50), Payload: payload}
	}
	for start := 0; start < len(jobs); start += 1000 {
		_, errs := queue.AdmitMany(context.Background(), jobs[start:min(start+1000, len(jobs))])
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
	}
	var completed atomic.Int64
	all := make(chan struct{})
	logger := slog.New(slog.NewJSONHandler(&logbuffer.Buffer{}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	redisCPU, selfCPU := serverCPU(b, rdb), cputime.Process(b)
	b.ResetTimer()
	worker := startWorker(b, queue, handler, emq.WorkerOptions{
		Concurrency: 32, Logger: logger,
		OnComplete: func(emq.Claim) {
			if completed.Add(1) == int64(b.N) {
				close(all)
			}
		},
	})
	<-all
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	// CPU per job, which a loaded machine's wall time would hide.
	if cpu := serverCPU(b, rdb); cpu > 0 {
		b.ReportMetric((cpu-redisCPU)*1e6/float64(b.N), "redis-µs/job")
	}
	b.ReportMetric(float64(cputime.Process(b)-selfCPU)/float64(time.Microsecond)/float64(b.N), "client-µs/job")
	worker.stop(b)
	if n, _ := rdb.ZCard(context.Background(), queue.Key("done")).Result(); n != int64(min(b.N, emq.DefaultRetention)) {
		b.Fatalf("done = %d, want %d", n, b.N)
	}
}
