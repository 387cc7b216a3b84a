package placement_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	"github.com/ordergate/ordergate/testkit/testserver"
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

// assertCacheCurrent checks that the cache holds each name's balance as
// PostgreSQL holds it now.
func (f *coherenceFixture) assertCacheCurrent(t testing.TB, names []string) {
	t.Helper()
	truth := placement.NewBalances(postgres.NewBalances(f.db), nil, f.logger)
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
	testserver.Parallel(t)
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

			advanced := map[string]int{}
			for _, result := range applyAll(ctx, f.consumer, payloads) {
				if result.err != nil {
					t.Fatalf("Apply(%s): %v", result.payload, result.err)
				}
				if result.advanced {
					name, _, _ := strings.Cut(result.payload, "@")
					advanced[name]++
				}
			}
			// Every delivery fills the balance's current row, which stays
			// the newest version throughout: the first fill of each name
			// writes it, and every later one finds it cached.
			for _, name := range names {
				if advanced[name] != 1 {
					t.Errorf("%s: %d deliveries report they wrote the cache, want 1", name, advanced[name])
				}
			}
			f.assertCacheCurrent(t, names)
			cached := testserver.Keys(t, f.rdb, placement.BalanceCacheKey("*"))
			before := f.cacheContents(t, cached)

			// Every delivery again, as a redelivering queue might: each
			// finds its balance cached at the newest version, and nothing
			// moves.
			random.Shuffle(len(payloads), func(i, j int) { payloads[i], payloads[j] = payloads[j], payloads[i] })
			for _, result := range applyAll(ctx, f.consumer, payloads) {
				if result.err != nil || result.advanced {
					t.Errorf("redelivered %s: advanced = %v, %v; want false", result.payload, result.advanced, result.err)
				}
			}
			if after := f.cacheContents(t, cached); !maps.Equal(after, before) {
				t.Errorf("redeliveries changed the cache:\n%v\nwant\n%v", after, before)
			}
		})
	}
}

// gatedRows reads balances' current rows, and holds the first read until
// open is closed, recording the size of every read: a read is a batch.
type gatedRows struct {
	placement.BalanceRows
	entered chan struct{}
	open    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	sizes   []int
}

func newGatedRows(rows placement.BalanceRows) *gatedRows {
	return &gatedRows{BalanceRows: rows, entered: make(chan struct{}), open: make(chan struct{})}
}

func (g *gatedRows) Current(ctx context.Context, named []orders.BalanceVersion) (map[string]*orders.Balance, error) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(named))
	g.mu.Unlock()
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
	return g.BalanceRows.Current(ctx, named)
}

func (g *gatedRows) batchSizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sizes)
}

// applyGathered applies first and, once first's batch is held at its read
// (so the applier is busy), rest concurrently; rest gathers behind it and is
// applied in batches when the read goes on. It returns the answers and the
// consumer's batch sizes, first's batch first.
func (f *coherenceFixture) applyGathered(t testing.TB, first string, rest []string) (applyResult, []applyResult, []int) {
	t.Helper()
	ctx := context.Background()
	rows := newGatedRows(postgres.NewBalances(f.db))
	consumer := placement.NewBalanceCoherence(rows, f.caches, f.logger)
	firstDone := make(chan applyResult, 1)
	go func() {
		advanced, err := consumer.Apply(ctx, first)
		firstDone <- applyResult{payload: first, advanced: advanced, err: err}
	}()
	select {
	case <-rows.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first batch never read")
	}
	results := make(chan []applyResult, 1)
	go func() { results <- applyAll(ctx, consumer, rest) }()
	waitFor(t, 10*time.Second, "the rest gather behind the first batch", func() bool {
		return placement.CoherenceWaiting(consumer) == len(rest)
	})
	close(rows.open)
	return <-firstDone, <-results, rows.batchSizes()
}

