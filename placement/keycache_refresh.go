package placement

import (
	"context"
	"crypto/sha256"
	"errors"
	"time"

	"github.com/ordergate/ordergate/orders"
)

// RefreshAhead refreshes the copies of the keys requests use before they
// expire, off the requests' path, until ctx ends: a request that finds its
// key's copy in its last refresh window (half the ttl) queues the key, and
// the loop looks the keys queued up together, one round trip for up to
// maxRefreshBatch of them (the cache's KeyLookup a KeysLookup; one at a
// time otherwise). A client sending at least one request a refresh window
// then never waits on PostgreSQL for its key; a key not used in the window
// expires as before, so idle keys cost nothing. A refresh's answer is kept
// under the rules of a request's lookup (docs/operations.md, "Accounts,
// keys and funds"): the copy still answers only until it expires, a
// refresh that raced a revocation is dropped, and a failed one leaves its
// copies to expire, not refreshed again, so the request path then behaves
// as without the refresher (stale-if-error included). A refresh's lookup may take until
// the copies would expire (a refresh window): they answer meanwhile.
// Without a RefreshAhead running nothing is queued.
func (c *KeyCache) RefreshAhead(ctx context.Context) {
	c.refreshers.Add(1)
	defer func() {
		if c.refreshers.Add(-1) == 0 {
			c.refreshMu.Lock()
			clear(c.refreshDue)
			c.refreshQueue = nil
			c.refreshMu.Unlock()
		}
	}()
	gather := time.NewTimer(refreshGather)
	gather.Stop()
	defer gather.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.refreshWake:
		}
		gather.Reset(refreshGather)
		select {
		case <-ctx.Done():
			return
		case <-gather.C:
		}
		for {
			hashes := c.takeDue()
			if len(hashes) == 0 {
				break
			}
			c.refresh(ctx, hashes)
		}
	}
}

// refreshSoon queues the key for a refresh when a refresher runs, its copy
// found fresh at now is active and in its refresh window, and it is not
// queued already. Unknown keys are not refreshed: a client retrying one is
// answered from memory, and its next lookup after the ttl is what a
// request's would be today.
func (c *KeyCache) refreshSoon(hash [sha256.Size]byte, entry cachedKey, now time.Time) {
	if c.refreshers.Load() == 0 || entry.caller.Account == "" || entry.refreshFailed ||
		now.Before(entry.expires.Add(-c.refreshWindow)) {
		return
	}
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	if _, queued := c.refreshDue[hash]; queued || len(c.refreshQueue) >= maxRefreshQueue {
		return
	}
	c.refreshDue[hash] = struct{}{}
	c.refreshQueue = append(c.refreshQueue, hash)
	select {
	case c.refreshWake <- struct{}{}:
	default:
	}
}

// takeDue takes up to maxRefreshBatch keys off the refresh queue.
func (c *KeyCache) takeDue() [][sha256.Size]byte {
	c.refreshMu.Lock()
	defer c.refreshMu.Unlock()
	n := min(len(c.refreshQueue), maxRefreshBatch)
	hashes := c.refreshQueue[:n:n]
	c.refreshQueue = c.refreshQueue[n:]
	if len(c.refreshQueue) == 0 {
		c.refreshQueue = nil
	}
	return hashes
}

// refresh looks the keys up and replaces their copies with the answers,
// as a request's lookup would, nothing kept if a revocation was heard
// meanwhile. An answer keeps its copy's stamp, read before the copy's own
// lookup and so before this one: a stamp raised since makes it as stale
// as it made the copy. Reading the stamps again would cost a Redis round
// trip each once the local copy's entries expire, one after another.
func (c *KeyCache) refresh(ctx context.Context, hashes [][sha256.Size]byte) {
	// The copies refreshed: only these are replaced, under their own
	// stamps, so an answer a lookup gave meanwhile (with a stamp read
	// after this refresh read PostgreSQL) is never overwritten.
	refreshed := make(map[[sha256.Size]byte]cachedKey, len(hashes))
	c.mu.Lock()
	revocations := c.revocations
	for _, hash := range hashes {
		if entry, found := c.active.Peek(hash); found {
			refreshed[hash] = entry
		}
	}
	c.mu.Unlock()
	now := c.now()
	lookupCtx, cancel := context.WithTimeout(ctx, c.refreshWindow)
	callers, err := c.lookupAll(lookupCtx, hashes)
	cancel()
	c.mu.Lock()
	for _, hash := range hashes {
		// A copy evicted meanwhile is not brought back, nor one a
		// lookup replaced.
		entry, found := c.active.Peek(hash)
		was, taken := refreshed[hash]
		switch {
		case !found || !taken || !entry.confirmed.Equal(was.confirmed) || entry.stamp != was.stamp:
		case err != nil:
			entry.refreshFailed = true
			c.active.Add(hash, entry)
		case c.revocations == revocations:
			c.put(hash, cachedKey{caller: callers[hash], expires: now.Add(c.ttl), confirmed: now, stamp: entry.stamp})
		}
	}
	c.mu.Unlock()
	// Taken off the queue only now, so a request meanwhile does not
	// queue the key again.
	c.refreshMu.Lock()
	for _, hash := range hashes {
		delete(c.refreshDue, hash)
	}
	c.refreshMu.Unlock()
}

// lookupAll looks the keys up, in one round trip when the KeyLookup is a
// KeysLookup: the callers of those active, none for the others.
func (c *KeyCache) lookupAll(ctx context.Context, hashes [][sha256.Size]byte) (map[[sha256.Size]byte]orders.Caller, error) {
	callers := make(map[[sha256.Size]byte]orders.Caller, len(hashes))
	if batch, ok := c.accounts.(KeysLookup); ok {
		c.lookups[RefreshLookup].Add(1)
		active, err := batch.Keys(ctx, hashes)
		if err != nil {
			return nil, err
		}
		for _, key := range active {
			callers[key.Hash] = c.callerOf(key)
		}
		return callers, nil
	}
	for _, hash := range hashes {
		c.lookups[RefreshLookup].Add(1)
		key, err := c.accounts.Key(ctx, hash)
		switch {
		case err == nil:
			callers[hash] = c.callerOf(key)
		case !errors.Is(err, orders.ErrUnauthenticated):
			return nil, err
		}
	}
	return callers, nil
}
