package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/control"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/signing"
)

const usage = `usage: admin COMMAND [ARGS]   (DATABASE_URL names the database; REDIS_URL the queue server, for
                              halt/resume/revoke-key broadcasts)

  migrate                          apply all schema migrations
  migrate-down                     revert all schema migrations (destroys data)
  create-account NAME              create a customer account; prints account=ACC_...
  issue-key [-scopes read,trade] [-signed] ACCOUNT
                                   issue an API key that may read (GET routes), trade (place and
                                   cancel) or both (the default); prints key_id=KEY_..., api_key=...
                                   and scopes=...; with -signed its requests must be signed, and it
                                   prints signing_secret=ogs_... too (needs SIGNING_KEY_ENCRYPTION_KEY,
                                   the gateways' key, to seal it). Key and secret are shown once
  revoke-key KEY_ID                revoke an API key; gateways hear of it at once by a
                                   coherence broadcast (at the latest when their cached copy of
                                   the key expires: gateway -key-cache-ttl, 5s by default)
  deposit ACCOUNT ASSET AMOUNT     credit funds from the external account (a ledger transaction)
  withdraw ACCOUNT ASSET AMOUNT    debit funds to the external account (a ledger transaction)
  demo                             create a funded demo account and a funded market-maker account
                                   (for cmd/marketmaker), each with a key, and print account=...,
                                   api_key=..., mm_account=... and mm_api_key=...
  halt SYMBOL                      stop an instrument taking orders; gateways hear of it at once
                                   by a coherence broadcast (at the latest at their next refresh)
  resume SYMBOL                    let a halted instrument take orders again
  audit                            check the books: balances (available + held) against their
                                   entries, held against resting orders, conservation per asset,
                                   balanced transactions, no crossed book, every trade at the
                                   maker's price inside both limits between two accounts with
                                   exact fees, fills against trades (docs/durability.md lists the
                                   checks); prints each violation and exits non-zero on any
`

