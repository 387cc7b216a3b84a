package placement_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// runArchiver runs archiver until the test ends, or until the func it
// returns is called, which returns once Run did.
func runArchiver(t testing.TB, archiver *placement.EventArchiver) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		archiver.Run(ctx)
	}()
	stop = func() { cancel(); <-ran }
	t.Cleanup(stop)
	return stop
}

// The archivers' pace does not bound what one account has archived: an
// account with more events than a pass archives (a market maker on the
// other side of most fills) is archived pass after pass, Run going on at
// once after a pass that left it due. A pass a pace would take four paces
// more for the five passes' worth here; Run takes well under three.
func TestRunArchivesABusyAccountFasterThanItsPace(t *testing.T) {
	testserver.Parallel(t)
	const perPass = placement.ArchiveRounds * placement.EventChunk
	const events = 5 * perPass
	f := newArchiveFixture(t)
	appendEventsBy(t, f.queue, "busy", events, placement.EventChunk)
	// An hour's delay: Run keeps its own pace, and only a chunk's worth is
	// due at once.
	archiver := f.archiver(nil, emq.LogHotTail{Count: 5, Age: time.Hour}, placement.WithArchiveDelay(time.Hour))
	start := time.Now()
	runArchiver(t, archiver)
	bound := 3 * placement.ArchivePace
	waitFor(t, bound, strconv.Itoa(events)+" events of one account archived", func() bool {
		archived, err := f.queue.LogsArchived(context.Background(), []string{"busy"})
		if err != nil {
			t.Fatal(err)
		}
		return archived["busy"] == events
	})
	t.Logf("%d events of one account archived in %v at a pace of %v", events, time.Since(start).Round(time.Millisecond), placement.ArchivePace)
	f.historyOf(t, "busy", events)
}
