package placement

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/signing"
)

// APIKeysTable names API keys in coherence: a revocation goes by the
// broadcast mode, with the key's SHA-256 in hex as the message.
const APIKeysTable = "api_keys"

// DefaultKeyCacheTTL is how long a gateway trusts what it learned about a
// key when no revocation broadcast reaches it.
const DefaultKeyCacheTTL = 5 * time.Second

// DefaultKeyStaleIfError is how long after PostgreSQL last confirmed a key
// the gateway still trusts its copy while PostgreSQL does not answer: long
// enough to ride out a typical database failover, during which placement
// (which needs only Redis) goes on, and short because it is also how long a
// key revoked just before the outage may still work on a gateway that
// missed the revocation's broadcast.
const DefaultKeyStaleIfError = time.Minute

// staleLookupTimeout bounds a lookup when a stale copy could answer
// instead, so a PostgreSQL that hangs rather than refuses delays the
// request by this much, not by its whole deadline.
const staleLookupTimeout = time.Second

// refreshGather is how long the refresher waits after a copy falls due,
// so the keys due about together are looked up in one round trip.
const refreshGather = 100 * time.Millisecond

// maxRefreshBatch bounds the keys one refresh looks up at once.
const maxRefreshBatch = 1_000

// maxRefreshQueue bounds the keys waiting for a refresh: past it a key
// due is left to expire, and is looked up on its next request as without
// the refresher.
const maxRefreshQueue = 10_000

// maxCachedKeys bounds the copies of active keys; past it the least
// recently used is dropped (and looked up again when next used).
const maxCachedKeys = 100_000

// maxUnknownKeys bounds the copies of keys found unknown or revoked. They
// live apart from the active ones, so a caller cycling through made-up keys
// only ever evicts other made-up keys, never a customer's.
const maxUnknownKeys = 10_000

// KeyCache answers Authenticate from memory for ttl after it asked
// PostgreSQL, so a request does not cost a database round trip. It opens a
// key's sealed signing secret as it takes the key in, so the secret is
// held in clear only in memory. A revoked
// key stops working at once on every gateway that hears the revocation
// broadcast (FollowRevocations), and within ttl on one that does not. Keys
// found unknown are remembered as well, so a client hammering with a revoked
// key costs no lookups either. Both copies are bounded least-recently-used
// caches, apart from each other.
//
// When a lookup fails (PostgreSQL down), a copy PostgreSQL confirmed within
// the stale-if-error period still answers, and the key is asked again a ttl
// later, not on every request. Nothing can be revoked during the outage
// (revoking writes PostgreSQL), and a revocation broadcast heard before it
// drops the copy; but a key revoked after its copy was confirmed, whose
// broadcast this gateway missed (or that was revoked without one), keeps
// working through the outage until the period ends rather than a ttl after
// its revocation.
//
// With a refresher running (RefreshAhead), a key in use is looked up again
// before its copy expires, off the requests' path, under the same rules.
type KeyCache struct {
	accounts KeyLookup
	// sealer opens signing secrets; nil opens none.
	sealer       *signing.Sealer
	ttl          time.Duration
	staleIfError time.Duration
	now          func() time.Time
	// staleAnswers counts answers given from a stale copy.
	staleAnswers atomic.Uint64
	// lookups counts the lookups in PostgreSQL, by reason.
	lookups [lookupReasons]atomic.Uint64
	// refreshWindow is how long before its copy expires a request's
	// key is refreshed, while a refresher runs (RefreshAhead).
	refreshWindow time.Duration
	// refreshers is how many RefreshAhead loops run: none, nothing is
	// queued for refresh.
	refreshers atomic.Int32
	// refreshMu guards what waits for a refresh.
	refreshMu sync.Mutex
	// refreshDue holds the keys queued or being refreshed, each once.
	refreshDue map[[sha256.Size]byte]struct{}
	// refreshQueue is refreshDue's keys not yet taken, in order.
	refreshQueue [][sha256.Size]byte
	// refreshWake has a refresher gather the keys due.
	refreshWake chan struct{}

	// active holds the answers that found an account, unknown the others.
	active, unknown *lru.Cache[[sha256.Size]byte, cachedKey]

	// mu orders writes to the caches with revocations.
	mu sync.Mutex
	// revocations counts the revocations heard: a lookup that raced one
	// (read the key active, then heard it revoked) must not cache its answer.
	revocations uint64
	// stamps, when set, reads the keys' stamps (TrackRevocations).
	stamps StampReader
	// notify holds what NotifyRevocations was given, under mu.
	notify []func(hash [sha256.Size]byte)
}

