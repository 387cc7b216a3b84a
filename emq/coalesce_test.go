package emq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// roundTrips counts what a go-redis client sends: single commands and
// pipelines.
type roundTrips struct {
	commands, pipelines atomic.Int64
}

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.commands.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.pipelines.Add(1)
		return next(ctx, cmds)
	}
}

// TestConcurrentCallsShareRoundTrips: admissions and permit takes made at
// once by many callers travel in fewer pipelines than there are calls, and
// each caller still gets its own answer.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	rdb := testserver.StartRedis(t).Client(t)
	counter := &roundTrips{}
	rdb.AddHook(counter)
	queue, _ := queueOn(t, rdb)
	const callers = 200
	tests := []struct {
		name string
		call func(i int) error
	}{
		{"admit", func(i int) error {
			admission, err := queue.Admit(ctx, job(fmt.Sprintf("J%03d", i), "g", ""))
			if err == nil && (admission.Duplicate || admission.ID != fmt.Sprintf("J%03d", i)) {
				err = fmt.Errorf("admission %+v", admission)
			}
			return err
		}},
		{"take permit", func(i int) error {
			take, err := queue.TakePermit(ctx, fmt.Sprintf("bucket-%d", i%2), emq.Rate{Capacity: callers, PerSecond: 1})
			if err == nil && !take.Allowed {
				err = fmt.Errorf("refused: %+v", take)
			}
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			counter.pipelines.Store(0)
			var wg sync.WaitGroup
			release := make(chan struct{})
			errs := make([]error, callers)
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-release
					errs[i] = tt.call(i)
				}()
			}
			close(release)
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if pipelines := counter.pipelines.Load(); pipelines >= callers {
				t.Errorf("%d calls took %d pipelines, want fewer", callers, pipelines)
			}
		})
	}
}

// TestClosedClientRefusesCalls: a call after Close is refused with
// ErrClosed instead of waiting forever for a sender.
func TestClosedClientRefusesCalls(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	client, err := emq.Connect(ctx, testserver.StartRedis(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	queue := client.Queue("work")
	if err := queue.Declare(ctx, "test.job"); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Admit(ctx, job("J1", "g", "")); err != nil {
		t.Fatal(err)
	}
	_ = client.Close()
	if _, err := queue.Admit(ctx, job("J2", "g", "")); !errors.Is(err, emq.ErrClosed) {
		t.Errorf("admit after close: %v, want ErrClosed", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := queue.TakePermit(cancelled, "b", emq.Rate{Capacity: 1, PerSecond: 1}); !errors.Is(err, context.Canceled) && !errors.Is(err, emq.ErrClosed) {
		t.Errorf("take permit with a cancelled context: %v", err)
	}
}