func TestDeliveriesWaitingTogetherAreAppliedInBoundedBatches(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name     string
		accounts int
		// batches is how many reads apply the gathered deliveries: a
		// batch takes at most placement.CoherenceBatch.
		batches []int
	}{
		{name: "fewer than a batch takes", accounts: 5, batches: []int{10}},
		{name: "exactly a batch", accounts: placement.CoherenceBatch / 2, batches: []int{placement.CoherenceBatch}},
		{name: "more than a batch takes", accounts: placement.CoherenceBatch, batches: []int{placement.CoherenceBatch, placement.CoherenceBatch}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newCoherenceFixture(t)
			names := f.fundNames(t, c.accounts, []string{"USD", "BTC"}, 1)
			blocker := f.fundNames(t, 1, []string{"USD"}, 1)[0]
			rest := make([]string, len(names))
			for i, name := range names {
				rest[i] = payloadOf(name, 1)
			}
			first, results, sizes := f.applyGathered(t, payloadOf(blocker, 1), rest)
			if first.err != nil || !first.advanced {
				t.Errorf("first delivery: advanced = %v, %v; want true", first.advanced, first.err)
			}
			for _, result := range results {
				if result.err != nil || !result.advanced {
					t.Errorf("Apply(%s): advanced = %v, %v; want true", result.payload, result.advanced, result.err)
				}
			}
			// The first delivery was in flight alone; the rest came after
			// it and were taken in batches of at most CoherenceBatch.
			if want := append([]int{1}, c.batches...); !slices.Equal(sizes, want) {
				t.Errorf("batches of %v, want %v", sizes, want)
			}
			f.assertCacheCurrent(t, append(names, blocker))
		})
	}
}

func TestABatchThatCannotFillTheCacheAdvancesNothing(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	names := f.fundNames(t, 6, []string{"USD", "BTC"}, 2)
	blocker := f.fundNames(t, 1, []string{"USD"}, 1)[0]
	var rest []string
	for _, name := range names {
		rest = append(rest, payloadOf(name, 1), payloadOf(name, 2))
	}

	server := f.redis.Single(t, "stops Redis")
	server.Stop(t)
	first, results, _ := f.applyGathered(t, payloadOf(blocker, 1), rest)
	for _, result := range append(results, first) {
		err := f.consumer.Handle(ctx, emq.Claim{ID: "JOB_X", Kind: placement.KindBalanceCoherence, Payload: []byte(result.payload), Token: 1})
		if result.err == nil || result.advanced || errors.Is(err, emq.ErrPermanent) {
			t.Errorf("Apply(%s) with Redis down = %v, %v; want an error to retry (Handle: %v)", result.payload, result.advanced, result.err, err)
		}
	}
	server.Restart(t)
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
	f.assertCacheCurrent(t, append(names, blocker))
}