type cachedKey struct {
	caller orders.Caller // Account empty: the key is unknown or revoked
	// expires is when the key is next looked up.
	expires time.Time
	// confirmed is when PostgreSQL last gave this answer.
	confirmed time.Time
	// stamp is the key's stamp read before that answer; unknownStamp when
	// it could not be read.
	stamp int64
	// refreshFailed: a refresh of this copy failed; it is left to expire.
	refreshFailed bool
}

// unknownStamp is the stamp of an answer whose stamp could not be read: it
// matches no stamp read later.
const unknownStamp = -1

// KeyCacheOption tunes a KeyCache.
type KeyCacheOption func(*KeyCache)

// StaleIfError sets how long after PostgreSQL last confirmed a key its copy
// still answers while lookups fail (DefaultKeyStaleIfError unless set); 0
// answers nothing stale.
func StaleIfError(period time.Duration) KeyCacheOption {
	return func(c *KeyCache) { c.staleIfError = max(period, 0) }
}

// StampReader reads an item's stamp (coherence.Client.Stamp): on a
// client made on a coherence.Tracking, from the process's local copy until
// the stamp changes.
type StampReader interface {
	Stamp(ctx context.Context, table, id string) (int64, error)
}

// TrackRevocations checks every answer from memory against the key's
// stamp (coherence's tracking mode): a revocation raises it, Redis
// invalidates this process's copy of it, and the next request with the key
// finds it changed and asks PostgreSQL. Reading a stamp from the local
// copy costs no round trip; while Redis does not answer, the stamps are
// left out and the ttl and the broadcast bound a revoked key as before.
func TrackRevocations(stamps StampReader) KeyCacheOption {
	return func(c *KeyCache) { c.stamps = stamps }
}

// OpenSecretsWith opens keys' sealed signing secrets with sealer. Without
// it, or when a secret does not open with it, a key that requires
// signatures is still recognized but has no secret (orders.Caller), and
// the gateway refuses its requests.
func OpenSecretsWith(sealer *signing.Sealer) KeyCacheOption {
	return func(c *KeyCache) { c.sealer = sealer }
}

// KeyLookup finds an active API key by the key's hash (postgres.Accounts):
// orders.ErrUnauthenticated when it is unknown or revoked.
type KeyLookup interface {
	Key(ctx context.Context, hash [sha256.Size]byte) (orders.ActiveKey, error)
}

// ActiveKeyLister lists the active API keys, newest first, at most most
// (postgres.Accounts): what Preload loads.
type ActiveKeyLister interface {
	ActiveKeys(ctx context.Context, most int) ([]orders.ActiveKey, error)
}

