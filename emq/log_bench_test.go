package emq_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/cputime"
)

// BenchmarkAppendLogs appends as the outbox relay does: a round trip of
// many accounts' events rows (a source each, a few entries a row). It
// reports the CPU each append costs Redis and this process, which a
// loaded machine's wall time would hide.
func BenchmarkAppendLogs(b *testing.B) {
	for _, perTrip := range []int{1, 11, 64} {
		b.Run(fmt.Sprintf("appends=%d", perTrip), func(b *testing.B) {
			ctx := context.Background()
			queue, rdb := newQueue(b)
			data := []byte(`{"id":"ORD_01M93ZAQFQQ3NHBNW6QC3YWKCS","state":"filled","filled":"0.25000000","price":"61234.50"}` + strings.Repeat(" ", 200))
			appends := make([]emq.LogAppend, perTrip)
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			redisCPU, selfCPU := serverCPU(b, rdb), cputime.Process(b)
			b.ResetTimer()
			for n := 0; n < b.N; n += perTrip {
				for i := range appends {
					account := "acct-" + strconv.Itoa((n+i)%1000)
					entries := make([]emq.LogEntry, 1+(n+i)%3)
					for j := range entries {
						entries[j] = emq.LogEntry{ID: account + "." + strconv.Itoa(n) + "." + strconv.Itoa(j), Type: "order.state", Data: data}
					}
					appends[i] = emq.LogAppend{Group: account, Source: emq.LogSource{Name: "events:" + account, Version: int64((n+i)/1000 + 1)}, Entries: entries}
				}
				if _, err := queue.AppendLogs(ctx, appends); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			appended := float64((b.N + perTrip - 1) / perTrip * perTrip)
			if cpu := serverCPU(b, rdb); cpu > 0 {
				b.ReportMetric((cpu-redisCPU)*1e6/appended, "redis-µs/append")
			}
			b.ReportMetric(float64(cputime.Process(b)-selfCPU)/float64(time.Microsecond)/appended, "client-µs/append")
			b.ReportMetric(float64(commandCalls(b, rdb))/appended, "commands/append")
		})
	}
}

// serverCPU is the seconds of CPU the Redis server has used; 0 on a
// cluster, whose INFO answers for one node.
func serverCPU(tb testing.TB, rdb redis.UniversalClient) float64 {
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		return 0
	}
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			seconds, _ := strconv.ParseFloat(value, 64)
			total += seconds
		}
	}
	return total
}
