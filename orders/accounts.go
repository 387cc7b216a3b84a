package orders

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"

	"github.com/ordergate/ordergate/emq"
)

// The two accounts every ledger transaction that is not a trade touches.
const (
	// VenueAccount holds the liquidity orders settle against.
	VenueAccount = "ACC_0000000000000000000000000V"
	// ExternalAccount is the world outside the exchange: deposits come from it,
	// withdrawals go to it. It is the one account allowed below zero.
	ExternalAccount = "ACC_0000000000000000000000000X"
)

const apiKeyPrefix = "ogk_"

var (
	//go:embed sql/account_create.sql
	accountCreateSQL string
	//go:embed sql/api_key_issue.sql
	apiKeyIssueSQL string
	//go:embed sql/api_key_revoke.sql
	apiKeyRevokeSQL string
	//go:embed sql/api_key_account.sql
	apiKeyAccountSQL string
)

// Errors of accounts and keys.
var (
	// ErrUnauthenticated: the API key is unknown or revoked.
	ErrUnauthenticated = errors.New("orders: API key unknown or revoked")
	// ErrNoAccount: no account has the id.
	ErrNoAccount = errors.New("orders: no such account")
	// ErrNoKey: no API key has the id, or it is revoked already.
	ErrNoKey = errors.New("orders: no such active API key")
)

// Accounts keeps accounts and their API keys in PostgreSQL. A key is stored
// only as its SHA-256, so a database leak does not leak keys, and a key is
// found by its hash, so no comparison of secrets runs in variable time.
type Accounts struct {
	db *pgxpool.Pool
}

// NewAccounts uses db.
func NewAccounts(db *pgxpool.Pool) *Accounts { return &Accounts{db: db} }

// Create makes a customer account and returns its ACC id.
func (a *Accounts) Create(ctx context.Context, name string) (string, error) {
	id := "ACC_" + ulid.Make().String()
	if _, err := a.db.Exec(ctx, accountCreateSQL, id, name); err != nil {
		return "", fmt.Errorf("orders: create account: %w", err)
	}
	return id, nil
}

// IssueKey makes a new API key for the account. The key itself is returned
// once and never stored.
func (a *Accounts) IssueKey(ctx context.Context, account string) (keyID, key string, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", "", fmt.Errorf("orders: issue key: %w", err)
	}
	key = apiKeyPrefix + base64.RawURLEncoding.EncodeToString(secret)
	keyID = "KEY_" + ulid.Make().String()
	hash := sha256.Sum256([]byte(key))
	tag, err := a.db.Exec(ctx, apiKeyIssueSQL, keyID, account, hash[:])
	if err != nil {
		return "", "", fmt.Errorf("orders: issue key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return "", "", fmt.Errorf("%w: %s", ErrNoAccount, account)
	}
	return keyID, key, nil
}

// RevokeKey revokes an API key by its KEY id, then broadcasts the revocation
// so gateways drop their cached copy of the key at once instead of when it
// expires (KeyCache). The broadcast is at-most-once: its failure is returned
// but the revocation stands, and every gateway stops taking the key within
// its cache's time to live. lanes may be nil: no broadcast.
func (a *Accounts) RevokeKey(ctx context.Context, keyID string, lanes *emq.Client) error {
	var hash []byte
	err := a.db.QueryRow(ctx, apiKeyRevokeSQL, keyID).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", ErrNoKey, keyID)
	}
	if err != nil {
		return fmt.Errorf("orders: revoke key: %w", err)
	}
	if lanes == nil {
		return nil
	}
	if err := lanes.Broadcast(ctx, APIKeysTable, hex.EncodeToString(hash)); err != nil {
		return fmt.Errorf("orders: %s is revoked, but the broadcast failed (gateways refuse it once their cached copy expires): %w", keyID, err)
	}
	return nil
}

// Authenticate returns the account an active API key belongs to.
func (a *Accounts) Authenticate(ctx context.Context, key string) (string, error) {
	hash, ok := keyHash(key)
	if !ok {
		return "", ErrUnauthenticated
	}
	return a.accountOf(ctx, hash)
}

// keyHash is what a key is stored and found by; ok is false for a string
// that cannot be a key, which needs no lookup to refuse.
func keyHash(key string) (hash [sha256.Size]byte, ok bool) {
	if !strings.HasPrefix(key, apiKeyPrefix) {
		return hash, false
	}
	return sha256.Sum256([]byte(key)), true
}

func (a *Accounts) accountOf(ctx context.Context, hash [sha256.Size]byte) (string, error) {
	var account string
	err := a.db.QueryRow(ctx, apiKeyAccountSQL, hash[:]).Scan(&account)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrUnauthenticated
	}
	if err != nil {
		return "", fmt.Errorf("%w: authenticate: %w", ErrUnavailable, err)
	}
	return account, nil
}
