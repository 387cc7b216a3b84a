package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// admin runs the command as main does and returns what it printed.
func admin(t testing.TB, databaseURL string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"admin"}, args...), func(name string) string {
		if name == "DATABASE_URL" {
			return databaseURL
		}
		return ""
	}, &out)
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
	want := regexp.MustCompile(`^balance_matches_ledger balances:` + account + `:USD: available \S+, its ledger entries sum to \S+; held 0, its ledger entries sum to 0
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
