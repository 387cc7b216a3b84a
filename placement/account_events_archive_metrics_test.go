package placement_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestArchiveGaugesHaveAShardEach: a worker's archivers, one per shard of
// the accounts' logs, share one registry; each shard's lag and backlog are
// a series of their own, labelled with the shard, rather than one gauge the
// archivers overwrite in turn.
func TestArchiveGaugesHaveAShardEach(t *testing.T) {
	testserver.Parallel(t)
	client, err := emq.Connect(context.Background(), testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	history := newArchiveFixture(t).history
	registry := prometheus.NewRegistry()
	busy, idle := client.Queue(placement.EventsQueuePrefix+"1"), client.Queue(placement.EventsQueuePrefix+"0")
	appendEvents(t, busy, "a", 7)
	// An hour's delay: the busy shard's events stay behind.
	for _, queue := range []*emq.Queue{busy, idle} {
		archiver := placement.NewEventArchiver(queue, history, nil, placement.WithArchiveDelay(time.Hour),
			placement.WithArchiveMetrics(registry))
		pass(t, archiver)
	}
	got := gaugesByShard(t, registry)
	behind := got["events_archive_behind"]
	if len(behind) != 2 || behind[busy.Name()] != 7 || behind[idle.Name()] != 0 {
		t.Errorf("events_archive_behind by shard: %v; want %s 7, %s 0", behind, busy.Name(), idle.Name())
	}
	if lag := got["events_archive_lag_seconds"]; len(lag) != 2 || lag[busy.Name()] <= 0 || lag[idle.Name()] != 0 {
		t.Errorf("events_archive_lag_seconds by shard: %v", lag)
	}
}

// TestArchiveGaugesEndWithTheirArchiver: a shard's lag and backlog are
// reported while its archiver runs and deleted when it stops, so a worker
// whose shard went to another no longer reports the shard as behind.
func TestArchiveGaugesEndWithTheirArchiver(t *testing.T) {
	testserver.Parallel(t)
	client, err := emq.Connect(context.Background(), testserver.QueueRedis(t))
	if err != nil {
		t.Fatal(err)
	}
	history := newArchiveFixture(t).history
	registry := prometheus.NewRegistry()
	shard := client.Queue(placement.EventsQueuePrefix + "2")
	appendEvents(t, shard, "a", 3)
	archiver := placement.NewEventArchiver(shard, history, nil, placement.WithArchiveDelay(time.Hour),
		placement.WithArchiveMetrics(registry))
	behind := func() (float64, bool) {
		value, ok := gaugesByShard(t, registry)["events_archive_behind"][shard.Name()]
		return value, ok
	}
	stop := runArchiver(t, archiver)
	waitFor(t, 10*time.Second, "events_archive_behind of "+shard.Name()+" at 3 while its archiver runs", func() bool {
		value, ok := behind()
		return ok && value == 3
	})
	stop()
	if value, ok := behind(); ok {
		t.Errorf("events_archive_behind of %s is %v after its archiver stopped; want no series", shard.Name(), value)
	}
}

// gaugesByShard gathers registry's gauges labelled with a shard: by family
// name, then by shard.
func gaugesByShard(t testing.TB, registry *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]float64{}
	for _, family := range families {
		for _, metric := range family.GetMetric() {
			for _, label := range metric.GetLabel() {
				if label.GetName() == "shard" {
					if got[family.GetName()] == nil {
						got[family.GetName()] = map[string]float64{}
					}
					got[family.GetName()][label.GetValue()] = metric.GetGauge().GetValue()
				}
			}
		}
	}
	return got
}
