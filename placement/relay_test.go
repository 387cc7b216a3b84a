package placement_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// coherenceFixture is the coherence job mode on a real Redis and a real
// PostgreSQL: the relay, the balances coherence queue, its consumer and the
// balance reader, with one funded customer account.
type coherenceFixture struct {
	db     *pgxpool.Pool
	redis  *testserver.QueueServer
	rdb    redis.UniversalClient
	client *emq.Client
	caches *coherence.Client
	// queues are the balances' coherence queues, one per shard.
	queues   []*emq.Queue
	relay    *placement.OutboxRelay
	consumer *placement.BalanceCoherence
	balances *placement.Balances
	ledger   *postgres.Ledger
	accounts *postgres.Accounts
	logger   *slog.Logger
}

func newCoherenceFixture(t testing.TB, opts ...placement.RelayOption) *coherenceFixture {
	t.Helper()
	ctx := context.Background()
	f := &coherenceFixture{db: migratedPool(t), redis: testserver.QueueRedisServer(t)}
	// emq.Open bounds every call, so the outage tests fail fast.
	rdb, err := emq.Open(f.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	f.rdb = rdb
	if f.client, err = emq.Connect(ctx, rdb); err != nil {
		t.Fatal(err)
	}
	f.caches = coherence.New(rdb)
	f.logger = slog.New(slog.DiscardHandler)
	for _, name := range placement.CoherenceQueues(placement.BalancesTable) {
		f.queues = append(f.queues, f.client.Queue(name))
	}
	f.relay = placement.NewOutboxRelay(postgres.NewOutbox(f.db), f.client, placement.CoherenceModes, f.logger, opts...)
	if err := f.relay.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	f.consumer = placement.NewBalanceCoherence(postgres.NewBalances(f.db), f.caches, f.logger)
	f.balances = placement.NewBalances(postgres.NewBalances(f.db), f.caches, f.logger)
	f.ledger = postgres.NewLedger(f.db)
	f.accounts = postgres.NewAccounts(f.db)
	return f
}

func (f *coherenceFixture) newAccount(t testing.TB) string {
	t.Helper()
	account, err := f.accounts.Create(context.Background(), "trader")
	if err != nil {
		t.Fatal(err)
	}
	return account
}

// depositWithOutbox deposits and returns the outbox row the deposit wrote
// for the account's balance.
func (f *coherenceFixture) depositWithOutbox(t testing.TB, account, asset, amount string) orders.OutboxEntry {
	t.Helper()
	ctx := context.Background()
	if err := f.ledger.Deposit(ctx, account, asset, amount); err != nil {
		t.Fatalf("deposit %s %s: %v", amount, asset, err)
	}
	// The deposit also outboxs the external account's side; these tests
	// count the customer's rows only.
	if _, err := f.db.Exec(ctx, `DELETE FROM outbox WHERE name LIKE $1`, "balances:"+orders.ExternalAccount+":%"); err != nil {
		t.Fatal(err)
	}
	var entry orders.OutboxEntry
	name := orders.BalanceName(account, asset)
	err := f.db.QueryRow(ctx, `SELECT j.id, j.name, j.version, j.payload
		FROM outbox j JOIN balances b ON j.name = $1 AND j.version = b.version
		WHERE b.account_id = $2 AND b.asset = $3`, name, account, asset).
		Scan(&entry.ID, &entry.Name, &entry.Version, &entry.Payload)
	if err != nil {
		t.Fatalf("outbox %s: %v", name, err)
	}
	return entry
}

func (f *coherenceFixture) unrelayed(t testing.TB) int {
	t.Helper()
	var n int
	if err := f.db.QueryRow(context.Background(), `SELECT count(*) FROM outbox WHERE relayed_at IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *coherenceFixture) pending(t testing.TB) int64 {
	t.Helper()
	var n int64
	for _, queue := range f.queues {
		pending, err := queue.Pending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += pending
	}
	return n
}

// carried are the entries the claims carry, a job's payload listing them
// one a line, sorted.
func carried(claims []emq.Claim) []string {
	var entries []string
	for _, claim := range claims {
		for _, line := range strings.Split(string(claim.Payload), "\n") {
			// A write's line carries its amounts after this.
			head, _, _, _ := orders.SplitBalanceAmounts(line)
			entries = append(entries, head)
		}
	}
	slices.Sort(entries)
	return entries
}

// claimAll takes every pending coherence job, as a consumer would.
func (f *coherenceFixture) claimAll(t testing.TB) []emq.Claim {
	t.Helper()
	var all []emq.Claim
	for {
		var claims []emq.Claim
		for _, queue := range f.queues {
			claimed, err := queue.Claim(context.Background(), 100, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			claims = append(claims, claimed...)
		}
		if len(claims) == 0 {
			return all
		}
		all = append(all, claims...)
	}
}

func payloadsOf(entries []orders.OutboxEntry) []string {
	payloads := make([]string, len(entries))
	for i, entry := range entries {
		payloads[i] = entry.Payload
	}
	slices.Sort(payloads)
	return payloads
}

// TestRelayPutsOneJobOnTheCoherenceQueue: a relay's entries, of several
// accounts, ride one job, one admission, which lists them sorted, each
// name at its highest version, in the lane of the shard its payload hashes
// to; relayed again, in any order, the same entries make the same job on
// the same shard, refused by its dedup key.
func TestRelayPutsOneJobOnTheCoherenceQueue(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	accounts := []string{f.newAccount(t), f.newAccount(t), f.newAccount(t)}
	entries := []orders.OutboxEntry{
		f.depositWithOutbox(t, accounts[0], "USD", "10.00"),
		f.depositWithOutbox(t, accounts[0], "USD", "5.00"),
		f.depositWithOutbox(t, accounts[1], "BTC", "0.5"),
		f.depositWithOutbox(t, accounts[0], "BTC", "0.5"),
		f.depositWithOutbox(t, accounts[2], "ETH", "2"),
	}
	if f.unrelayed(t) != len(entries) {
		t.Fatalf("%d unrelayed rows before the relay, want %d", f.unrelayed(t), len(entries))
	}

	f.relay.Relay(ctx, entries)
	if got := f.pending(t); got != 1 {
		t.Errorf("%d coherence jobs pending, want the relay's one", got)
	}
	if got := f.unrelayed(t); got != 0 {
		t.Errorf("%d rows left unrelayed", got)
	}
	// Relayed again, in another order (a sweep racing the relay, a retried
	// settlement): the same job, admitted once.
	f.relay.Relay(ctx, []orders.OutboxEntry{entries[4], entries[3], entries[2], entries[1], entries[0]})
	if got := f.pending(t); got != 1 {
		t.Errorf("after relaying again %d jobs pending, want still 1", got)
	}

	payload := strings.Join(payloadsOf(entries[1:]), "\n")
	name := placement.CoherenceJobQueue(placement.BalancesTable, payload)
	claims, err := f.client.Queue(name).Claim(ctx, 10, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("%s: claimed %+v, %v; want one job", name, claims, err)
	}
	claim := claims[0]
	shard := name[strings.LastIndexByte(name, '.')+1:]
	if claim.Kind != placement.KindBalanceCoherence || claim.Group != "shard."+shard {
		t.Errorf("job %s on %s: kind %q lane %q, want %q in the shard's lane", claim.ID, name, claim.Kind, claim.Group, placement.KindBalanceCoherence)
	}
	if string(claim.Payload) != payload {
		t.Errorf("job on %s carries %q, want %q", name, claim.Payload, payload)
	}
	if err := f.consumer.Handle(ctx, claim); err != nil {
		t.Errorf("Handle(%s): %v", claim.Payload, err)
	}
	f.assertCacheCurrent(t, []string{
		orders.BalanceName(accounts[0], "USD"), orders.BalanceName(accounts[0], "BTC"),
		orders.BalanceName(accounts[1], "BTC"), orders.BalanceName(accounts[2], "ETH"),
	})

	// Grouped otherwise, as the sweep may take them: another job, which
	// the consumer applies without changing anything.
	f.relay.Relay(ctx, entries[2:3])
	claims = f.claimAll(t)
	if len(claims) != 1 || string(claims[0].Payload) != entries[2].Payload {
		t.Fatalf("after relaying one entry again, claimed %+v; want its own job", claims)
	}
	if advanced, err := f.consumer.Apply(ctx, string(claims[0].Payload)); advanced || err != nil {
		t.Errorf("the regrouped entry's job advanced = %v, %v; want false", advanced, err)
	}
}

// TestARelayOfJobSizeOneWritesTheFormOlderWorkersRead: with
// WithCoherenceJobSize(1), for a fleet that still runs workers reading one
// change a job, every job carries one "<name>@<version>", the name's
// highest version relayed, and the consumer applies it; relayed again,
// the same jobs are refused by their keys.
func TestARelayOfJobSizeOneWritesTheFormOlderWorkersRead(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t, placement.WithCoherenceJobSize(1))
	account := f.newAccount(t)
	entries := []orders.OutboxEntry{
		f.depositWithOutbox(t, account, "USD", "10.00"),
		f.depositWithOutbox(t, account, "USD", "5.00"),
		f.depositWithOutbox(t, account, "BTC", "0.5"),
	}
	f.relay.Relay(ctx, entries)
	f.relay.Relay(ctx, entries)
	claims := f.claimAll(t)
	var payloads []string
	for _, claim := range claims {
		payloads = append(payloads, string(claim.Payload))
		if err := f.consumer.Handle(ctx, claim); err != nil {
			t.Errorf("Handle(%s): %v", claim.Payload, err)
		}
	}
	slices.Sort(payloads)
	if want := payloadsOf(entries[1:]); !slices.Equal(payloads, want) {
		t.Errorf("jobs carry %q, want one each of %q", payloads, want)
	}
	if got := f.unrelayed(t); got != 0 {
		t.Errorf("%d rows left unrelayed", got)
	}
	f.assertCacheCurrent(t, []string{orders.BalanceName(account, "USD"), orders.BalanceName(account, "BTC")})
}

// TestCoherenceJobsSplitAtABatch: entries past CoherenceBatch names go to
// further jobs, each in the lane of its payload's shard, and every entry is
// carried by one of them.
func TestCoherenceJobsSplitAtABatch(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		names, versions int
		jobs            []int
	}{
		{names: 1, versions: 1, jobs: []int{1}},
		{names: 3, versions: 4, jobs: []int{3}},
		{names: placement.CoherenceBatch, versions: 2, jobs: []int{placement.CoherenceBatch}},
		{names: placement.CoherenceBatch + 1, versions: 1, jobs: []int{placement.CoherenceBatch, 1}},
	} {
		t.Run(fmt.Sprintf("%d names, %d versions each", c.names, c.versions), func(t *testing.T) {
			var entries []orders.OutboxEntry
			for i := range c.names {
				name := orders.BalanceName("ACC_X", fmt.Sprintf("A%03d", i))
				for version := range c.versions {
					entries = append(entries, orders.OutboxEntry{Name: name, Version: int64(version + 1), Payload: fmt.Sprintf("%s@%d", name, version+1)})
				}
			}
			jobs, carries := placement.CoherenceJobs(entries)
			var sizes []int
			var all []orders.OutboxEntry
			for i, job := range jobs {
				lines := strings.Split(string(job.Payload), "\n")
				sizes = append(sizes, len(lines))
				queue := placement.CoherenceJobQueue(placement.BalancesTable, string(job.Payload))
				if !slices.IsSorted(lines) || job.DedupKey != string(job.Payload) || job.Group != "shard."+queue[strings.LastIndexByte(queue, '.')+1:] {
					t.Errorf("job %d: payload %q, key %q, lane %q", i, job.Payload, job.DedupKey, job.Group)
				}
				for _, line := range lines {
					if !strings.HasSuffix(line, fmt.Sprintf("@%d", c.versions)) {
						t.Errorf("job %d carries %s, want each name at its highest version, %d", i, line, c.versions)
					}
				}
				all = append(all, carries[i]...)
			}
			if !slices.Equal(sizes, c.jobs) {
				t.Errorf("jobs of %v names, want %v", sizes, c.jobs)
			}
			if got, want := payloadsOf(all), payloadsOf(entries); !slices.Equal(got, want) {
				t.Errorf("the jobs carry %d entries, want all %d", len(got), len(want))
			}
		})
	}
}

// TestCoherenceDedupKeysExpireInMinutes: the relay declares the balances
// coherence queue with its own dedup retention, so a balance change's
// name@version key is gone from Redis within minutes, while a placement's
// client order id on the orders queue stays for the orders' day.
func TestCoherenceDedupKeysExpireInMinutes(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	placer := placement.NewPlacer(placement.NewOrderQueues(f.client, placement.WithQueueOptions(emq.WithDedupRetention(emq.DefaultDedupRetention))))
	if err := placer.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	account := f.newAccount(t)
	placeOrder(t, placer, account, "c-1")
	deposit := f.depositWithOutbox(t, account, "USD", "10.00")
	f.relay.Relay(ctx, []orders.OutboxEntry{deposit})
	now := time.Now()

	tests := []struct {
		queue            string
		retention        time.Duration
		earliest, latest time.Duration
	}{
		// Held R to R + W (half of R) plus the minute of clock allowance.
		{placement.CoherenceJobQueue(placement.BalancesTable, deposit.Payload), placement.CoherenceDedupRetention, 10 * time.Minute, 16 * time.Minute},
		{orders.InstrumentQueue("BTC-USD"), emq.DefaultDedupRetention, 24 * time.Hour, 36*time.Hour + time.Minute},
	}
	for _, tt := range tests {
		queue := f.client.Queue(tt.queue)
		if got, err := queue.DedupRetention(ctx); err != nil || got != tt.retention {
			t.Errorf("%s: dedup retention %v, %v; want %v", tt.queue, got, err, tt.retention)
		}
		windows := testserver.Keys(t, f.rdb, "emq:{"+tt.queue+"}:dedup:*")
		if len(windows) != 1 {
			t.Fatalf("%s: dedup windows %v, want the one key's", tt.queue, windows)
		}
		expires, err := f.rdb.PExpireTime(ctx, windows[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		held := time.UnixMilli(expires.Milliseconds()).Sub(now)
		if held < tt.earliest-time.Second || held > tt.latest+time.Second {
			t.Errorf("%s: dedup window %s expires in %v, want %v to %v", tt.queue, windows[0], held, tt.earliest, tt.latest)
		}
	}
}

func TestSweepRelaysRowsACrashLeftBehind(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t, placement.WithSweepAge(0))
	account := f.newAccount(t)
	entries := []orders.OutboxEntry{
		f.depositWithOutbox(t, account, "USD", "10.00"),
		f.depositWithOutbox(t, account, "ETH", "1"),
	}

	// Rows younger than the sweep age are left to the relay that follows
	// their commit.
	patient := placement.NewOutboxRelay(postgres.NewOutbox(f.db), f.client, placement.CoherenceModes, f.logger, placement.WithSweepAge(time.Hour))
	if n, err := patient.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("a sweep of young rows relayed %d, %v; want none", n, err)
	}

	n, err := f.relay.Sweep(ctx)
	if err != nil || n != len(entries) {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, len(entries))
	}
	if got := f.unrelayed(t); got != 0 {
		t.Errorf("%d rows left unrelayed", got)
	}
	// A job a row, as the relay would have made for each alone.
	if got, want := carried(f.claimAll(t)), payloadsOf(entries); !slices.Equal(got, want) {
		t.Errorf("the jobs carry %q, want %q", got, want)
	}
	if n, err := f.relay.Sweep(ctx); err != nil || n != 0 {
		t.Errorf("a second sweep relayed %d, %v; want none", n, err)
	}
}

func TestConcurrentSweepsShareTheBacklog(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t, placement.WithSweepAge(0))
	// More rows than one batch holds, across several accounts' lanes.
	const rows = 1234
	if _, err := f.db.Exec(ctx, `INSERT INTO outbox (name, version, payload)
		SELECT 'balances:ACC_' || lpad((i % 7)::text, 26, '0') || ':USD', i,
		       'balances:ACC_' || lpad((i % 7)::text, 26, '0') || ':USD@' || i
		FROM generate_series(1, $1) AS i`, rows); err != nil {
		t.Fatal(err)
	}
	sweepers := []*placement.OutboxRelay{
		f.relay,
		placement.NewOutboxRelay(postgres.NewOutbox(f.db), f.client, placement.CoherenceModes, f.logger, placement.WithSweepAge(0)),
		placement.NewOutboxRelay(postgres.NewOutbox(f.db), f.client, placement.CoherenceModes, f.logger, placement.WithSweepAge(0)),
	}
	var wg sync.WaitGroup
	relayed := make([]int, len(sweepers))
	for i, sweeper := range sweepers {
		wg.Go(func() {
			n, err := sweeper.Sweep(ctx)
			if err != nil {
				t.Errorf("sweeper %d: %v", i, err)
			}
			relayed[i] = n
		})
	}
	wg.Wait()
	total := 0
	for _, n := range relayed {
		total += n
	}
	// SKIP LOCKED: every row went through exactly one sweeper.
	if total != rows {
		t.Errorf("sweepers relayed %v, %d in all; want %d", relayed, total, rows)
	}
	if got := f.unrelayed(t); got != 0 {
		t.Errorf("%d rows left unrelayed", got)
	}
	// Each account's highest version is carried; the lower ones ride the
	// same jobs or others, and are covered by it either way.
	entries := carried(f.claimAll(t))
	for account := range 7 {
		newest := rows - (rows-account)%7
		name := "balances:ACC_" + fmt.Sprintf("%026d", account) + ":USD"
		if !slices.Contains(entries, fmt.Sprintf("%s@%d", name, newest)) {
			t.Errorf("no job carries %s@%d", name, newest)
		}
	}
}

func TestRelayDuringARedisOutageLeavesTheRowsForTheSweep(t *testing.T) {
	ctx := context.Background()
	f := newCoherenceFixture(t, placement.WithSweepAge(0))
	account := f.newAccount(t)
	entries := []orders.OutboxEntry{f.depositWithOutbox(t, account, "USD", "10.00")}

	server := f.redis.Single(t, "stops Redis")
	server.Stop(t)
	began := time.Now()
	f.relay.Relay(ctx, entries)
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Relay took %s against a dead Redis", took)
	}
	if got := f.unrelayed(t); got != 1 {
		t.Fatalf("%d rows unrelayed after a failed relay, want 1", got)
	}
	if n, err := f.relay.Sweep(ctx); n != 0 || err != nil {
		t.Errorf("a sweep during the outage = %d, %v; want nothing relayed and no error (the rows wait)", n, err)
	}

	server.Restart(t)
	// The restarted server kept nothing: declare again, as a restarted
	// worker does.
	if err := f.relay.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := f.relay.Sweep(ctx); n != 1 || err != nil {
		t.Errorf("Sweep after the outage = %d, %v; want 1", n, err)
	}
	if got := f.pending(t); got != 1 {
		t.Errorf("%d jobs pending, want 1", got)
	}
}

func TestKeepSweepingRelaysUntilCancelled(t *testing.T) {
	testserver.Parallel(t)
	f := newCoherenceFixture(t, placement.WithSweepAge(0))
	account := f.newAccount(t)
	f.depositWithOutbox(t, account, "USD", "1.00")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.relay.KeepSweeping(ctx, 20*time.Millisecond)
	}()
	waitFor(t, 10*time.Second, "the sweeper relays the row", func() bool { return f.unrelayed(t) == 0 })
	// Not depositWithOutbox: the running sweeper may relay and delete the
	// row before the helper reads it back.
	if err := f.ledger.Deposit(ctx, account, "USD", "1.00"); err != nil {
		t.Fatalf("deposit: %v", err)
	}
	waitFor(t, 10*time.Second, "the sweeper relays a later row", func() bool { return f.unrelayed(t) == 0 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("KeepSweeping did not return after its context was cancelled")
	}
	// The sweeper may relay the external account's side of a deposit before
	// depositWithOutbox deletes it; only the customer's entries are counted.
	mine := 0
	for _, entry := range carried(f.claimAll(t)) {
		if strings.HasPrefix(entry, orders.BalanceName(account, "USD")+"@") {
			mine++
		}
	}
	if mine != 2 {
		t.Errorf("%d of %s's entries carried, want 2", mine, account)
	}
}

// countedOutbox is PostgreSQL's outbox, counting the relay's markings in
// transactions of their own and its sweeps.
type countedOutbox struct {
	*postgres.Outbox
	mu            sync.Mutex
	marks, sweeps int
}

func (o *countedOutbox) MarkRelayed(ctx context.Context, entries []orders.OutboxEntry) error {
	o.mu.Lock()
	o.marks++
	o.mu.Unlock()
	return o.Outbox.MarkRelayed(ctx, entries)
}

func (o *countedOutbox) SweepBatch(ctx context.Context, age time.Duration, limit int, marks []orders.OutboxEntry,
	carry func(context.Context, []orders.OutboxEntry) []orders.OutboxEntry) (int, int, error) {
	o.mu.Lock()
	o.sweeps++
	o.mu.Unlock()
	return o.Outbox.SweepBatch(ctx, age, limit, marks, carry)
}

func (o *countedOutbox) counts() (marks, sweeps int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.marks, o.sweeps
}

// TestWhileSweepingRelayLeavesMarkingToTheLoop: while KeepSweeping runs,
// Relay carries its rows at once and leaves their marking to the loop,
// whose sweeps mark them in their own transactions: no marking costs a
// transaction of its own (before, one ran every 200 ms). What is carried
// after the last sweep is marked when the loop stops; with no loop, Relay
// marks before it returns.
func TestWhileSweepingRelayLeavesMarkingToTheLoop(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name     string
		interval time.Duration
		// bySweeps: the rows are marked while the loop runs.
		bySweeps bool
	}{
		{name: "marked by the sweeps", interval: 300 * time.Millisecond, bySweeps: true},
		{name: "marked when the loop stops", interval: time.Hour},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			// The default sweep age: the sweep leaves these young rows
			// alone, so only the marking can mark them.
			f := newCoherenceFixture(t)
			outbox := &countedOutbox{Outbox: postgres.NewOutbox(f.db)}
			relay := placement.NewOutboxRelay(outbox, f.client, placement.CoherenceModes, f.logger)
			account := f.newAccount(t)
			loopCtx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				relay.KeepSweeping(loopCtx, c.interval)
			}()
			waitFor(t, 10*time.Second, "the first sweep", func() bool { _, sweeps := outbox.counts(); return sweeps > 0 })

			relays := 0
			for range 3 {
				relay.Relay(ctx, []orders.OutboxEntry{f.depositWithOutbox(t, account, "USD", "1.00"),
					f.depositWithOutbox(t, account, "USD", "1.00")})
				relays++
				// Carried at once, a job per relay (one account); only
				// the marking waits.
				if got := f.pending(t); got != int64(relays) {
					t.Errorf("%d jobs pending after Relay, want %d", got, relays)
				}
			}
			if c.bySweeps {
				waitFor(t, 10*time.Second, "the sweeps mark the carried rows", func() bool { return f.unrelayed(t) == 0 })
			} else {
				// Longer than the 200 ms at which markings ran before.
				time.Sleep(time.Second)
				if got := f.unrelayed(t); got != 6 {
					t.Errorf("%d rows unrelayed between sweeps, want the 6 carried", got)
				}
			}
			if marks, _ := outbox.counts(); marks != 0 {
				t.Errorf("%d markings in transactions of their own while the loop ran, want none", marks)
			}
			cancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("KeepSweeping did not return after its context was cancelled")
			}
			if got := f.unrelayed(t); got != 0 {
				t.Errorf("%d carried rows left unmarked after the loop stopped", got)
			}

			// With no loop running, Relay marks before it returns.
			relay.Relay(ctx, []orders.OutboxEntry{f.depositWithOutbox(t, account, "USD", "1.00")})
			if got := f.unrelayed(t); got != 0 {
				t.Errorf("%d rows unrelayed after Relay with no loop running", got)
			}
			claims := f.claimAll(t)
			if len(claims) != relays+1 {
				t.Errorf("%d coherence jobs, want one per relay, %d", len(claims), relays+1)
			}
		})
	}
}

func waitFor(t testing.TB, timeout time.Duration, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cachedVersion is the version the cache holds of the balance name (0:
// none).
func (f *coherenceFixture) cachedVersion(t testing.TB, name string) int64 {
	t.Helper()
	account, asset := splitBalanceName(t, name)
	return f.cachedBalance(t, account, asset).Version
}

// cachedBalance is the cached entry of a balance with Value its available
// part; held, which no test here moves, must be zero.
func (f *coherenceFixture) cachedBalance(t testing.TB, account, asset string) coherence.CacheEntry {
	t.Helper()
	cached, err := f.caches.ReadCache(context.Background(), placement.BalanceCacheKey(account))
	if err != nil {
		t.Fatal(err)
	}
	entry := cached[asset]
	if entry.Value != "" {
		available, held, found := strings.Cut(entry.Value, " ")
		if !found || strings.Trim(held, "0.") != "" {
			t.Errorf("cached %s of %s is %q, want \"<available> <held>\" with held zero", asset, account, entry.Value)
		}
		entry.Value = available
	}
	return entry
}

func TestCoherenceActsOnlyOnANewerVersion(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	v1 := f.depositWithOutbox(t, account, "USD", "10.00")
	v2 := f.depositWithOutbox(t, account, "USD", "10.00")
	v3 := f.depositWithOutbox(t, account, "USD", "10.00")
	name := orders.BalanceName(account, "USD")

	// The same job delivered twice, as the queue does after a lost
	// completion: the handler succeeds both times and the cache holds the
	// newest version.
	job := emq.Claim{ID: "JOB_1", Kind: placement.KindBalanceCoherence, Group: account, Payload: []byte(v3.Payload), Token: 1}
	for delivery := range 2 {
		job.Token = int64(delivery + 1)
		if err := f.consumer.Handle(ctx, job); err != nil {
			t.Fatalf("delivery %d of %s: %v", delivery+1, v3.Payload, err)
		}
		if got := f.cachedVersion(t, name); got != 3 {
			t.Errorf("after delivery %d cached version %d, want 3", delivery+1, got)
		}
	}
	// Redis loses the cache.
	if err := f.rdb.Del(ctx, placement.BalanceCacheKey(account)).Err(); err != nil {
		t.Fatal(err)
	}

	// Deliveries in the worst order: the newest first, then again, then the
	// older ones. Only the first acts: it refills what Redis lost.
	for i, c := range []struct {
		entry    orders.OutboxEntry
		advanced bool
	}{
		{v3, true},
		{v3, false},
		{v2, false},
		{v1, false},
	} {
		advanced, err := f.consumer.Apply(ctx, c.entry.Payload)
		if err != nil || advanced != c.advanced {
			t.Errorf("delivery %d (%s): advanced = %v, %v; want %v", i, c.entry.Payload, advanced, err, c.advanced)
		}
		if got := f.cachedBalance(t, account, "USD"); got.Version != 3 || got.Value != "30.00" {
			t.Errorf("after delivery %d (%s) the cache holds %+v, want version 3 of 30.00", i, c.entry.Payload, got)
		}
	}

	// v2 before v3 is the other reordering: v2 acts, v3 acts after it.
	other := f.newAccount(t)
	w1 := f.depositWithOutbox(t, other, "BTC", "1")
	w2 := f.depositWithOutbox(t, other, "BTC", "1")
	for _, c := range []struct {
		entry    orders.OutboxEntry
		advanced bool
	}{{w2, true}, {w1, false}, {w2, false}} {
		advanced, err := f.consumer.Apply(ctx, c.entry.Payload)
		if err != nil || advanced != c.advanced {
			t.Errorf("Apply(%s) = %v, %v; want %v", c.entry.Payload, advanced, err, c.advanced)
		}
	}
	if got := f.cachedVersion(t, orders.BalanceName(other, "BTC")); got != 2 {
		t.Errorf("cached version %d, want 2", got)
	}
}

func TestCoherenceCatchesUpWithTheBalanceNotTheMessage(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	v1 := f.depositWithOutbox(t, account, "USD", "1.00")
	f.depositWithOutbox(t, account, "USD", "1.00")
	// The message says version 1, the balance is at 2 by the time it is
	// handled: the cache gets what PostgreSQL holds now.
	if _, err := f.consumer.Apply(ctx, v1.Payload); err != nil {
		t.Fatal(err)
	}
	if got := f.cachedBalance(t, account, "USD"); got.Version != 2 || got.Value != "2.00" {
		t.Errorf("cache holds %+v, want version 2 of 2.00", got)
	}
}

func TestCoherenceRefusesMalformedPayloadsForGood(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	for _, payload := range []string{
		"",
		"balances:ACC_X:USD",
		"balances:ACC_X:USD@",
		"balances:ACC_X:USD@0",
		"balances:ACC_X:USD@-3",
		"balances:ACC_X:USD@seven",
		"@4",
		"instruments:BTC-USD@4",
		"balances:ACC_X@4",
		"balances::USD@4",
	} {
		err := f.consumer.Handle(ctx, emq.Claim{ID: "JOB_X", Kind: placement.KindBalanceCoherence, Payload: []byte(payload), Token: 1})
		if !errors.Is(err, emq.ErrPermanent) || !errors.Is(err, placement.ErrOutboxPayload) {
			t.Errorf("Handle(%q) = %v, want a permanent ErrOutboxPayload", payload, err)
		}
	}
	if cached := testserver.Keys(t, f.rdb, placement.BalanceCacheKey("*")); len(cached) != 0 {
		t.Errorf("the cache holds %v, want nothing", cached)
	}
}

func TestCoherenceRetriesWhenTheCacheCannotBeRefreshed(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.newAccount(t)
	v1 := f.depositWithOutbox(t, account, "USD", "1.00")

	server := f.redis.Single(t, "stops Redis")
	server.Stop(t)
	claim := emq.Claim{ID: "JOB_1", Kind: placement.KindBalanceCoherence, Group: account, Payload: []byte(v1.Payload), Token: 1}
	err := f.consumer.Handle(ctx, claim)
	if err == nil || errors.Is(err, emq.ErrPermanent) {
		t.Fatalf("Handle with Redis down = %v, want an error to retry", err)
	}
	server.Restart(t)
	if err := f.consumer.Handle(ctx, claim); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if got := f.cachedBalance(t, account, "USD"); got.Version != 1 {
		t.Errorf("cache holds %+v after the retry, want version 1", got)
	}
}

// TestEventsRowsAreAppendedOnceInOrder: an account's events rows reach its
// log once each and in their source's order: a row relayed before the one
// it follows has that one appended first, from the outbox, and a row
// relayed again appends nothing.
func TestEventsRowsAreAppendedOnceInOrder(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.buyer(t)
	queue, placer := f.ordersQueue(t)
	settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
	var placed []string
	for _, clientOrderID := range []string{"first", "second"} {
		order := restingBuy(t, placer, queue, settler, account, clientOrderID)
		placed = append(placed, order.ID)
	}
	rows, err := postgres.NewOutbox(f.db).EventRows(ctx, orders.EventsName(account, "BTC-USD"), 0, 100)
	if err != nil || len(rows) != 2 {
		t.Fatalf("events rows %v, %v; want two", rows, err)
	}
	f.relay.Relay(ctx, rows[1:]) // the second before the first
	f.relay.Relay(ctx, rows)     // both again
	events, err := placement.NewEventLogs(f.client).For(account).ReadLog(ctx, account, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, event := range events {
		if event.Sequence != int64(i+1) {
			t.Fatalf("event %d has sequence %d", i+1, event.Sequence)
		}
		var order orders.Order
		if err := json.Unmarshal(event.Data, &order); err != nil {
			t.Fatal(err)
		}
		got = append(got, event.Type+" "+order.ID)
	}
	// Each order's events come with its events row: its order.accepted
	// then its state.
	want := []string{"order.accepted " + placed[0], "order.open " + placed[0], "order.accepted " + placed[1], "order.open " + placed[1]}
	if !slices.Equal(got, want) {
		t.Errorf("the log holds %v, want %v", got, want)
	}
}

// TestALogThatLostItsSourcesIsNotRefilledWithHistory: Redis loses the logs
// (and what each source appended); the next events row of a source meets a
// gap back to its start. The rows behind it that were announced long ago
// are not announced again: only the new order's events are in the log.
func TestALogThatLostItsSourcesIsNotRefilledWithHistory(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.buyer(t)
	queue, placer := f.ordersQueue(t)
	settler := postgres.NewSettler(f.db, f.relay, f.logger)
	place := func(clientOrderID string) orders.Order {
		return restingBuy(t, placer, queue, settler, account, clientOrderID)
	}
	place("old-1")
	place("old-2")
	if _, err := f.db.Exec(ctx, `UPDATE outbox SET relayed_at = now() - interval '1 hour' WHERE relayed_at IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
	testserver.FlushAll(t, f.rdb)
	if err := placer.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := place("new")
	got := logOf(t, placement.NewEventLogs(f.client).For(account), account)
	if want := []string{"order.accepted " + fresh.ID, "order.open " + fresh.ID}; !slices.Equal(got, want) {
		t.Errorf("after Redis lost the log, it holds %v, want %v", got, want)
	}
}

// TestAnUnrenderableEventsRowHoldsNoOtherBack: one account's events row
// cannot be rendered; it is left out, and the other account's row relayed
// with it reaches its log.
func TestAnUnrenderableEventsRowHoldsNoOtherBack(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t, placement.WithSweepAge(0))
	queue, placer := f.ordersQueue(t)
	settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
	var accounts, placed []string
	for _, clientOrderID := range []string{"a", "b"} {
		account := f.buyer(t)
		accounts = append(accounts, account)
		order := restingBuy(t, placer, queue, settler, account, clientOrderID)
		placed = append(placed, order.ID)
	}
	if _, err := f.db.Exec(ctx, `UPDATE outbox SET payload = '{"orders":[[1]],"fills":[]}' WHERE name = $1`, orders.EventsName(accounts[0], "BTC-USD")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.relay.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := logOf(t, placement.NewEventLogs(f.client).For(accounts[1]), accounts[1]), []string{"order.accepted " + placed[1], "order.open " + placed[1]}; !slices.Equal(got, want) {
		t.Errorf("the other account's log holds %v, want %v", got, want)
	}
	if unrelayed := f.unrelayed(t); unrelayed != 0 {
		t.Errorf("%d rows left unrelayed: the bad row would stay in every sweep", unrelayed)
	}
}

// logOf reads an account's log as "<type> <order id>".
func logOf(t testing.TB, queue *emq.Queue, account string) []string {
	t.Helper()
	events, err := queue.ReadLog(context.Background(), account, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, event := range events {
		var order orders.Order
		if err := json.Unmarshal(event.Data, &order); err != nil {
			t.Fatal(err)
		}
		got = append(got, event.Type+" "+order.ID)
	}
	return got
}

// buyer is a new account with USD to buy with.
func (f *coherenceFixture) buyer(t testing.TB) string {
	t.Helper()
	account := f.newAccount(t)
	if err := f.ledger.Deposit(context.Background(), account, "USD", "100000"); err != nil {
		t.Fatal(err)
	}
	return account
}

// ordersQueue is the orders queue on f's Redis, declared, and a placer on it.
func (f *coherenceFixture) ordersQueue(t testing.TB) (*emq.Queue, *placement.Placer) {
	t.Helper()
	queues := placement.NewOrderQueues(f.client)
	queue := queues.For("BTC-USD")
	placer := placement.NewPlacer(queues)
	if err := placer.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return queue, placer
}

// restingBuy places and settles a BTC-USD buy of account that rests in the
// book, and returns it.
func restingBuy(t testing.TB, placer *placement.Placer, queue *emq.Queue, settler *postgres.Settler, account, clientOrderID string) orders.Order {
	t.Helper()
	return placeAndSettle(t, placer, queue, settler, orders.PlaceCommand{Account: account, ClientOrderID: clientOrderID,
		Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit, Quantity: decimal.MustParse("0.1"), Price: decimal.MustParse("45000")})
}

// TestARemoteRelayAdmitsOntoTheRemoteQueue: a relay of a process that works
// no coherence queue (WithRemoteCoherence, a gateway's) puts its jobs on
// the remote queue, none on the shards, and they carry what a worker's
// relay would have.
func TestARemoteRelayAdmitsOntoTheRemoteQueue(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	gateway := placement.NewOutboxRelay(postgres.NewOutbox(f.db), f.client, placement.CoherenceModes, f.logger, placement.WithRemoteCoherence())
	account := f.newAccount(t)
	entries := []orders.OutboxEntry{f.depositWithOutbox(t, account, "USD", "1.00"), f.depositWithOutbox(t, account, "BTC", "1")}
	gateway.Relay(ctx, entries)
	if got := f.unrelayed(t); got != 0 {
		t.Errorf("%d rows left unrelayed", got)
	}
	remote := f.client.Queue(placement.CoherenceRemoteQueue(placement.BalancesTable))
	claims, err := remote.Claim(ctx, 10, time.Minute)
	if err != nil || len(claims) != 1 {
		t.Fatalf("the remote queue: claimed %+v, %v; want the one job", claims, err)
	}
	if got, want := string(claims[0].Payload), strings.Join(payloadsOf(entries), "\n"); got != want {
		t.Errorf("the job carries %q, want %q", got, want)
	}
	if got := f.pending(t); got != 0 {
		t.Errorf("%d jobs pending on the shards, want none", got)
	}
	if err := f.consumer.Handle(ctx, claims[0]); err != nil {
		t.Fatal(err)
	}
	f.assertCacheCurrent(t, []string{orders.BalanceName(account, "USD"), orders.BalanceName(account, "BTC")})
}

// overrunOutbox is an outbox whose sweeps stop waiting for their carries
// at once, as a sweep does for a carry that overran its wait (a Redis call
// past the client's timeouts): the carry goes on alone and nothing it
// carries is marked.
type overrunOutbox struct {
	*postgres.Outbox
	mu       sync.Mutex
	sweeps   int
	carrying sync.WaitGroup
}

func (o *overrunOutbox) SweepBatch(ctx context.Context, age time.Duration, limit int, marks []orders.OutboxEntry,
	carry func(context.Context, []orders.OutboxEntry) []orders.OutboxEntry) (int, int, error) {
	o.mu.Lock()
	o.sweeps++
	sweeps := o.sweeps
	o.mu.Unlock()
	if sweeps > 3 { // the round did not end: no more rows, so the test ends
		limit = 0
	}
	return o.Outbox.SweepBatch(ctx, age, limit, marks, func(ctx context.Context, entries []orders.OutboxEntry) []orders.OutboxEntry {
		o.carrying.Go(func() { carry(context.WithoutCancel(ctx), entries) })
		return nil
	})
}

// TestASweepWhoseCarryOverranEndsItsRound: a full batch whose carry
// overran the sweep's wait is not a full batch relayed; the sweep stops
// there instead of taking the same rows again at once.
func TestASweepWhoseCarryOverranEndsItsRound(t *testing.T) {
	f := newCoherenceFixture(t)
	outbox := &overrunOutbox{Outbox: postgres.NewOutbox(f.db)}
	relay := placement.NewOutboxRelay(outbox, f.client, placement.CoherenceModes, f.logger, placement.WithSweepAge(0))
	if _, err := f.db.Exec(context.Background(), `INSERT INTO outbox (name, version, payload)
		SELECT 'balances:ACC_' || n || ':USD', 1, 'balances:ACC_' || n || ':USD@1' FROM generate_series(1, $1) AS n`,
		placement.SweepBatch); err != nil {
		t.Fatal(err)
	}
	relayed, err := relay.Sweep(context.Background())
	outbox.carrying.Wait()
	outbox.mu.Lock()
	sweeps := outbox.sweeps
	outbox.mu.Unlock()
	if err != nil || relayed != 0 || sweeps != 1 {
		t.Errorf("Sweep relayed %d in %d batches, %v; want none in one batch", relayed, sweeps, err)
	}
	if got := f.unrelayed(t); got != placement.SweepBatch {
		t.Errorf("%d rows unrelayed; want the %d taken, none marked", got, placement.SweepBatch)
	}
}