func TestACallerThatGaveUpIsLeftOutOfItsBatch(t *testing.T) {
	testserver.Parallel(t)
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

// cacheContents is what the cache hashes keys hold, field by field.
func (f *coherenceFixture) cacheContents(t testing.TB, keys []string) map[string]string {
	t.Helper()
	contents := map[string]string{}
	for _, key := range keys {
		fields, err := f.rdb.HGetAll(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		for field, value := range fields {
			contents[key+" "+field] = value
		}
	}
	return contents
}

// TestARedeliveryRefillsWhatRedisLost: Redis goes back to an older copy of
// the cache (a replica promoted before it got the newest fill, a restart
// that lost the AOF's tail), and the coherence job comes again: it refills
// the newest version. Nothing outside the cache holds that the version was
// applied, so nothing can refuse the refill.
func TestARedeliveryRefillsWhatRedisLost(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	f.depositWithOutbox(t, account, "USD", "1.00")
	if _, err := f.balances.Of(ctx, account); err != nil { // cached at version 1
		t.Fatal(err)
	}
	key := placement.BalanceCacheKey(account)
	older := f.cacheContents(t, []string{key})
	v2 := f.depositWithOutbox(t, account, "USD", "1.00")
	if advanced, err := f.consumer.Apply(ctx, v2.Payload); err != nil || !advanced {
		t.Fatalf("Apply(%s) = %v, %v; want the cache advanced", v2.Payload, advanced, err)
	}
	// Redis loses the fill: the hash is back as it was at version 1.
	for field, value := range older {
		if err := f.rdb.HSet(ctx, key, strings.TrimPrefix(field, key+" "), value).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.cachedBalance(t, account, "USD"); got.Version != 1 {
		t.Fatalf("the cache holds %+v after the loss, want version 1", got)
	}
	if advanced, err := f.consumer.Apply(ctx, v2.Payload); err != nil || !advanced {
		t.Errorf("redelivered %s after the loss = %v, %v; want the cache refilled", v2.Payload, advanced, err)
	}
	if got := f.cachedBalance(t, account, "USD"); got.Version != 2 || got.Value != "2.00" {
		t.Errorf("the cache holds %+v, want version 2 of 2.00", got)
	}
}

// TestRefilledBalancesAreAnnouncedOncePerVersion: after the cache holds a
// balance, its balance event is in the account's log, carrying the balance;
// a redelivery, or an older version delivered late, announces nothing, and
// a delivery behind the balance announces its current version.
func TestRefilledBalancesAreAnnouncedOncePerVersion(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	events := f.client.Queue(placement.EventsQueuePrefix + "0")
	consumer := placement.NewBalanceCoherence(postgres.NewBalances(f.db), f.caches, f.logger, placement.WithBalanceEvents(events))
	account := f.newAccount(t)
	v1 := f.depositWithOutbox(t, account, "USD", "1.00")
	v2 := f.depositWithOutbox(t, account, "USD", "1.00")
	v3 := f.depositWithOutbox(t, account, "USD", "1.00")
	for _, payload := range []string{v2.Payload, v2.Payload, v1.Payload, v3.Payload} {
		if _, err := consumer.Apply(ctx, payload); err != nil {
			t.Fatalf("Apply(%s): %v", payload, err)
		}
	}
	logged, err := events.ReadLog(ctx, account, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) != 1 || logged[0].Type != string(orders.EventBalance) {
		t.Fatalf("the account's log holds %+v, want one balance event", logged)
	}
	var balance orders.Balance
	if err := json.Unmarshal(logged[0].Data, &balance); err != nil {
		t.Fatal(err)
	}
	if balance.Asset != "USD" || balance.Version != 3 || balance.Available != "3.00" {
		t.Errorf("the event carries %+v, want USD at version 3, 3.00 available", balance)
	}
	if got := f.cachedBalance(t, account, "USD"); got.Version != 3 {
		t.Errorf("the cache holds version %d, want 3 before the event", got.Version)
	}
	v4 := f.depositWithOutbox(t, account, "USD", "1.00")
	if _, err := consumer.Apply(ctx, v4.Payload); err != nil {
		t.Fatal(err)
	}
	if logged, err := events.ReadLog(ctx, account, 1, 10); err != nil || len(logged) != 1 || logged[0].Sequence != 2 {
		t.Errorf("after version 4 the log gained %+v, %v; want one event, sequence 2", logged, err)
	}
}

// TestAJobAppliesEveryEntryItCanRead: a job lists its entries a line each;
// the consumer fills the cache with every balance it names, and announces
// each, before the job completes. An entry it cannot read is skipped, not
// allowed to bury the others; only a job with none it can read fails for
// good. One entry is the form jobs had before, still read.
func TestAJobAppliesEveryEntryItCanRead(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name string
		// good are how many funded balances the job names, malformed the
		// unreadable entries it lists besides.
		good      int
		malformed []string
		missing   bool // plus a balance that does not exist
		permanent bool
	}{
		{name: "the old single-entry form", good: 1},
		{name: "several accounts' balances", good: 5},
		{name: "with a balance that does not exist", good: 2, missing: true},
		{name: "malformed entries among good ones", good: 3, malformed: []string{"balances:ACC_X:USD@seven", "instruments:BTC-USD@4", ""}},
		{name: "only malformed entries", malformed: []string{"balances:ACC_X@4", "balances::USD@4"}, permanent: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCoherenceFixture(t)
			events := placement.NewEventLogs(f.client)
			consumer := placement.NewBalanceCoherence(postgres.NewBalances(f.db), f.caches, f.logger, placement.WithBalanceEvents(events))
			var names, lines []string
			if c.good > 0 {
				names = f.fundNames(t, c.good, []string{"USD"}, 2)
			}
			for _, name := range names {
				lines = append(lines, payloadOf(name, 2))
			}
			if c.missing {
				lines = append(lines, payloadOf(orders.BalanceName(f.newAccount(t), "DOGE"), 1))
			}
			lines = append(lines, c.malformed...)
			slices.Sort(lines)
			claim := emq.Claim{ID: "JOB_1", Kind: placement.KindBalanceCoherence, Group: "shard.0", Payload: []byte(strings.Join(lines, "\n")), Token: 1}

			err := consumer.Handle(ctx, claim)
			if permanent := errors.Is(err, emq.ErrPermanent); permanent != c.permanent || (err != nil && !c.permanent) {
				t.Fatalf("Handle(%q) = %v, want permanent %v", claim.Payload, err, c.permanent)
			}
			f.assertCacheCurrent(t, names)
			for _, name := range names {
				account, _ := splitBalanceName(t, name)
				logged, err := events.For(account).ReadLog(ctx, account, 0, 10)
				if err != nil || len(logged) != 1 || logged[0].ID != payloadOf(name, 2) {
					t.Errorf("%s's log holds %+v, %v; want the balance event of %s@2", account, logged, err, name)
				}
			}
		})
	}
}

// TestAJobThatFailsIsRetriedWhole: with Redis down no entry of a job is
// applied and the job fails for a retry; the retry applies every entry,
// the ones another job applied meanwhile included.
func TestAJobThatFailsIsRetriedWhole(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	names := f.fundNames(t, 4, []string{"USD", "BTC"}, 1)
	var lines []string
	for _, name := range names {
		lines = append(lines, payloadOf(name, 1))
	}
	claim := emq.Claim{ID: "JOB_1", Kind: placement.KindBalanceCoherence, Group: "shard.0", Payload: []byte(strings.Join(lines, "\n")), Token: 1}

	server := f.redis.Single(t, "stops Redis")
	server.Stop(t)
	if err := f.consumer.Handle(ctx, claim); err == nil || errors.Is(err, emq.ErrPermanent) {
		t.Fatalf("Handle with Redis down = %v, want an error to retry", err)
	}
	server.Restart(t)
	waitFor(t, 10*time.Second, "the client reaches the restarted Redis", func() bool {
		return f.rdb.Ping(ctx).Err() == nil
	})
	if _, err := f.consumer.Apply(ctx, lines[0]); err != nil {
		t.Fatal(err)
	}
	claim.Token = 2
	if err := f.consumer.Handle(ctx, claim); err != nil {
		t.Fatalf("retry: %v", err)
	}
	f.assertCacheCurrent(t, names)
}

// TestSingleEntryJobsQueuedBeforeAnUpgradeAreConsumed: jobs admitted by a
// relay of the previous release, one entry each in the account's lane, sit
// on the shard's queue beside the new relay's job; the consumer applies
// them all.
func TestSingleEntryJobsQueuedBeforeAnUpgradeAreConsumed(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	old := []orders.OutboxEntry{
		f.depositWithOutbox(t, account, "USD", "1.00"),
		f.depositWithOutbox(t, account, "BTC", "1"),
	}
	queue := f.client.Queue(placement.CoherenceJobQueue(placement.BalancesTable, old[0].Payload))
	for i, entry := range old {
		job := emq.Job{ID: "JOB_OLD" + strconv.Itoa(i), Kind: placement.KindBalanceCoherence, Group: account, Payload: []byte(entry.Payload), DedupKey: entry.Payload}
		if _, err := queue.Admit(ctx, job); err != nil {
			t.Fatal(err)
		}
	}
	f.relay.Relay(ctx, []orders.OutboxEntry{f.depositWithOutbox(t, account, "ETH", "1"), f.depositWithOutbox(t, account, "USD", "1.00")})

	claims := f.claimAll(t)
	if len(claims) != 3 {
		t.Fatalf("claimed %d jobs, want the 2 old ones and the new one", len(claims))
	}
	for _, claim := range claims {
		if err := f.consumer.Handle(ctx, claim); err != nil {
			t.Errorf("Handle(%q): %v", claim.Payload, err)
		}
	}
	f.assertCacheCurrent(t, []string{orders.BalanceName(account, "USD"), orders.BalanceName(account, "BTC"), orders.BalanceName(account, "ETH")})
}

// TestAJobAnsweredDoneHasEveryEntryCached attacks the job form: jobs that
// list names of one account at several versions, handled at once, some of
// them cancelled mid-job (a lost lease) and handled again. A job answered
// nil must find every entry's balance cached at the entry's version or a
// newer one, whichever job's delivery of a name the batch applied.
func TestAJobAnsweredDoneHasEveryEntryCached(t *testing.T) {
	testserver.Parallel(t)
	const versions, jobs = 4, 48
	f := newCoherenceFixture(t)
	names := f.fundNames(t, 6, []string{"USD", "BTC"}, versions)
	random := rand.New(rand.NewPCG(1, 2))
	payloads := make([][]string, jobs)
	for i := range payloads {
		seen := map[string]bool{}
		for range 1 + random.IntN(12) {
			line := payloadOf(names[random.IntN(len(names))], 1+random.Int64N(versions))
			if !seen[line] {
				seen[line] = true
				payloads[i] = append(payloads[i], line)
			}
		}
		slices.Sort(payloads[i])
	}
	delays := make([]time.Duration, jobs)
	for i := range delays {
		delays[i] = time.Duration(random.IntN(3)) * time.Millisecond
	}
	var (
		mu     sync.Mutex
		stale  []string
		failed []error
	)
	start := make(chan struct{})
	var handling sync.WaitGroup
	for i, lines := range payloads {
		handling.Go(func() {
			<-start
			claim := emq.Claim{ID: "JOB_" + strconv.Itoa(i), Kind: placement.KindBalanceCoherence, Group: "shard.0",
				Payload: []byte(strings.Join(lines, "\n")), Token: 1}
			for attempt := 0; ; attempt++ {
				ctx, cancel := context.WithCancelCause(context.Background())
				if attempt == 0 && i%3 == 0 {
					// The lease is lost while the job's entries wait.
					time.AfterFunc(delays[i], func() { cancel(emq.ErrLeaseLost) })
				}
				err := f.consumer.Handle(ctx, claim)
				cancel(nil)
				if err != nil {
					if errors.Is(err, emq.ErrLeaseLost) && attempt < 3 {
						continue
					}
					mu.Lock()
					failed = append(failed, fmt.Errorf("job %d attempt %d: %w", i, attempt, err))
					mu.Unlock()
					return
				}
				break
			}
			for _, line := range lines {
				at := strings.LastIndexByte(line, '@')
				version, _ := strconv.ParseInt(line[at+1:], 10, 64)
				account, asset, _ := strings.Cut(strings.TrimPrefix(line[:at], placement.BalancesTable+":"), ":")
				cached, err := f.caches.ReadCache(context.Background(), placement.BalanceCacheKey(account))
				mu.Lock()
				if err != nil {
					failed = append(failed, err)
				} else if cached[asset].Version < version {
					stale = append(stale, fmt.Sprintf("job %d done with %s cached at %d", i, line, cached[asset].Version))
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	handling.Wait()
	if len(failed) > 0 || len(stale) > 0 {
		t.Fatalf("failed: %v\nstale: %v", failed, stale)
	}
	f.assertCacheCurrent(t, names)
}

// TestALineWithAmountsIsFilledAsCarried: a job line that carries the
// balance's amounts fills the cache with them, not with a read of
// PostgreSQL (the amounts below are not PostgreSQL's, to tell the two
// apart), and only past the version cached: a stale or replayed line moves
// nothing back. A line whose amounts do not read as decimals is read back,
// as is one whose balance the cache holds nothing of.
func TestALineWithAmountsIsFilledAsCarried(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	f.depositWithOutbox(t, account, "USD", "1.00")
	f.depositWithOutbox(t, account, "USD", "1.00") // PostgreSQL: version 2 of 2.00
	name := orders.BalanceName(account, "USD")
	for _, step := range []struct {
		line         string
		wantAdvanced bool
		wantVersion  int64
		wantValue    string
	}{
		{line: name + "@1 9.00 0.00", wantAdvanced: true, wantVersion: 2, wantValue: "2.00 0.00"}, // nothing cached: read
		{line: name + "@5 7.25 0.50", wantAdvanced: true, wantVersion: 5, wantValue: "7.25 0.50"},
		{line: name + "@5 7.25 0.50", wantVersion: 5, wantValue: "7.25 0.50"}, // replayed
		{line: name + "@4 6.00 0.00", wantVersion: 5, wantValue: "7.25 0.50"}, // stale
		{line: name + "@6 -0.10 12", wantAdvanced: true, wantVersion: 6, wantValue: "-0.10 12"},
		{line: name + "@7 1e3 0.00", wantVersion: 6, wantValue: "-0.10 12"}, // read back: version 2
	} {
		advanced, err := f.consumer.Apply(ctx, step.line)
		if err != nil || advanced != step.wantAdvanced {
			t.Errorf("Apply(%q) = %v, %v; want %v", step.line, advanced, err, step.wantAdvanced)
		}
		cached, err := f.caches.ReadCache(ctx, placement.BalanceCacheKey(account))
		if err != nil {
			t.Fatal(err)
		}
		if got := cached["USD"]; got.Version != step.wantVersion || got.Value != step.wantValue {
			t.Errorf("after %q the cache holds %+v, want version %d of %q", step.line, got, step.wantVersion, step.wantValue)
		}
	}
}

// TestALateCarriedLineAfterACacheLossLeavesTheCacheCurrent (review): the
// cache loses a balance (a replica promoted before the newest fill, an
// eviction), and an older write's coherence job comes again (a lease that
// ran out after its fill, a row the sweep carries again past the dedup
// window). The job's line reads "<name>@<version>" on main, and the refill
// is the balance's current row; on h24k-lane the line carries the write's
// amounts, and the refill is that older version, which stays in the cache,
// behind PostgreSQL, until the balance changes again.
func TestALateCarriedLineAfterACacheLossLeavesTheCacheCurrent(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	v1 := f.depositWithOutbox(t, account, "USD", "1.00")
	if _, err := f.consumer.Apply(ctx, v1.Payload); err != nil {
		t.Fatal(err)
	}
	name := orders.BalanceName(account, "USD")
	// Two settlement writes' moves, as settle_balances.sql makes them.
	move := func() string {
		var payload string
		err := f.db.QueryRow(ctx, `SELECT payload FROM settlement_move_balances($1::text[], $2::text[], $3::text[],
			$4::numeric[], $5::numeric[], $6::bigint[], $7::text, true)`,
			[]string{name}, []string{account}, []string{"USD"}, []string{"0.50"}, []string{"0"}, []int64{1},
			orders.BalancesWriteName).Scan(&payload)
		if err != nil {
			t.Fatal(err)
		}
		return payload
	}
	older, newer := move(), move()
	for _, payload := range []string{older, newer} {
		if _, err := f.consumer.Apply(ctx, payload); err != nil {
			t.Fatal(err)
		}
	}
	// Redis loses the balance's hash; the older write's job comes again.
	if err := f.rdb.Del(ctx, placement.BalanceCacheKey(account)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.consumer.Apply(ctx, older); err != nil {
		t.Fatal(err)
	}
	var version int64
	var available string
	if err := f.db.QueryRow(ctx, `SELECT version, trim_scale(available)::text FROM balances WHERE account_id = $1 AND asset = 'USD'`,
		account).Scan(&version, &available); err != nil {
		t.Fatal(err)
	}
	cached, err := f.caches.ReadCache(ctx, placement.BalanceCacheKey(account))
	if err != nil {
		t.Fatal(err)
	}
	if got := cached["USD"]; got.Version != version {
		t.Errorf("after the late job %q the cache holds %+v; PostgreSQL holds version %d of %s (the line %q, as main writes it, refills that)",
			older, got, version, available, strings.Fields(older)[0])
	}
	// The same job as main writes it: the refill is the current row.
	if err := f.rdb.Del(ctx, placement.BalanceCacheKey(account)).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.consumer.Apply(ctx, strings.Fields(older)[0]); err != nil {
		t.Fatal(err)
	}
	if cached, err = f.caches.ReadCache(ctx, placement.BalanceCacheKey(account)); err != nil {
		t.Fatal(err)
	}
	if got := cached["USD"]; got.Version != version {
		t.Errorf("main's form of the late job refilled %+v, want version %d", got, version)
	}
}
