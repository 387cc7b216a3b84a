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
	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/signing"
)

var (
	//go:embed sql/account_create.sql
	accountCreateSQL string
	//go:embed sql/api_key_issue.sql
	apiKeyIssueSQL string
	//go:embed sql/api_key_revoke.sql
	apiKeyRevokeSQL string
	//go:embed sql/api_key_active.sql
	apiKeyActiveSQL string
	//go:embed sql/api_keys_active.sql
	apiKeysActiveSQL string
	//go:embed sql/api_keys_active_among.sql
	apiKeysActiveAmongSQL string
)

// Accounts keeps accounts and their API keys in PostgreSQL. A key is stored
// only as its SHA-256, so a database leak does not leak keys, and a key is
// found by its hash, so no comparison of secrets runs in variable time. A
// key's signing secret is stored only sealed (signing.Sealer).
type Accounts struct {
	db *pgxpool.Pool
	// sealer seals the signing secrets of keys issued Signed; nil issues
	// none.
	sealer *signing.Sealer
}

// AccountsOption configures Accounts.
type AccountsOption func(*Accounts)

// SealSecretsWith seals the signing secrets of keys issued with
// KeySpec.Signed under sealer; without it such keys are refused.
func SealSecretsWith(sealer *signing.Sealer) AccountsOption {
	return func(a *Accounts) { a.sealer = sealer }
}

// ErrNoSealer: a key that requires signatures was asked of Accounts made
// without SealSecretsWith.
var ErrNoSealer = errors.New("postgres: a key that requires signatures needs an encryption key to seal its secret (SIGNING_KEY_ENCRYPTION_KEY)")

// NewAccounts uses db.
func NewAccounts(db *pgxpool.Pool, opts ...AccountsOption) *Accounts {
	a := &Accounts{db: db}
	for _, opt := range opts {
		opt(a)
	}
	return a
}

// Create makes a customer account and returns its ACC id.
func (a *Accounts) Create(ctx context.Context, name string) (string, error) {
	id := "ACC_" + ulid.Make().String()
	if _, err := a.db.Exec(ctx, accountCreateSQL, id, name); err != nil {
		return "", fmt.Errorf("postgres: create account: %w", err)
	}
	return id, nil
}

// IssueKey makes a new API key for the account with every scope and no
// signing, as most callers want: IssueKeyFor with orders.AllScopes.
func (a *Accounts) IssueKey(ctx context.Context, account string) (keyID, key string, err error) {
	issued, err := a.IssueKeyFor(ctx, account, orders.KeySpec{Scopes: orders.AllScopes})
	return issued.ID, issued.Key.Reveal(), err
}

// IssueKeyFor makes a new API key for the account as spec says. The key and
// its signing secret are returned once: the key is stored as its hash, the
// secret sealed.
func (a *Accounts) IssueKeyFor(ctx context.Context, account string, spec orders.KeySpec) (orders.IssuedKey, error) {
	if err := spec.Scopes.Check(); err != nil {
		return orders.IssuedKey{}, fmt.Errorf("postgres: issue key: %w", err)
	}
	if spec.Signed && a.sealer == nil {
		return orders.IssuedKey{}, ErrNoSealer
	}
	random := make([]byte, 32)
	if _, err := rand.Read(random); err != nil {
		return orders.IssuedKey{}, fmt.Errorf("postgres: issue key: %w", err)
	}
	issued := orders.IssuedKey{
		ID:     "KEY_" + ulid.Make().String(),
		Key:    secret.New(orders.APIKeyPrefix + base64.RawURLEncoding.EncodeToString(random)),
		Scopes: spec.Scopes,
	}
	var sealed []byte
	if spec.Signed {
		signingSecret, err := signing.NewSecret()
		if err != nil {
			return orders.IssuedKey{}, fmt.Errorf("postgres: issue key: %w", err)
		}
		if sealed, err = a.sealer.Seal(signingSecret, issued.ID); err != nil {
			return orders.IssuedKey{}, fmt.Errorf("postgres: issue key: %w", err)
		}
		issued.SigningSecret = signingSecret
	}
	hash := sha256.Sum256([]byte(issued.Key.Reveal()))
	tag, err := a.db.Exec(ctx, apiKeyIssueSQL, issued.ID, account, hash[:], spec.Scopes.Names(), sealed)
	if err != nil {
		return orders.IssuedKey{}, fmt.Errorf("postgres: issue key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return orders.IssuedKey{}, fmt.Errorf("%w: %s", orders.ErrNoAccount, account)
	}
	return issued, nil
}

// RevokeKey revokes an API key by its KEY id and returns the key's hash,
// which caches know it by.
func (a *Accounts) RevokeKey(ctx context.Context, keyID string) (hash []byte, err error) {
	err = a.db.QueryRow(ctx, apiKeyRevokeSQL, keyID).Scan(&hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", orders.ErrNoKey, keyID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: revoke key: %w", err)
	}
	return hash, nil
}

// Key returns the active API key with the hash (orders.ErrUnauthenticated
// when it is unknown or revoked).
func (a *Accounts) Key(ctx context.Context, hash [sha256.Size]byte) (orders.ActiveKey, error) {
	key := orders.ActiveKey{Hash: hash}
	err := scanKey(a.db.QueryRow(ctx, apiKeyActiveSQL, hash[:]), &key)
	if errors.Is(err, pgx.ErrNoRows) {
		return orders.ActiveKey{}, orders.ErrUnauthenticated
	}
	if err != nil {
		return orders.ActiveKey{}, fmt.Errorf("%w: authenticate: %w", orders.ErrUnavailable, err)
	}
	return key, nil
}

// Keys finds the active API keys among hashes in one query: a hash with
// no key in the answer is unknown or revoked.
func (a *Accounts) Keys(ctx context.Context, hashes [][sha256.Size]byte) ([]orders.ActiveKey, error) {
	args := make([][]byte, len(hashes))
	for i := range hashes {
		args[i] = hashes[i][:]
	}
	keys, err := a.collectKeys(ctx, apiKeysActiveAmongSQL, args)
	if err != nil {
		return nil, fmt.Errorf("%w: authenticate %d keys: %w", orders.ErrUnavailable, len(hashes), err)
	}
	return keys, nil
}

// ActiveKeys lists the active API keys, newest first, at most most.
func (a *Accounts) ActiveKeys(ctx context.Context, most int) ([]orders.ActiveKey, error) {
	keys, err := a.collectKeys(ctx, apiKeysActiveSQL, most)
	if err != nil {
		return nil, fmt.Errorf("%w: list active keys: %w", orders.ErrUnavailable, err)
	}
	return keys, nil
}

// collectKeys runs a query whose rows are keys led by their hash.
func (a *Accounts) collectKeys(ctx context.Context, query string, args ...any) ([]orders.ActiveKey, error) {
	rows, err := a.db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (orders.ActiveKey, error) {
		var key orders.ActiveKey
		var hash []byte
		if err := scanKey(row, &key, &hash); err != nil {
			return key, err
		}
		if copy(key.Hash[:], hash) != len(key.Hash) {
			return key, fmt.Errorf("a key hash of %d bytes", len(hash))
		}
		return key, nil
	})
}

// scanKey reads a key's columns into key: first what leading names (the
// hash, where a query returns it), then the id, account, scopes and sealed
// secret.
func scanKey(row pgx.Row, key *orders.ActiveKey, leading ...any) error {
	var scopes []string
	if err := row.Scan(append(leading, &key.ID, &key.Account, &scopes, &key.SealedSecret)...); err != nil {
		return err
	}
	var err error
	key.Scopes, err = orders.ParseScopes(scopes)
	return err
}
