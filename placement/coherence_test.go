package placement_test

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

// applyResult is what one Apply answered.
type applyResult struct {
	payload  string
	advanced bool
	err      error
}

// applyAll applies payloads concurrently, all released at once, and returns
// the answers in payload order.
func applyAll(ctx context.Context, consumer *placement.BalanceCoherence, payloads []string) []applyResult {
	results := make([]applyResult, len(payloads))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, payload := range payloads {
		wg.Go(func() {
			<-start
			advanced, err := consumer.Apply(ctx, payload)
			results[i] = applyResult{payload: payload, advanced: advanced, err: err}
		})
	}
	close(start)
	wg.Wait()
	return results
}

// fundNames deposits 1 of each asset versions times into each of accounts
// fresh accounts and returns the balances' outbox names.
func (f *coherenceFixture) fundNames(t testing.TB, accounts int, assets []string, versions int) []string {
	t.Helper()
	var names []string
	for range accounts {
		account := f.newAccount(t)
		for _, asset := range assets {
			for range versions {
				f.depositWithOutbox(t, account, asset, "1")
			}
			names = append(names, orders.BalanceName(account, asset))
		}
	}
	return names
}

func payloadOf(name string, version int64) string {
	return name + "@" + strconv.FormatInt(version, 10)
}

// appliedRow is an outbox_applied row as a test compares it.
type appliedRow struct {
	Version   int64
	AppliedAt time.Time
}

func (r appliedRow) equal(other appliedRow) bool {
	return r.Version == other.Version && r.AppliedAt.Equal(other.AppliedAt)
}