// Preload loads the active keys (the newest maxCachedKeys) into the cache,
// as answers PostgreSQL just gave, when the cache's KeyLookup can list them:
// after a gateway starts, its customers' keys are recognized and answered
// from memory from their first request, instead of each first request
// taking a lookup permit (behind one proxy address, at that address's
// rate). Follow revocations first: a revocation heard while the keys are
// read drops the whole load, and the keys are then learned one lookup at
// a time as before. unverifiable counts the keys loaded that require
// signatures whose secrets did not open (no or another encryption key).
func (c *KeyCache) Preload(ctx context.Context) (loaded, unverifiable int, err error) {
	lister, ok := c.accounts.(ActiveKeyLister)
	if !ok {
		return 0, 0, nil
	}
	c.mu.Lock()
	revocations := c.revocations
	c.mu.Unlock()
	keys, err := lister.ActiveKeys(ctx, maxCachedKeys)
	if err != nil {
		return 0, 0, err
	}
	callers := make([]orders.Caller, len(keys))
	for i, key := range keys {
		callers[i] = c.callerOf(key)
		if callers[i].Signed && callers[i].SigningSecret.IsZero() {
			unverifiable++
		}
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revocations != revocations {
		return 0, 0, nil
	}
	// Oldest first, so the newest keys are the most recently used.
	for i := len(keys) - 1; i >= 0; i-- {
		c.put(keys[i].Hash, cachedKey{caller: callers[i], expires: now.Add(c.ttl), confirmed: now})
	}
	return len(keys), unverifiable, nil
}

// callerOf is what requests with the key act as, its signing secret opened.
func (c *KeyCache) callerOf(key orders.ActiveKey) orders.Caller {
	caller := orders.Caller{Account: key.Account, Scopes: key.Scopes, Signed: key.SealedSecret != nil}
	if caller.Signed && c.sealer != nil {
		// A secret that does not open leaves SigningSecret zero, which
		// refuses the key's requests rather than letting them in unsigned.
		caller.SigningSecret, _ = c.sealer.Open(key.SealedSecret, key.ID)
	}
	return caller
}

// NewKeyCache caches accounts' answers for ttl (DefaultKeyCacheTTL when ≤ 0).
func NewKeyCache(accounts KeyLookup, ttl time.Duration, opts ...KeyCacheOption) *KeyCache {
	if ttl <= 0 {
		ttl = DefaultKeyCacheTTL
	}
	c := &KeyCache{accounts: accounts, ttl: ttl, staleIfError: DefaultKeyStaleIfError, now: time.Now,
		active: mustLRU(maxCachedKeys), unknown: mustLRU(maxUnknownKeys),
		refreshWindow: ttl / 2, refreshDue: make(map[[sha256.Size]byte]struct{}), refreshWake: make(chan struct{}, 1)}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

func mustLRU(size int) *lru.Cache[[sha256.Size]byte, cachedKey] {
	cache, err := lru.New[[sha256.Size]byte, cachedKey](size)
	if err != nil {
		panic(err) // only for a size < 1
	}
	return cache
}

// entry is what the cache holds for the key hash, if anything.
func (c *KeyCache) entry(hash [sha256.Size]byte) (cachedKey, bool) {
	if entry, found := c.active.Get(hash); found {
		return entry, true
	}
	return c.unknown.Get(hash)
}

// put stores an answer in the cache its kind goes to, and drops the key
// from the other. The caller holds mu.
func (c *KeyCache) put(hash [sha256.Size]byte, entry cachedKey) {
	if entry.caller.Account == "" {
		c.active.Remove(hash)
		c.unknown.Add(hash, entry)
		return
	}
	c.unknown.Remove(hash)
	c.active.Add(hash, entry)
}

// Recognizes reports whether the cache holds the key as active, whether
// its copy is fresh or due for another lookup: a key a customer has been
// using, not a made-up one. The gateway limits the lookups of keys it does
// not recognize before they reach PostgreSQL.
func (c *KeyCache) Recognizes(key string) bool {
	hash, ok := orders.KeyHash(key)
	return ok && c.active.Contains(hash)
}

// NeedsLookup reports whether Authenticate would ask PostgreSQL about the
// key: it is well formed and the cache holds no fresh answer for it.
func (c *KeyCache) NeedsLookup(key string) bool {
	hash, ok := orders.KeyHash(key)
	if !ok {
		return false
	}
	entry, found := c.active.Peek(hash)
	if !found {
		entry, found = c.unknown.Peek(hash)
	}
	return !found || !c.now().Before(entry.expires)
}

// StaleAnswers is how many answers came from a stale copy because
// PostgreSQL did not answer.
func (c *KeyCache) StaleAnswers() uint64 { return c.staleAnswers.Load() }

// LookupReason is why a KeyCache looked keys up in PostgreSQL.
type LookupReason int

const (
	// RequestLookup: on a request's path (AuthenticateUntil), which waits
	// for it.
	RequestLookup LookupReason = iota
	// StreamsLookup: several keys due together (AuthenticateAll, the
	// gateway's event streams' checks).
	StreamsLookup
	// RefreshLookup: keys in use refreshed before their copies expire
	// (RefreshAhead), which no request waits for.
	RefreshLookup
	lookupReasons
)

// String is the reason's name in the gateway's metrics.
func (r LookupReason) String() string {
	return [...]string{"request", "streams", "refresh"}[r]
}

// Lookups is how many lookups in PostgreSQL the cache made for reason, each
// one query (of one key, or of several together).
func (c *KeyCache) Lookups(reason LookupReason) uint64 { return c.lookups[reason].Load() }

// Authenticate returns what requests with an active API key act as.
func (c *KeyCache) Authenticate(ctx context.Context, key string) (orders.Caller, error) {
	caller, _, err := c.AuthenticateUntil(ctx, key)
	return caller, err
}

// AuthenticateUntil is Authenticate, and also says until when its answer
// stands without PostgreSQL being asked again: a revocation heard
// (NotifyRevocations) or a key's stamp raised may still change it sooner,
// but nothing else. It is zero when there is no answer to keep (the
// lookup failed and no stale copy answered, or the key is malformed).
func (c *KeyCache) AuthenticateUntil(ctx context.Context, key string) (orders.Caller, time.Time, error) {
	hash, ok := orders.KeyHash(key)
	if !ok {
		return orders.Caller{}, time.Time{}, orders.ErrUnauthenticated
	}
	now := c.now()
	h := c.held(ctx, hash, now)
	if h.fresh {
		c.refreshSoon(hash, h.entry, now)
		return h.entry.caller, h.entry.expires, h.entry.err()
	}
	stamp, stale := h.stamp, h.stale
	c.mu.Lock()
	revocations := c.revocations
	c.mu.Unlock()
	lookupCtx := ctx
	if stale {
		var cancel context.CancelFunc
		lookupCtx, cancel = context.WithTimeout(ctx, staleLookupTimeout)
		defer cancel()
	}
	c.lookups[RequestLookup].Add(1)
	active, err := c.accounts.Key(lookupCtx, hash)
	if err != nil && !errors.Is(err, orders.ErrUnauthenticated) {
		if stale && ctx.Err() == nil {
			if answer, ok := c.answerStale(hash, revocations, now); ok {
				return answer.caller, answer.expires, answer.err()
			}
		}
		return orders.Caller{}, time.Time{}, err
	}
	var caller orders.Caller
	if err == nil {
		caller = c.callerOf(active)
	}
	// An answer that raced a revocation is not kept: it stands until now.
	until := now
	c.mu.Lock()
	if c.revocations == revocations {
		until = now.Add(c.ttl)
		c.put(hash, cachedKey{caller: caller, expires: until, confirmed: now, stamp: stamp})
	}
	c.mu.Unlock()
	return caller, until, err
}

// KeyAnswer is AuthenticateAll's answer about one key: AuthenticateUntil's.
type KeyAnswer struct {
	Caller orders.Caller
	Until  time.Time
	Err    error
}

// KeysLookup finds the active API keys among hashes in one round trip
// (postgres.Accounts): a hash with no key in the answer is unknown or
// revoked.
type KeysLookup interface {
	Keys(ctx context.Context, hashes [][sha256.Size]byte) ([]orders.ActiveKey, error)
}

// AuthenticateAll answers AuthenticateUntil for each of keys, in order,
// with one lookup in PostgreSQL for all those it holds no fresh answer
// about when the cache's KeyLookup is a KeysLookup: the gateway's event
// streams check their keys due together.
func (c *KeyCache) AuthenticateAll(ctx context.Context, keys []string) []KeyAnswer {
	answers := make([]KeyAnswer, len(keys))
	batch, ok := c.accounts.(KeysLookup)
	type pending struct {
		i     int
		hash  [sha256.Size]byte
		stamp int64
		// stale: a copy may answer if the lookup fails.
		stale bool
	}
	var due []pending
	now := c.now()
	anyStale := false
	for i, key := range keys {
		hash, wellFormed := orders.KeyHash(key)
		if !wellFormed {
			answers[i].Err = orders.ErrUnauthenticated
			continue
		}
		h := c.held(ctx, hash, now)
		if h.fresh {
			answers[i] = KeyAnswer{Caller: h.entry.caller, Until: h.entry.expires, Err: h.entry.err()}
			continue
		}
		if !ok {
			answers[i].Caller, answers[i].Until, answers[i].Err = c.AuthenticateUntil(ctx, key)
			continue
		}
		p := pending{i: i, hash: hash, stamp: h.stamp, stale: h.stale}
		anyStale = anyStale || p.stale
		due = append(due, p)
	}
	if len(due) == 0 {
		return answers
	}
	c.mu.Lock()
	revocations := c.revocations
	c.mu.Unlock()
	lookupCtx := ctx
	if anyStale {
		var cancel context.CancelFunc
		lookupCtx, cancel = context.WithTimeout(ctx, staleLookupTimeout)
		defer cancel()
	}
	hashes := make([][sha256.Size]byte, len(due))
	for j, p := range due {
		hashes[j] = p.hash
	}
	c.lookups[StreamsLookup].Add(1)
	active, err := batch.Keys(lookupCtx, hashes)
	if err != nil {
		for _, p := range due {
			answers[p.i].Err = err
			if p.stale && ctx.Err() == nil {
				if answer, ok := c.answerStale(p.hash, revocations, now); ok {
					answers[p.i] = KeyAnswer{Caller: answer.caller, Until: answer.expires, Err: answer.err()}
				}
			}
		}
		return answers
	}
	callers := make(map[[sha256.Size]byte]orders.Caller, len(active))
	for _, key := range active {
		callers[key.Hash] = c.callerOf(key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Answers that raced a revocation are not kept: they stand until now.
	until, keep := now, c.revocations == revocations
	if keep {
		until = now.Add(c.ttl)
	}
	for _, p := range due {
		caller := callers[p.hash]
		if keep {
			c.put(p.hash, cachedKey{caller: caller, expires: until, confirmed: now, stamp: p.stamp})
		}
		answers[p.i] = KeyAnswer{Caller: caller, Until: until}
		if caller.Account == "" {
			answers[p.i].Err = orders.ErrUnauthenticated
		}
	}
	return answers
}

// heldKey is what the cache holds about a key, for a lookup at one moment.
type heldKey struct {
	entry cachedKey
	// fresh: entry answers without PostgreSQL.
	fresh bool
	// stale: entry may answer if PostgreSQL does not (within staleIfError
	// of its confirmation). A key whose stamp moved was revoked (or
	// changed): neither.
	stale bool
	// stamp is what a new answer is cached with: read before PostgreSQL,
	// so a revocation that lands after the lookup raises it past it.
	stamp int64
}

// held reads the cache's copy of the key with the hash, and its stamp.
func (c *KeyCache) held(ctx context.Context, hash [sha256.Size]byte, now time.Time) heldKey {
	entry, found := c.entry(hash)
	stamp, tracked := c.stamp(ctx, hash)
	current := found && (!tracked || stamp == entry.stamp)
	if !tracked {
		stamp = unknownStamp
	}
	return heldKey{entry: entry, stamp: stamp,
		fresh: current && now.Before(entry.expires),
		stale: current && now.Before(entry.confirmed.Add(c.staleIfError))}
}

// stamp reads the key's stamp; false without stamps or when it cannot be
// read.
func (c *KeyCache) stamp(ctx context.Context, hash [sha256.Size]byte) (int64, bool) {
	if c.stamps == nil {
		return 0, false
	}
	stamp, err := c.stamps.Stamp(ctx, APIKeysTable, hex.EncodeToString(hash[:]))
	return stamp, err == nil
}

// answerStale answers from the key's copy after a failed lookup, unless a
// revocation was heard since the lookup began, and puts the next lookup a
// ttl away.
func (c *KeyCache) answerStale(hash [sha256.Size]byte, revocations uint64, now time.Time) (cachedKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	entry, found := c.entry(hash)
	if !found || c.revocations != revocations {
		return cachedKey{}, false
	}
	entry.expires, entry.refreshFailed = now.Add(c.ttl), false
	if end := entry.confirmed.Add(c.staleIfError); end.Before(entry.expires) {
		entry.expires = end
	}
	c.put(hash, entry)
	c.staleAnswers.Add(1)
	return entry, true
}

func (k cachedKey) err() error {
	if k.caller.Account == "" {
		return orders.ErrUnauthenticated
	}
	return nil
}

// forget drops what the cache knows of the key with this SHA-256 in hex.
func (c *KeyCache) forget(hashHex string) {
	var hash [sha256.Size]byte
	if n, err := hex.Decode(hash[:], []byte(hashHex)); err != nil || n != len(hash) {
		return
	}
	c.mu.Lock()
	c.active.Remove(hash)
	c.unknown.Remove(hash)
	c.revocations++
	notify := c.notify
	c.mu.Unlock()
	for _, f := range notify {
		f(hash)
	}
}

// NotifyRevocations has notify called with the hash of each key a
// revocation broadcast names (FollowRevocations), once the cache dropped
// its copy: a follower of the key, such as the gateway's event streams,
// asks about it again at once rather than when its answer would expire.
// A scope change is broadcast the same way, so the key may still be
// active. notify runs on the broadcast's apply loop and must not block.
func (c *KeyCache) NotifyRevocations(notify func(hash [sha256.Size]byte)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notify = append(c.notify[:len(c.notify):len(c.notify)], notify)
}

// FollowRevocations drops a key from the cache as soon as a coherence
// broadcast says it was revoked. A message lost to a dropped connection or a
// full ring costs at most ttl of a revoked key still working on this gateway,
// or the stale-if-error period if PostgreSQL goes down meanwhile.
func (c *KeyCache) FollowRevocations(ctx context.Context, caches *coherence.Client, opts ...coherence.SubscribeOption) (*coherence.Subscription, error) {
	return caches.Subscribe(ctx, APIKeysTable, 256, c.forget, opts...)
}
