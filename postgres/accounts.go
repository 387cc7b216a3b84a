package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/oklog/ulid/v2"
	"github.com/ordergate/ordergate/orders"
)

var (
	//go:embed sql/account_create.sql
	accountCreateSQL string
	//go:embed sql/api_key_issue.sql
	apiKeyIssueSQL string
	//go:embed sql/api_key_revoke.sql
	apiKeyRevokeSQL string
	//go:embed sql/api_key_account.sql
	apiKeyAccountSQL string
	//go:embed sql/api_keys_active.sql
	apiKeysActiveSQL string
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
	key = orders.APIKeyPrefix + base64.RawURLEncoding.EncodeToString(secret)
	keyID = "KEY_" + ulid.Make().String()
	hash := sha256.Sum256([]byte(key))
	tag, err := a.db.Exec(ctx, apiKeyIssueSQL, keyID, account, hash[:])
	if err != nil {
		return "", "", fmt.Errorf("orders: issue key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return "", "", fmt.Errorf("%w: %s", orders.ErrNoAccount, account)
	}
	return keyID, key, nil
}

// RevokeKey revokes an API key by its KEY id and returns the key's hash,
// which caches know it by.
func (a *Accounts) RevokeKey(ctx context.Context, keyID string) (hash []byte, err error) {
	err = a.db.QueryRow(ctx, apiKeyRevokeSQL, keyID).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", orders.ErrNoKey, keyID)
	}
	if err != nil {
		return nil, fmt.Errorf("orders: revoke key: %w", err)
	}
	return hash, nil
}

// Authenticate returns the account an active API key belongs to.
func (a *Accounts) Authenticate(ctx context.Context, key string) (string, error) {
	hash, ok := orders.KeyHash(key)
	if !ok {
		return "", orders.ErrUnauthenticated
	}
	return a.AccountOf(ctx, hash)
}

// AccountOf returns the account of the active API key with the hash.
func (a *Accounts) AccountOf(ctx context.Context, hash [sha256.Size]byte) (string, error) {
	var account string
	err := a.db.QueryRow(ctx, apiKeyAccountSQL, hash[:]).Scan(&account)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", orders.ErrUnauthenticated
	}
	if err != nil {
		return "", fmt.Errorf("%w: authenticate: %w", orders.ErrUnavailable, err)
	}
	return account, nil
}

// ActiveKeys lists the active API keys, newest first, at most most.
func (a *Accounts) ActiveKeys(ctx context.Context, most int) ([]orders.ActiveKey, error) {
	rows, err := a.db.Query(ctx, apiKeysActiveSQL, most)
	if err != nil {
		return nil, fmt.Errorf("%w: list active keys: %w", orders.ErrUnavailable, err)
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (orders.ActiveKey, error) {
		var key orders.ActiveKey
		var hash []byte
		if err := row.Scan(&hash, &key.Account); err != nil {
			return key, err
		}
		if copy(key.Hash[:], hash) != len(key.Hash) {
			return key, fmt.Errorf("a key hash of %d bytes", len(hash))
		}
		return key, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: list active keys: %w", orders.ErrUnavailable, err)
	}
	return keys, nil
}
