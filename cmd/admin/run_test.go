package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// admin runs the command as main does and returns what it printed.
func admin(t testing.TB, databaseURL string, args ...string) (string, error) {
	t.Helper()
	return adminWith(t, map[string]string{"DATABASE_URL": databaseURL}, args...)
}

// adminWith is admin with the environment env.
func adminWith(t testing.TB, env map[string]string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"admin"}, args...), func(name string) string { return env[name] }, &out)
	return out.String(), err
}

func mustAdmin(t testing.TB, databaseURL string, args ...string) string {
	t.Helper()
	out, err := admin(t, databaseURL, args...)
	if err != nil {
		t.Fatalf("admin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestDemoFundsTwoAccountsWithKeys runs demo: a demo account and a market
// maker, each funded in every asset and with its own key, and the venue
// left alone (it no longer provides liquidity).
func TestDemoFundsTwoAccountsWithKeys(t *testing.T) {
	database := testserver.Postgres(t)
	mustAdmin(t, database.URL, "migrate")
	out := mustAdmin(t, database.URL, "demo")
	want := regexp.MustCompile(`^account=(ACC_\w{26})\napi_key=(\S+)\nmm_account=(ACC_\w{26})\nmm_api_key=(\S+)\n$`)
	m := want.FindStringSubmatch(out)
	if m == nil || m[1] == m[3] || m[2] == m[4] {
		t.Fatalf("demo printed %q", out)
	}
	db := database.Pool(t)
	for _, account := range []string{m[1], m[3]} {
		var assets int
		if err := db.QueryRow(context.Background(), `SELECT count(*) FROM balances WHERE account_id = $1 AND available > 0`,
			account).Scan(&assets); err != nil || assets != 3 {
			t.Errorf("%s holds %d assets (%v), want 3", account, assets, err)
		}
	}
	var venue int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM balances WHERE account_id = $1`, orders.VenueAccount).Scan(&venue); err != nil || venue != 0 {
		t.Errorf("the venue has %d balances (%v), want none", venue, err)
	}
}

// TestAuditExitStatus audits the demo's books, then the same books after a
// balance was changed behind the ledger's back.
func TestAuditExitStatus(t *testing.T) {
	database := testserver.Postgres(t)
	mustAdmin(t, database.URL, "migrate")
	account := strings.TrimPrefix(strings.TrimSpace(strings.Split(mustAdmin(t, database.URL, "demo"), "\n")[0]), "account=")
	db := database.Pool(t)

	out, err := admin(t, database.URL, "audit")
	// demo: 3 balances each of the external world, the demo account and the
	// market maker, 6 deposits
	if err != nil || out != "audit: ok, 9 balances, 6 transactions, 0 orders\n" {
		t.Fatalf("audit of sound books = %v, printed %q", err, out)
	}

	if _, err := db.Exec(context.Background(), `UPDATE balances SET available = available + 0.01 WHERE account_id = $1 AND asset = 'USD'`, account); err != nil {
		t.Fatal(err)
	}
	out, err = admin(t, database.URL, "audit")
	if !errors.Is(err, errViolations) {
		t.Errorf("audit of a doctored balance = %v, want a failure", err)
	}
	want := regexp.MustCompile(`^balance_matches_ledger balances:` + account + `:USD: available \S+ \+ held 0 = \S+, its ledger entries sum to \S+
asset_conserved USD: balances sum to 0.01 \(available 0.01, held 0\), not 0
audit: 2 violations
$`)
	if !want.MatchString(out) {
		t.Errorf("audit printed\n%s", out)
	}
}

func TestUsageListsAudit(t *testing.T) {
	out, err := admin(t, "", "help")
	if err != nil || !strings.Contains(out, "\n  audit ") {
		t.Errorf("help = %v:\n%s", err, out)
	}
	if _, err := admin(t, "postgres://unused", "audit", "now"); err == nil || !strings.Contains(err.Error(), "audit takes 0 argument(s)") {
		t.Errorf("audit with an argument = %v", err)
	}
}

// TestIssueKeyPrintsTheSecretOnce: issue-key issues keys for the scopes
// asked, and a signed one's secret is printed once and stored only sealed:
// the row holds no trace of it. A signed key needs the encryption key.
func TestIssueKeyPrintsTheSecretOnce(t *testing.T) {
	database := testserver.Postgres(t)
	mustAdmin(t, database.URL, "migrate")
	account := strings.TrimPrefix(strings.TrimSpace(mustAdmin(t, database.URL, "create-account", "frank")), "account=")
	db := database.Pool(t)
	env := map[string]string{"DATABASE_URL": database.URL, "SIGNING_KEY_ENCRYPTION_KEY": strings.Repeat("0f", 32)}
	printed := regexp.MustCompile(`^key_id=(KEY_\w{26})\napi_key=(ogk_\S+)\nscopes=(\S+)\n(?:signing_secret=(ogs_\S+)\n)?$`)
	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		wantScopes string
		wantSigned bool
		refused    string
	}{
		{"every scope by default", env, nil, "read,trade", false, ""},
		{"read only", env, []string{"-scopes", "read"}, "read", false, ""},
		{"trade only, signed", env, []string{"-scopes", "trade", "-signed"}, "trade", true, ""},
		{"signed without the encryption key", map[string]string{"DATABASE_URL": database.URL}, []string{"-signed"}, "", false, "SIGNING_KEY_ENCRYPTION_KEY"},
		{"a scope that does not exist", env, []string{"-scopes", "write"}, "", false, "unknown scope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := adminWith(t, tt.env, append(append([]string{"issue-key"}, tt.args...), account)...)
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Errorf("issue-key %v = %v, printed %q; want refused naming %s", tt.args, err, out, tt.refused)
				}
				return
			}
			m := printed.FindStringSubmatch(out)
			if err != nil || m == nil || m[3] != tt.wantScopes || (m[4] != "") != tt.wantSigned {
				t.Fatalf("issue-key %v = %v, printed %q", tt.args, err, out)
			}
			var row string
			if err := db.QueryRow(context.Background(), `SELECT row_to_json(k)::text FROM api_keys k WHERE id = $1`, m[1]).Scan(&row); err != nil {
				t.Fatal(err)
			}
			if secret := m[4]; secret != "" {
				random := strings.TrimPrefix(secret, "ogs_")
				if strings.Count(out, random) != 1 || strings.Contains(row, random) || strings.Contains(row, hex.EncodeToString([]byte(random))) {
					t.Errorf("the secret is printed %d times, or stored in clear: %s", strings.Count(out, random), row)
				}
			}
		})
	}
}