// errViolations: the audit found the books unsound. Its output says how.
var errViolations = errors.New("the audit found violations")

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) < 2 || args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) < 2 {
			return errors.New("no command given")
		}
		return nil
	}
	databaseURL := getenv("DATABASE_URL")
	if databaseURL == "" {
		return errors.New("DATABASE_URL is required")
	}
	command, rest := args[1], args[2:]
	want := map[string]int{
		"migrate": 0, "migrate-down": 0, "create-account": 1, "issue-key": 1, "revoke-key": 1,
		"deposit": 3, "withdraw": 3, "demo": 0, "audit": 0, "halt": 1, "resume": 1,
	}
	count, known := want[command]
	if !known {
		fmt.Fprint(stdout, usage)
		return fmt.Errorf("unknown command %q", command)
	}
	var spec orders.KeySpec
	if command == "issue-key" {
		var err error
		if spec, rest, err = parseKeySpec(rest, stdout); err != nil {
			return err
		}
	}
	if len(rest) != count {
		return fmt.Errorf("%s takes %d argument(s), got %d; see admin help", command, count, len(rest))
	}
	switch command {
	case "migrate":
		return migrations.Up(databaseURL)
	case "migrate-down":
		return migrations.Down(databaseURL)
	}

	db, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	defer db.Close()
	accounts, ledger := postgres.NewAccounts(db), postgres.NewLedger(db)
	switch command {
	case "create-account":
		id, err := accounts.Create(ctx, rest[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "account=%s\n", id)
	case "issue-key":
		return issueKey(ctx, db, getenv("SIGNING_KEY_ENCRYPTION_KEY"), rest[0], spec, stdout)
	case "revoke-key":
		return revokeKey(ctx, db, getenv("REDIS_URL"), rest[0], stdout)
	case "deposit":
		if err := ledger.Deposit(ctx, rest[0], strings.ToUpper(rest[1]), rest[2]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deposited=%s %s to %s\n", rest[2], strings.ToUpper(rest[1]), rest[0])
	case "withdraw":
		if err := ledger.Withdraw(ctx, rest[0], strings.ToUpper(rest[1]), rest[2]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "withdrew=%s %s from %s\n", rest[2], strings.ToUpper(rest[1]), rest[0])
	case "demo":
		return demo(ctx, accounts, ledger, stdout)
	case "audit":
		return audit(ctx, db, stdout)
	case "halt", "resume":
		return setHalted(ctx, db, getenv("REDIS_URL"), strings.ToUpper(rest[0]), command == "halt", stdout)
	}
	return nil
}

// parseKeySpec reads issue-key's flags, and returns the arguments after them.
func parseKeySpec(args []string, stdout io.Writer) (orders.KeySpec, []string, error) {
	flags := flag.NewFlagSet("issue-key", flag.ContinueOnError)
	flags.SetOutput(stdout)
	scopes := flags.String("scopes", "read,trade", "what the key may do: read, trade, or read,trade")
	signed := flags.Bool("signed", false, "every request with the key must be signed with the secret issued with it")
	if err := flags.Parse(args); err != nil {
		return orders.KeySpec{}, nil, err
	}
	parsed, err := orders.ParseScopes(strings.Split(*scopes, ","))
	if err != nil {
		return orders.KeySpec{}, nil, err
	}
	return orders.KeySpec{Scopes: parsed, Signed: *signed}, flags.Args(), nil
}

// issueKey issues a key for the account and prints it, and its signing
// secret, this once: neither is stored as it is printed.
func issueKey(ctx context.Context, db *pgxpool.Pool, encryptionKey, account string, spec orders.KeySpec, stdout io.Writer) error {
	var opts []postgres.AccountsOption
	if spec.Signed {
		if encryptionKey == "" {
			return errors.New("issue-key -signed needs SIGNING_KEY_ENCRYPTION_KEY, the key the gateways open signing secrets with")
		}
		sealer, err := signing.ParseSealer(encryptionKey)
		if err != nil {
			return fmt.Errorf("SIGNING_KEY_ENCRYPTION_KEY: %w", err)
		}
		opts = append(opts, postgres.SealSecretsWith(sealer))
	}
	issued, err := postgres.NewAccounts(db, opts...).IssueKeyFor(ctx, account, spec)
	if err != nil {
		return err
	}
	// Revealed this once, to the holder.
	fmt.Fprintf(stdout, "key_id=%s\napi_key=%s\nscopes=%s\n", issued.ID, issued.Key.Reveal(), issued.Scopes)
	if !issued.SigningSecret.IsZero() {
		fmt.Fprintf(stdout, "signing_secret=%s\n", issued.SigningSecret.Reveal())
	}
	return nil
}

// revokeKey revokes the key and broadcasts it. Without a queue server the key
// is still revoked; gateways refuse it once their cached copy expires, and the
// command says so.
func revokeKey(ctx context.Context, db *pgxpool.Pool, redisURL, keyID string, stdout io.Writer) error {
	caches, closeCaches, err := dialCaches(ctx, redisURL)
	if err != nil {
		return err
	}
	defer closeCaches()
	if err := control.New(db, caches).RevokeKey(ctx, keyID); err != nil {
		return err
	}
	if caches == nil {
		fmt.Fprintf(stdout, "revoked=%s (REDIS_URL unset: gateways refuse it once their cached copy expires)\n", keyID)
		return nil
	}
	fmt.Fprintf(stdout, "revoked=%s\n", keyID)
	return nil
}

// dialCaches connects to the queue server for a broadcast; no server (nil
// caches) when redisURL is empty.
func dialCaches(ctx context.Context, redisURL string) (caches *coherence.Client, closeCaches func(), err error) {
	if redisURL == "" {
		return nil, func() {}, nil
	}
	queues, err := emq.Dial(ctx, redisURL)
	if err != nil {
		return nil, nil, err
	}
	return coherence.New(queues.Redis()), func() { _ = queues.Close() }, nil
}

// setHalted changes the instrument's status and broadcasts it. Without a
// queue server the status still changes; gateways pick it up at their next
// refresh, and the command says so.
func setHalted(ctx context.Context, db *pgxpool.Pool, redisURL, symbol string, halted bool, stdout io.Writer) error {
	caches, closeCaches, err := dialCaches(ctx, redisURL)
	if err != nil {
		return err
	}
	defer closeCaches()
	if err := control.New(db, caches).SetInstrumentHalted(ctx, symbol, halted); err != nil {
		return err
	}
	status := "trading"
	if halted {
		status = "halted"
	}
	if caches == nil {
		fmt.Fprintf(stdout, "%s=%s (REDIS_URL unset: gateways see it at their next refresh)\n", symbol, status)
		return nil
	}
	fmt.Fprintf(stdout, "%s=%s\n", symbol, status)
	return nil
}

// audit prints every violation, then one summary line, and fails when it
// printed any violation.
func audit(ctx context.Context, db *pgxpool.Pool, stdout io.Writer) error {
	report, err := postgres.RunAudit(ctx, db)
	if err != nil {
		return err
	}
	for _, v := range report.Violations {
		fmt.Fprintln(stdout, v)
	}
	if n := len(report.Violations); n > 0 {
		fmt.Fprintf(stdout, "audit: %d violations\n", n)
		return fmt.Errorf("%w: %d", errViolations, n)
	}
	fmt.Fprintf(stdout, "audit: ok, %d balances, %d transactions, %d orders\n", report.Balances, report.Transactions, report.Orders)
	return nil
}

// demoFunds are what each account admin demo creates starts with: the demo
// account enough to trade by hand, the market maker enough to keep its
// quotes (a few levels of each instrument) held for a long time.
var demoFunds = map[string][][2]string{
	"demo":         {{"USD", "100000.00"}, {"BTC", "2"}, {"ETH", "20"}},
	"market maker": {{"USD", "10000000.00"}, {"BTC", "200"}, {"ETH", "2000"}},
}

// demo creates a funded demo account and a funded market-maker account, each
// with a fresh API key. The venue provides no liquidity (it collects the
// fees): the market maker's quotes are what the demo account trades against.
func demo(ctx context.Context, accounts *postgres.Accounts, ledger *postgres.Ledger, stdout io.Writer) error {
	var lines []string
	for _, who := range []struct{ name, prefix string }{{"demo", ""}, {"market maker", "mm_"}} {
		account, err := accounts.Create(ctx, who.name)
		if err != nil {
			return err
		}
		for _, funds := range demoFunds[who.name] {
			if err := ledger.Deposit(ctx, account, funds[0], funds[1]); err != nil {
				return fmt.Errorf("demo: fund %s: %w", account, err)
			}
		}
		_, key, err := accounts.IssueKey(ctx, account)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%saccount=%s\n%sapi_key=%s\n", who.prefix, account, who.prefix, key))
	}
	fmt.Fprint(stdout, strings.Join(lines, ""))
	return nil
}
