package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
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

// TestAuditExitStatus audits a demo exchange that settled orders, then the
// same books after a balance was changed behind the ledger's back.
func TestAuditExitStatus(t *testing.T) {
	database := testserver.Postgres(t)
	mustAdmin(t, database.URL, "migrate")
	account := strings.TrimPrefix(strings.TrimSpace(strings.Split(mustAdmin(t, database.URL, "demo"), "\n")[0]), "account=")
	db := database.Pool(t)
	settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler))
	for i, quantity := range []string{"0.01", "0.02", "500"} {
		id := orders.NewOrderID()
		created, _ := orders.ParseOrderID(id)
		price := decimal.MustParse("50000.00")
		payload := fmt.Sprintf(`{"id":%q,"client_order_id":"c-%d","account_id":%q,"symbol":"BTC-USD","side":"buy","type":"limit",
			"quantity":%q,"price":%q,"status":"pending","created_at":%q}`, id, i, account, quantity, price, created.Format("2006-01-02T15:04:05.000Z07:00"))
		if err := settlement.Settle(settler)(context.Background(), emq.Claim{ID: id, Kind: orders.KindPlace, Payload: []byte(payload), Token: 1}); err != nil {
			t.Fatalf("settle %s: %v", quantity, err)
		}
	}

	out, err := admin(t, database.URL, "audit")
	// demo: 3 balances each of the external world and the demo account, 3
	// deposits; then 2 bids resting (a hold each, and the venue's USD fee
	// row opened) and a rejected one
	if err != nil || out != "audit: ok, 7 balances, 5 transactions, 3 orders\n" {
		t.Fatalf("audit of sound books = %v, printed %q", err, out)
	}

	if _, err := db.Exec(context.Background(), `UPDATE balances SET available = available + 0.01 WHERE account_id = $1 AND asset = 'USD'`, account); err != nil {
		t.Fatal(err)
	}
	out, err = admin(t, database.URL, "audit")
	if !errors.Is(err, errViolations) {
		t.Errorf("audit of a doctored balance = %v, want a failure", err)
	}
	want := regexp.MustCompile(`^balance_matches_ledger balances:` + account + `:USD: available \S+, held \S+; ledger entries sum to \S+ and \S+
asset_conserved USD: balances sum to 0.01, not 0
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
