package postgres_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/signing"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// migratedPool is a pool on a migrated database of its own, made as the
// workers and the gateway make theirs (postgres.NewPool).
func migratedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	db, err := postgres.NewPool(context.Background(), testserver.MigratedPostgres(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

func TestKeysAuthenticateUntilRevoked(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	accounts := postgres.NewAccounts(db)
	account, err := accounts.Create(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	keyID, key, err := accounts.IssueKey(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	authenticate := func(key string) (orders.ActiveKey, error) {
		hash, ok := orders.KeyHash(key)
		if !ok {
			return orders.ActiveKey{}, orders.ErrUnauthenticated
		}
		return accounts.Key(ctx, hash)
	}
	if got, err := authenticate(key); err != nil || got.Account != account || got.ID != keyID || got.Scopes != orders.AllScopes || got.SealedSecret != nil {
		t.Fatalf("authenticate = %+v, %v; want %s with every scope, unsigned", got, err, account)
	}
	var stored int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE key_hash = convert_to($1, 'UTF8') OR id = $1`, key).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("the key is stored in clear (%d rows, %v)", stored, err)
	}
	if _, err := accounts.RevokeKey(ctx, keyID); err != nil {
		t.Fatal(err)
	}
	if _, err := authenticate(key); !errors.Is(err, orders.ErrUnauthenticated) {
		t.Errorf("revoked key: %v", err)
	}
	if _, err := accounts.RevokeKey(ctx, keyID); !errors.Is(err, orders.ErrNoKey) {
		t.Errorf("second revoke: %v", err)
	}
	for _, bad := range []string{"", "ogk_", key + "x", strings.ToUpper(key)} {
		if _, err := authenticate(bad); !errors.Is(err, orders.ErrUnauthenticated) {
			t.Errorf("key %q: %v", bad, err)
		}
	}
	if _, _, err := accounts.IssueKey(ctx, orders.VenueAccount); !errors.Is(err, orders.ErrNoAccount) {
		t.Errorf("a key for the venue account: %v", err)
	}
}

// TestIssuedKeysKeepScopesAndSealedSecrets: a key is stored with the
// scopes it was issued for, and a signed key's secret only sealed: the row
// holds no trace of it, and it opens under the encryption key, for that key
// alone.
func TestIssuedKeysKeepScopesAndSealedSecrets(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	sealer, err := signing.NewSealer(bytes.Repeat([]byte{7}, signing.EncryptionKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	accounts := postgres.NewAccounts(db, postgres.SealSecretsWith(sealer))
	account, err := accounts.Create(ctx, "dana")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec orders.KeySpec
	}{
		{"read only", orders.KeySpec{Scopes: orders.ScopeRead}},
		{"trade only, signed", orders.KeySpec{Scopes: orders.ScopeTrade, Signed: true}},
		{"both, signed", orders.KeySpec{Scopes: orders.AllScopes, Signed: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			issued, err := accounts.IssueKeyFor(ctx, account, tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if tt.spec.Signed != strings.HasPrefix(issued.SigningSecret.Reveal(), signing.SecretPrefix) {
				t.Fatalf("issued signing secret %q for %+v", issued.SigningSecret.Reveal(), tt.spec)
			}
			hash, _ := orders.KeyHash(issued.Key.Reveal())
			key, err := accounts.Key(ctx, hash)
			if err != nil || key.ID != issued.ID || key.Scopes != tt.spec.Scopes || (key.SealedSecret != nil) != tt.spec.Signed {
				t.Fatalf("stored %+v, %v; want %s with %s", key, err, issued.ID, tt.spec.Scopes)
			}
			var row string
			if err := db.QueryRow(ctx, `SELECT row_to_json(k)::text || encode(coalesce(signing_secret_sealed, ''), 'escape') FROM api_keys k WHERE id = $1`,
				issued.ID).Scan(&row); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(row, issued.ID) {
				t.Fatalf("read the wrong row: %s", row)
			}
			if !tt.spec.Signed {
				return
			}
			secretPart := strings.TrimPrefix(issued.SigningSecret.Reveal(), signing.SecretPrefix)
			if strings.Contains(row, secretPart) || strings.Contains(row, hex.EncodeToString([]byte(secretPart))) {
				t.Errorf("the signing secret is stored in clear: %s", row)
			}
			if opened, err := sealer.Open(key.SealedSecret, key.ID); err != nil || opened.Reveal() != issued.SigningSecret.Reveal() {
				t.Errorf("the sealed secret opens to another, %v; want the issued one", err)
			}
		})
	}
	refusals := []struct {
		name     string
		accounts *postgres.Accounts
		spec     orders.KeySpec
		want     error
	}{
		{"no scope", accounts, orders.KeySpec{}, nil},
		{"a scope that does not exist", accounts, orders.KeySpec{Scopes: 1 << 5}, nil},
		{"signed without an encryption key", postgres.NewAccounts(db), orders.KeySpec{Scopes: orders.AllScopes, Signed: true}, postgres.ErrNoSealer},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			issued, err := tt.accounts.IssueKeyFor(ctx, account, tt.spec)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("issued %+v, %v; want refused (%v)", issued, err, tt.want)
			}
		})
	}
}

func TestDepositsAndWithdrawalsAreLedgerTransactions(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	ledger := postgres.NewLedger(db)
	account, err := postgres.NewAccounts(db).Create(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		move    func() error
		wantErr error
	}{
		{"deposit", func() error { return ledger.Deposit(ctx, account, "USD", "100.50") }, nil},
		{"withdraw part", func() error { return ledger.Withdraw(ctx, account, "USD", "0.50") }, nil},
		{"withdraw more than held", func() error { return ledger.Withdraw(ctx, account, "USD", "100.01") }, orders.ErrFunds},
		{"asset scale", func() error { return ledger.Deposit(ctx, account, "USD", "0.001") }, orders.ErrAsset},
		{"unknown asset", func() error { return ledger.Deposit(ctx, account, "XYZ", "1") }, orders.ErrAsset},
		{"unknown account", func() error { return ledger.Deposit(ctx, "ACC_01J9Z7W2X3Y4Z5A6B7C8D9E0F1", "USD", "1") }, orders.ErrNoAccount},
		{"malformed amount", func() error { return ledger.Deposit(ctx, account, "USD", "1e3") }, orders.ErrAmount},
		{"deposit to the external account", func() error { return ledger.Deposit(ctx, orders.ExternalAccount, "USD", "50.00") }, orders.ErrNoAccount},
		{"withdraw from the external account", func() error { return ledger.Withdraw(ctx, orders.ExternalAccount, "USD", "50.00") }, orders.ErrNoAccount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.move()
			if tt.wantErr == nil && err != nil || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
		})
	}
	// Concurrent deposits and withdrawals keep conservation and versions.
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(2)
		go func() { defer wg.Done(); _ = ledger.Deposit(ctx, account, "USD", "1.00") }()
		go func() { defer wg.Done(); _ = ledger.Withdraw(ctx, account, "USD", "1.00") }()
	}
	wg.Wait()
	var available, total string
	var version, entries int64
	if err := db.QueryRow(ctx, `SELECT available::text, version FROM balances WHERE account_id = $1 AND asset = 'USD'`, account).Scan(&available, &version); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT count(*) FROM ledger_entries WHERE account_id = $1 AND asset = 'USD'`, account).Scan(&entries); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow(ctx, `SELECT sum(available)::text FROM balances WHERE asset = 'USD'`).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if available != "100.000000000000000000" || version != entries || total != "0.000000000000000000" {
		t.Errorf("available %s, version %d, entries %d, sum of all USD %s", available, version, entries, total)
	}
	if violations, err := postgres.Audit(ctx, db); err != nil || len(violations) != 0 {
		t.Errorf("audit: %v, %v", violations, err)
	}
}
