package orders

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/ordergate/ordergate/emq"
)

// APIKeysTable names API keys on the coherence lanes: a revocation rides the
// broadcast lane, with the key's SHA-256 in hex as the message.
const APIKeysTable = "api_keys"

// DefaultKeyCacheTTL is how long a gateway trusts what it learned about a
// key when no revocation broadcast reaches it.
const DefaultKeyCacheTTL = 5 * time.Second

// maxCachedKeys bounds the cache against a caller cycling through made-up
// keys: past it, the cache starts over.
const maxCachedKeys = 100_000

// KeyCache answers Authenticate from memory for ttl after it asked
// PostgreSQL, so a request does not cost a database round trip. A revoked
// key stops working at once on every gateway that hears the revocation
// broadcast (FollowRevocations), and within ttl on one that does not. Keys
// found unknown are remembered as well, so a client hammering with a revoked
// key costs no lookups either; a failed lookup (PostgreSQL down) is never
// remembered.
type KeyCache struct {
	accounts *Accounts
	ttl      time.Duration
	now      func() time.Time

	mu      sync.RWMutex
	entries map[[sha256.Size]byte]cachedKey
	// revocations counts the revocations heard: a lookup that raced one
	// (read the key active, then heard it revoked) must not cache its answer.
	revocations uint64
}

type cachedKey struct {
	account string // empty: the key is unknown or revoked
	expires time.Time
}

// NewKeyCache caches accounts' answers for ttl (DefaultKeyCacheTTL when ≤ 0).
func NewKeyCache(accounts *Accounts, ttl time.Duration) *KeyCache {
	if ttl <= 0 {
		ttl = DefaultKeyCacheTTL
	}
	return &KeyCache{accounts: accounts, ttl: ttl, now: time.Now, entries: map[[sha256.Size]byte]cachedKey{}}
}

// Authenticate returns the account an active API key belongs to.
func (c *KeyCache) Authenticate(ctx context.Context, key string) (string, error) {
	hash, ok := keyHash(key)
	if !ok {
		return "", ErrUnauthenticated
	}
	now := c.now()
	c.mu.RLock()
	entry, found := c.entries[hash]
	c.mu.RUnlock()
	if found && now.Before(entry.expires) {
		if entry.account == "" {
			return "", ErrUnauthenticated
		}
		return entry.account, nil
	}
	c.mu.RLock()
	revocations := c.revocations
	c.mu.RUnlock()
	account, err := c.accounts.accountOf(ctx, hash)
	if err != nil && !errors.Is(err, ErrUnauthenticated) {
		return "", err
	}
	c.mu.Lock()
	if c.revocations == revocations {
		if len(c.entries) >= maxCachedKeys {
			clear(c.entries)
		}
		c.entries[hash] = cachedKey{account: account, expires: now.Add(c.ttl)}
	}
	c.mu.Unlock()
	return account, err
}

// forget drops what the cache knows of the key with this SHA-256 in hex.
func (c *KeyCache) forget(hashHex string) {
	var hash [sha256.Size]byte
	if n, err := hex.Decode(hash[:], []byte(hashHex)); err != nil || n != len(hash) {
		return
	}
	c.mu.Lock()
	delete(c.entries, hash)
	c.revocations++
	c.mu.Unlock()
}

// FollowRevocations drops a key from the cache as soon as the broadcast lane
// says it was revoked. A message lost to a dropped connection or a full ring
// costs at most ttl of a revoked key still working on this gateway.
func (c *KeyCache) FollowRevocations(ctx context.Context, lanes *emq.Client, opts ...emq.SubscribeOption) (*emq.Subscription, error) {
	return lanes.Subscribe(ctx, APIKeysTable, 256, c.forget, opts...)
}
