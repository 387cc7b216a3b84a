package orders

import (
	"crypto/sha256"
	"strings"
)

// APIKeyPrefix starts every API key, so a string without it needs no lookup.
const APIKeyPrefix = "ogk_"

// KeyHash is what a key is stored and found by; ok is false for a string
// that cannot be a key, which needs no lookup to refuse.
func KeyHash(key string) (hash [sha256.Size]byte, ok bool) {
	if !strings.HasPrefix(key, APIKeyPrefix) {
		return hash, false
	}
	return sha256.Sum256([]byte(key)), true
}

// ActiveKey is an active API key as it is stored: its hash and its account.
type ActiveKey struct {
	Hash    [sha256.Size]byte
	Account string
}
