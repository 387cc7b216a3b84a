package orders

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/ordergate/ordergate/secret"
)

// APIKeyPrefix starts every API key, so a string without it needs no lookup.
const APIKeyPrefix = "ogk_"

// KeyHash is what a key is stored and found by; ok is false for a string
// that cannot be a key, which needs no lookup to refuse.
func KeyHash(key string) (hash [sha256.Size]byte, ok bool) {
	if !strings.HasPrefix(key, APIKeyPrefix) {
		return hash, false
	}
	// Hashed from a stack buffer: []byte(key) is on the heap once a key is
	// longer than 32 bytes, and every request hashes its key.
	var buf [keyHashBuffer]byte
	return sha256.Sum256(append(buf[:0], key...)), true
}

// keyHashBuffer holds an issued key (the prefix and 43 characters of
// base64) with room to spare; a longer string is hashed all the same.
const keyHashBuffer = 96

// Scopes is what an API key may do: a set of ScopeRead and ScopeTrade.
// Neither implies the other.
type Scopes uint8

const (
	// ScopeRead reads: the caller's orders, fills and balances.
	ScopeRead Scopes = 1 << iota
	// ScopeTrade places and cancels orders.
	ScopeTrade
	// AllScopes is every scope, what keys issued before scopes existed have.
	AllScopes = ScopeRead | ScopeTrade
)

// scopeNames are the scopes' names, as stored and as operators write them.
var scopeNames = []struct {
	scope Scopes
	name  string
}{{ScopeRead, "read"}, {ScopeTrade, "trade"}}

// ParseScopes reads scope names (read, trade): at least one, each known.
func ParseScopes(names []string) (Scopes, error) {
	var scopes Scopes
	for _, name := range names {
		known := false
		for _, s := range scopeNames {
			if s.name == name {
				scopes, known = scopes|s.scope, true
			}
		}
		if !known {
			return 0, fmt.Errorf("orders: unknown scope %q, want read or trade", name)
		}
	}
	return scopes, scopes.Check()
}

// Check refuses an empty set, or one with a scope that does not exist.
func (s Scopes) Check() error {
	switch {
	case s == 0:
		return fmt.Errorf("orders: no scope given, want read, trade or both")
	case s&^AllScopes != 0:
		return fmt.Errorf("orders: unknown scopes %#x", uint8(s&^AllScopes))
	}
	return nil
}

// Names are the scopes' names, read before trade.
func (s Scopes) Names() []string {
	names := []string{}
	for _, scope := range scopeNames {
		if s&scope.scope != 0 {
			names = append(names, scope.name)
		}
	}
	return names
}

func (s Scopes) String() string { return strings.Join(s.Names(), ",") }

// KeySpec is what an API key is issued for.
type KeySpec struct {
	Scopes Scopes
	// Signed: every request with the key must be signed with a secret
	// issued with it.
	Signed bool
}

// IssuedKey is a new API key as its holder is given it, once: the key and
// its signing secret are stored only as a hash and sealed, and print as
// [secret] (secret.Text) anywhere but where they are revealed to the
// holder.
type IssuedKey struct {
	ID     string
	Key    secret.Text
	Scopes Scopes
	// SigningSecret is zero for a key whose requests need no signature.
	SigningSecret secret.Text
}

// ActiveKey is an active API key as it is stored: its hash, its KEY id, its
// account, its scopes and its signing secret sealed (nil for a key whose
// requests need no signature).
type ActiveKey struct {
	Hash         [sha256.Size]byte
	ID           string
	Account      string
	Scopes       Scopes
	SealedSecret []byte
}

// Caller is what a request made with an active API key acts as.
type Caller struct {
	Account string
	Scopes  Scopes
	// Signed: the key's requests must carry a signature made with
	// SigningSecret.
	Signed bool
	// SigningSecret is the key's secret, opened; zero when Signed but
	// this process could not open it (no encryption key, or another one
	// than it was sealed under): such a key's requests cannot be verified.
	SigningSecret secret.Text
}

// Permits refuses, with a *MissingScopeError, what the caller's key has
// not every scope of need for.
func (c Caller) Permits(need Scopes) error {
	if c.Scopes&need != need {
		return &MissingScopeError{Need: need, Have: c.Scopes}
	}
	return nil
}
