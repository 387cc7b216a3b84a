package placement_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/cputime"
)

// BenchmarkArchivePass is one pass of the event archiver on real Redis and
// PostgreSQL: each op appends events to each of accounts logs (not timed),
// then a pass archives them all (read, written as one chunk an account,
// marked). It reports the process's CPU (user + system, the pass alone) per
// event archived, where ns/op is mostly the servers' time.
func BenchmarkArchivePass(b *testing.B) {
	for _, c := range []struct{ accounts, events int }{{1, 64}, {8, 64}, {32, 128}} {
		b.Run("accounts="+strconv.Itoa(c.accounts)+"/events="+strconv.Itoa(c.events), func(b *testing.B) {
			f := newArchiveFixture(b)
			archiver := f.archiver(nil, emq.DefaultLogHotTail)
			ctx := context.Background()
			// An order's event as the relay appends it, about its size.
			data := []byte(`{"id":"ORD01JEXAMPLE0000000000000000","client_order_id":"c-123456","instrument":"BTC-USD","side":"buy",` +
				`"type":"limit","time_in_force":"gtc","price":"64123.45","quantity":"0.01500000","filled_quantity":"0.00500000",` +
				`"remaining_quantity":"0.01000000","average_price":"64120.00","status":"partially_filled",` +
				`"created_at":"2026-12-06T20:00:00.123Z","updated_at":"2026-12-06T20:00:00.456Z","` + strings.Repeat("x", 60) + `":1}`)
			appends := make([]emq.LogAppend, c.accounts)
			for i := range appends {
				entries := make([]emq.LogEntry, c.events)
				for j := range entries {
					entries[j] = emq.LogEntry{ID: "ev-" + strconv.Itoa(j), Type: string(orders.EventOrderPartiallyFilled), Data: data}
				}
				appends[i] = emq.LogAppend{Group: "acct-" + strconv.Itoa(i), Entries: entries}
			}
			pass(b, archiver) // the change stream's share, first plans
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				if _, err := f.queue.AppendLogs(ctx, appends); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				before := cputime.Process(b)
				if err := archiver.Pass(ctx, time.Millisecond); err != nil {
					b.Fatal(err)
				}
				cpu += cputime.Process(b) - before
				b.StopTimer()
				archived, err := f.queue.LogsArchived(ctx, []string{appends[0].Group, appends[len(appends)-1].Group})
				if err != nil {
					b.Fatal(err)
				}
				_, last := logBounds(b, f.queue, appends[0].Group)
				if archived[appends[0].Group] != last || archived[appends[len(appends)-1].Group] != last {
					b.Fatalf("a pass left events: archived %v, last %d", archived, last)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu)/float64(b.N*c.accounts*c.events), "cpu-ns/event")
		})
	}
}
