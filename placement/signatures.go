package placement

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/orders"
)

// Signatures remembers the signatures of signed requests, so each is
// accepted once: a signed request caught on the wire cannot be sent again
// while its timestamp is still within the allowed skew. All gateways
// share the record in Redis.
type Signatures struct {
	rdb redis.UniversalClient
}

// NewSignatures keeps the record in rdb.
func NewSignatures(rdb redis.UniversalClient) *Signatures { return &Signatures{rdb: rdb} }

// SignatureKey is the string that records a signature of the API key whose
// SHA-256 begins with digest (hex, as the key's rate-limit bucket is
// named): the key's signatures share a hash tag, and the key itself never
// reaches Redis.
func SignatureKey(digest string, signature []byte) string {
	return "sig:{" + digest + "}:" + hex.EncodeToString(signature)
}

// FirstUse records the signature for ttl and reports whether this is its
// first use, in one SET NX GET PX: of two gateways given the same request
// at once, one is first. The value is a token drawn for this call, so a
// SET that go-redis sends again after a lost reply reads its own token back
// and is still the first use, not a replay of itself. ttl must outlast the
// time the signature's timestamp stays within the allowed skew. A Redis that does
// not answer is orders.ErrUnavailable: without the record a replay cannot
// be told apart.
func (s *Signatures) FirstUse(ctx context.Context, digest string, signature []byte, ttl time.Duration) (bool, error) {
	token := strconv.FormatUint(rand.Uint64(), 36)
	earlier, err := s.rdb.SetArgs(ctx, SignatureKey(digest, signature), token, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("%w: record a signature: %w", orders.ErrUnavailable, err)
	}
	return earlier == token, nil
}
