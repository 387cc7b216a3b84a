package coherence

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A fill wakes the reads parked on its reservation (inside
// LocalCache.FulfillOwned): they find the entry's deadline recorded, not
// a fresh entry to count expired and delete.
func TestWaitersWokenByAFillFindItsDeadline(t *testing.T) {
	c, err := newTrackedCache(TrackingConfig{Entries: 1000, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	misses := 0
	for round := range 200 {
		key := "k" + strconv.Itoa(round)
		token, fetch := c.Reserve(key, []string{key})
		if !fetch {
			t.Fatal("no reservation")
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 8 {
			wg.Go(func() {
				if _, ok := c.Get(ctx, key); !ok {
					mu.Lock()
					misses++
					mu.Unlock()
				}
			})
		}
		time.Sleep(2 * time.Millisecond) // the Gets park on the reservation
		if !c.FulfillOwned(key, token, 1, []byte("v")) {
			t.Fatal("fill refused")
		}
		wg.Wait()
		c.DeleteByCacheKey(key)
	}
	if misses > 0 || c.expired.Load() > 0 {
		t.Errorf("waiters of a fill answered miss %d times, %d fresh entries counted expired and deleted", misses, c.expired.Load())
	}
}
