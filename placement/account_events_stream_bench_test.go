package placement

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/cputime"
)

// BenchmarkHandToReaders is the tail loop's handoff of a read to the
// subscriptions' readers, without Redis: each op hands batch events of
// one of the accounts, each followed by one reader goroutine that takes
// the events at hand together, as a stream does (gateway/events.go).
func BenchmarkHandToReaders(b *testing.B) {
	for _, batch := range []int{1, 4} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			const accounts = 64
			e := &eventShard{buffer: DefaultEventBuffer, followed: map[string]*followedAccount{}, tailing: true}
			e.stop, e.cease = context.WithCancel(context.Background())
			defer e.cease()
			ctx := context.Background()
			names := make([]string, accounts)
			var readers sync.WaitGroup
			// taken counts the events the readers took, so the handing
			// stays within their buffers.
			var taken atomic.Int64
			for i := range names {
				names[i] = "acct-" + strconv.Itoa(i)
				s := e.subscription(names[i], 0)
				s.stage = following
				if err := e.join(s); err != nil {
					b.Fatal(err)
				}
				// Each account gets every accounts-th op's events.
				want := int64(batch * ((b.N + accounts - 1 - i) / accounts))
				readers.Add(1)
				go func() {
					defer readers.Done()
					for s.Position() < want {
						if _, ok, err := s.Next(ctx, time.Second); err != nil {
							b.Error(err)
							return
						} else if ok {
							taken.Add(1)
						}
						for s.Ready() {
							if _, ok, err := s.Next(ctx, 0); err != nil {
								b.Error(err)
								return
							} else if ok {
								taken.Add(1)
							}
						}
					}
				}()
			}
			data := []byte(`{"id":"0192d5c1-7a3b-7c4d-9e8f-123456789abc","status":"filled"}`)
			sequences := make([]int64, accounts)
			b.ReportAllocs()
			b.ResetTimer()
			before := cputime.Process(b)
			for n := range b.N {
				for int64(n*batch)-taken.Load() > DefaultEventBuffer/2 {
					time.Sleep(100 * time.Microsecond)
				}
				name := names[n%accounts]
				entries := make([]emq.LogEvent, batch)
				for j := range entries {
					sequences[n%accounts]++
					entries[j] = emq.LogEvent{Sequence: sequences[n%accounts], ID: "e", Type: "order.filled", At: time.UnixMilli(1), Data: data}
				}
				e.hand(map[string][]emq.LogEvent{name: entries}, map[string]int64{name: sequences[n%accounts] - int64(batch)})
			}
			readers.Wait()
			// The process's CPU, readers' and handing's, rather than wall
			// time, which a shared machine stretches.
			b.ReportMetric(float64(cputime.Process(b)-before)/float64(b.N*batch), "cpu-ns/event")
		})
	}
}