func (f *coherenceFixture) appliedRows(t testing.TB) map[string]appliedRow {
	t.Helper()
	rows, err := f.db.Query(context.Background(), `SELECT name, version, applied_at FROM outbox_applied`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	applied := map[string]appliedRow{}
	for rows.Next() {
		var name string
		var row appliedRow
		if err := rows.Scan(&name, &row.Version, &row.AppliedAt); err != nil {
			t.Fatal(err)
		}
		applied[name] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return applied
}

// assertCacheCurrent checks that the cache holds each name's balance as
// PostgreSQL holds it now.
func (f *coherenceFixture) assertCacheCurrent(t testing.TB, names []string) {
	t.Helper()
	truth := placement.NewBalances(postgres.NewBalances(f.db), nil, f.log)
	for _, name := range names {
		account, asset := splitBalanceName(t, name)
		balances, err := truth.Of(context.Background(), account)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(balances, func(b orders.Balance) bool { return b.Asset == asset })
		if i < 0 {
			t.Fatalf("%s: no such balance", name)
		}
		want := balances[i]
		if got := f.cachedBalance(t, account, asset); got.Version != want.Version || got.Value != want.Available {
			t.Errorf("%s: cache holds version %d of %q, PostgreSQL version %d of %q", name, got.Version, got.Value, want.Version, want.Available)
		}
	}
}

func splitBalanceName(t testing.TB, name string) (account, asset string) {
	t.Helper()
	rest, ok := strings.CutPrefix(name, placement.BalancesTable+":")
	if account, asset, found := strings.Cut(rest, ":"); ok && found {
		return account, asset
	}
	t.Fatalf("%q names no balance", name)
	return "", ""
}

func TestConcurrentAppliesEndAtTheNewestVersion(t *testing.T) {
	for _, c := range []struct {
		name     string
		accounts int
		assets   []string
		versions int
		// copies is how often each version is delivered; newestCopies
		// overrides it for each name's newest version.
		copies, newestCopies int
	}{
		{name: "one name, every version once", accounts: 1, assets: []string{"USD"}, versions: 24, copies: 1, newestCopies: 1},
		{name: "many names, every version twice", accounts: 4, assets: []string{"USD", "BTC"}, versions: 6, copies: 2, newestCopies: 2},
		{name: "the newest version many times", accounts: 3, assets: []string{"BTC"}, versions: 4, copies: 1, newestCopies: 9},
		{name: "more names than a batch takes", accounts: 40, assets: []string{"USD", "ETH"}, versions: 2, copies: 1, newestCopies: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCoherenceFixture(t)
			names := f.fundNames(t, c.accounts, c.assets, c.versions)
			var payloads []string
			for _, name := range names {
				for version := int64(1); version <= int64(c.versions); version++ {
					copies := c.copies
					if version == int64(c.versions) {
						copies = c.newestCopies
					}
					for range copies {
						payloads = append(payloads, payloadOf(name, version))
					}
				}
			}
			random := rand.New(rand.NewPCG(uint64(len(payloads)), 7))
			random.Shuffle(len(payloads), func(i, j int) { payloads[i], payloads[j] = payloads[j], payloads[i] })

			newestAdvanced := map[string]int{}
			for _, result := range applyAll(ctx, f.consumer, payloads) {
				if result.err != nil {
					t.Fatalf("Apply(%s): %v", result.payload, result.err)
				}
				for _, name := range names {
					if result.advanced && result.payload == payloadOf(name, int64(c.versions)) {
						newestAdvanced[name]++
					}
				}
			}
			applied := f.appliedRows(t)
			for _, name := range names {
				if got := applied[name].Version; got != int64(c.versions) {
					t.Errorf("%s: applied version %d, want %d", name, got, c.versions)
				}
				// The applied version reached the newest once, so exactly
				// one of its deliveries acted.
				if newestAdvanced[name] != 1 {
					t.Errorf("%s: %d deliveries of the newest version report they acted, want 1", name, newestAdvanced[name])
				}
			}
			f.assertCacheCurrent(t, names)

			// Every delivery again, as a redelivering queue might: each is
			// a duplicate or older than what was applied, and nothing moves.
			random.Shuffle(len(payloads), func(i, j int) { payloads[i], payloads[j] = payloads[j], payloads[i] })
			for _, result := range applyAll(ctx, f.consumer, payloads) {
				if result.err != nil || result.advanced {
					t.Errorf("redelivered %s: advanced = %v, %v; want false", result.payload, result.advanced, result.err)
				}
			}
			if again := f.appliedRows(t); !maps.EqualFunc(again, applied, appliedRow.equal) {
				t.Errorf("redeliveries changed outbox_applied:\n%v\nwant\n%v", again, applied)
			}
			f.assertCacheCurrent(t, names)
		})
	}
}

// applyGathered applies first and, once first's batch is held up by a lock
// on outbox_applied (so the applier is busy), rest concurrently; rest
// gathers behind it and is applied in batches when the lock goes.
func (f *coherenceFixture) applyGathered(t testing.TB, first string, rest []string) (applyResult, []applyResult) {
	t.Helper()
	ctx := context.Background()
	tx, err := f.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE outbox_applied IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	firstDone := make(chan applyResult, 1)
	go func() {
		advanced, err := f.consumer.Apply(ctx, first)
		firstDone <- applyResult{payload: first, advanced: advanced, err: err}
	}()
	waitFor(t, 10*time.Second, "the first batch waits for the lock", func() bool {
		var waiting int
		if err := f.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting > 0
	})
	results := make(chan []applyResult, 1)
	go func() { results <- applyAll(ctx, f.consumer, rest) }()
	waitFor(t, 10*time.Second, "the rest gather behind the first batch", func() bool {
		return placement.CoherenceWaiting(f.consumer) == len(rest)
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	return <-firstDone, <-results
}

func TestDeliveriesWaitingTogetherAreAppliedInBoundedBatches(t *testing.T) {
	for _, c := range []struct {
		name     string
		accounts int
		// batches is how many statements advance the gathered deliveries:
		// a batch takes at most placement.CoherenceBatch.
		batches int
	}{
		{name: "fewer than a batch takes", accounts: 5, batches: 1},
		{name: "exactly a batch", accounts: placement.CoherenceBatch / 2, batches: 1},
		{name: "more than a batch takes", accounts: placement.CoherenceBatch, batches: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newCoherenceFixture(t)
			names := f.fundNames(t, c.accounts, []string{"USD", "BTC"}, 1)
			blocker := f.fundNames(t, 1, []string{"USD"}, 1)[0]
			rest := make([]string, len(names))
			for i, name := range names {
				rest[i] = payloadOf(name, 1)
			}
			first, results := f.applyGathered(t, payloadOf(blocker, 1), rest)
			if first.err != nil || !first.advanced {
				t.Errorf("first delivery: advanced = %v, %v; want true", first.advanced, first.err)
			}
			for _, result := range results {
				if result.err != nil || !result.advanced {
					t.Errorf("Apply(%s): advanced = %v, %v; want true", result.payload, result.advanced, result.err)
				}
			}
			// One statement stamps every row it advances with its
			// transaction's time, so the distinct times count the batches.
			applied := f.appliedRows(t)
			sizes := map[time.Time]int{}
			for _, name := range names {
				row, ok := applied[name]
				if !ok || row.Version != 1 {
					t.Fatalf("%s: applied %+v, want version 1", name, row)
				}
				if row.AppliedAt.Equal(applied[blocker].AppliedAt) {
					t.Errorf("%s was applied with the first delivery, which was in flight before it came", name)
				}
				sizes[row.AppliedAt]++
			}
			if len(sizes) != c.batches {
				t.Errorf("%d deliveries applied in %d batches %v, want %d", len(names), len(sizes), sizes, c.batches)
			}
			for _, size := range sizes {
				if size > placement.CoherenceBatch {
					t.Errorf("a batch of %d, more than %d", size, placement.CoherenceBatch)
				}
			}
			f.assertCacheCurrent(t, append(names, blocker))
		})
	}
}

func TestABatchThatCannotFillTheCacheAdvancesNothing(t *testing.T) {
	ctx := context.Background()
	f := newCoherenceFixture(t)
	names := f.fundNames(t, 6, []string{"USD", "BTC"}, 2)
	blocker := f.fundNames(t, 1, []string{"USD"}, 1)[0]
	var rest []string
	for _, name := range names {
		rest = append(rest, payloadOf(name, 1), payloadOf(name, 2))
	}

	f.redis.Stop(t)
	first, results := f.applyGathered(t, payloadOf(blocker, 1), rest)
	for _, result := range append(results, first) {
		err := f.consumer.Handle(ctx, emq.Claim{ID: "JOB_X", Kind: placement.KindBalanceCoherence, Payload: []byte(result.payload), Token: 1})
		if result.err == nil || result.advanced || errors.Is(err, emq.ErrPermanent) {
			t.Errorf("Apply(%s) with Redis down = %v, %v; want an error to retry (Handle: %v)", result.payload, result.advanced, result.err, err)
		}
	}
	// Nothing recorded, or the retries would find their versions applied
	// and the cache would miss these changes for good.
	if applied := f.appliedRows(t); len(applied) != 0 {
		t.Errorf("outbox_applied after failed fills: %v, want nothing", applied)
	}

	f.redis.Restart(t)
	// After a run of failed dials the client waits before dialing again;
	// the queue's retries would wait longer still.
	waitFor(t, 10*time.Second, "the client reaches the restarted Redis", func() bool {
		return f.rdb.Ping(ctx).Err() == nil
	})
	for _, result := range applyAll(ctx, f.consumer, append(rest, first.payload)) {
		if result.err != nil {
			t.Errorf("retry of %s: %v", result.payload, result.err)
		}
	}
	applied := f.appliedRows(t)
	for _, name := range names {
		if applied[name].Version != 2 {
			t.Errorf("%s: applied version %d after the retries, want 2", name, applied[name].Version)
		}
	}
	f.assertCacheCurrent(t, append(names, blocker))
}

func TestACallerThatGaveUpIsLeftOutOfItsBatch(t *testing.T) {
	f := newCoherenceFixture(t)
	name := f.fundNames(t, 1, []string{"USD"}, 1)[0]
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if advanced, err := f.consumer.Apply(ctx, payloadOf(name, 1)); advanced || !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a cancelled context = %v, %v; want context.Canceled", advanced, err)
	}
	// The queue delivers it again; then it acts.
	if advanced, err := f.consumer.Apply(context.Background(), payloadOf(name, 1)); !advanced || err != nil {
		t.Errorf("Apply after = %v, %v; want true", advanced, err)
	}
	f.assertCacheCurrent(t, []string{name})
}
