package placement_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// settledWrite is what a settlement write left in PostgreSQL: the
// balances it moved, by name at the version each reached, and the outbox
// rows it inserted (its balances' row and its events rows).
type settledWrite struct {
	moved    map[string]int64
	balances []orders.OutboxEntry
	events   []orders.OutboxEntry
}

// versions are every balance's version, by name.
func (f *coherenceFixture) versions(t testing.TB) map[string]int64 {
	t.Helper()
	rows, err := f.db.Query(context.Background(), `SELECT account_id, asset, version FROM balances`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	versions := map[string]int64{}
	for rows.Next() {
		var account, asset string
		var version int64
		if err := rows.Scan(&account, &asset, &version); err != nil {
			t.Fatal(err)
		}
		versions[orders.BalanceName(account, asset)] = version
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return versions
}

// makers are n accounts, each resting a sell of 0.1 BTC at 45000, settled
// by settler.
func (f *coherenceFixture) makers(t testing.TB, n int, placer *placement.Placer, settler *postgres.Settler) []string {
	t.Helper()
	queue := placement.NewOrderQueues(f.client).For("BTC-USD")
	var accounts []string
	for len(accounts) < n {
		account := f.newAccount(t)
		if err := f.ledger.Deposit(context.Background(), account, "BTC", "1"); err != nil {
			t.Fatal(err)
		}
		placeAndSettle(t, placer, queue, settler, orders.PlaceCommand{Account: account, ClientOrderID: "sell",
			Symbol: "BTC-USD", Side: orders.Sell, Type: orders.Limit, Quantity: decimal.MustParse("0.1"), Price: decimal.MustParse("45000")})
		accounts = append(accounts, account)
	}
	return accounts
}

// takeAll settles a buy of taker that takes every maker's sell (0.1 each;
// with none it rests, holding its cost) with settler, which relays
// nothing, and returns what its write left.
func (f *coherenceFixture) takeAll(t testing.TB, taker string, makers int, placer *placement.Placer, settler *postgres.Settler) settledWrite {
	t.Helper()
	ctx := context.Background()
	var after int64
	if err := f.db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	before := f.versions(t)
	quantity := decimal.MustParse("0.1")
	if makers > 0 {
		quantity = decimal.MustNew(int64(makers), 1)
	}
	queue := placement.NewOrderQueues(f.client).For("BTC-USD")
	placeAndSettle(t, placer, queue, settler, orders.PlaceCommand{Account: taker, ClientOrderID: "take",
		Symbol: "BTC-USD", Side: orders.Buy, Type: orders.Limit, Quantity: quantity, Price: decimal.MustParse("45000")})
	var w settledWrite
	w.moved = map[string]int64{}
	for name, version := range f.versions(t) {
		if version != before[name] {
			w.moved[name] = version
		}
	}
	rows, err := f.db.Query(ctx, `SELECT id, name, version, payload FROM outbox WHERE id > $1 ORDER BY id`, after)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var entry orders.OutboxEntry
		if err := rows.Scan(&entry.ID, &entry.Name, &entry.Version, &entry.Payload); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(entry.Name, orders.EventsTable+":") {
			w.events = append(w.events, entry)
		} else {
			w.balances = append(w.balances, entry)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return w
}

// consumeAll claims every pending coherence job and applies it, as the
// consumer does, and returns the entries the jobs carried and how many
// jobs there were.
func (f *coherenceFixture) consumeAll(t testing.TB) (entries []string, jobs int) {
	t.Helper()
	claims := f.claimAll(t)
	for _, claim := range claims {
		if err := f.consumer.Handle(context.Background(), claim); err != nil {
			t.Errorf("Handle(%s): %v", claim.Payload, err)
		}
	}
	return carried(claims), len(claims)
}

// assertCachedAt fails unless the cache holds each balance at its version.
func (f *coherenceFixture) assertCachedAt(t testing.TB, versions map[string]int64) {
	t.Helper()
	for name, version := range versions {
		account, asset := splitBalanceName(t, name)
		cached, err := f.caches.ReadCache(context.Background(), placement.BalanceCacheKey(account))
		if err != nil {
			t.Fatal(err)
		}
		if got := cached[asset].Version; got != version {
			t.Errorf("%s: the cache holds version %d, want %d", name, got, version)
		}
	}
}

// heads are the "<name>@<version>" heads of a write row's lines, without
// the amounts each carries, sorted.
func heads(payload string) []string {
	var heads []string
	for _, line := range strings.Split(payload, "\n") {
		head, _, _, _ := orders.SplitBalanceAmounts(line)
		heads = append(heads, head)
	}
	slices.Sort(heads)
	return heads
}

// lineOf is the line of a write row's payload whose head is head.
func lineOf(t testing.TB, payload, head string) string {
	t.Helper()
	for _, line := range strings.Split(payload, "\n") {
		if got, _, _, _ := orders.SplitBalanceAmounts(line); got == head {
			return line
		}
	}
	t.Fatalf("no line of %q is %s", payload, head)
	return ""
}

// lines are the "<name>@<version>" lines of versions, sorted.
func lines(versions map[string]int64) []string {
	var lines []string
	for name, version := range versions {
		lines = append(lines, name+"@"+strconv.FormatInt(version, 10))
	}
	slices.Sort(lines)
	return lines
}

// TestASettlementWriteIsOneOutboxRowTheRelayCarriesWhole: a settlement
// write that moves N balances inserts one outbox row listing each at the
// version it reached; the relay carries every line to the coherence
// queues in one job, one admission (or a job per line at job size 1),
// deletes the row,
// and the consumer leaves each cached balance, cached before the write,
// at its new version.
func TestASettlementWriteIsOneOutboxRowTheRelayCarriesWhole(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name    string
		makers  int
		jobSize int
		// balances the write moves: the taker's USD (and BTC when it
		// trades), each maker's BTC and USD, the venue's fees.
		balances int
	}{
		{name: "a resting buy, one balance", makers: 0, balances: 1},
		{name: "one trade", makers: 1, balances: 5},
		{name: "four trades", makers: 4, balances: 11},
		{name: "four trades, one change a job", makers: 4, jobSize: 1, balances: 11},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			var opts []placement.RelayOption
			if c.jobSize > 0 {
				opts = append(opts, placement.WithCoherenceJobSize(c.jobSize))
			}
			f := newCoherenceFixture(t, append(opts, placement.WithSweepAge(0))...)
			_, placer := f.ordersQueue(t)
			settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
			taker := f.buyer(t)
			f.makers(t, c.makers, placer, settler)
			// Every balance cached at its version before the write.
			if _, err := f.relay.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			f.consumeAll(t)

			w := f.takeAll(t, taker, c.makers, placer, settler)
			if len(w.moved) != c.balances {
				t.Fatalf("the write moved %d balances %v, want %d", len(w.moved), w.moved, c.balances)
			}
			if len(w.balances) != 1 || w.balances[0].Name != orders.BalancesWriteName || w.balances[0].Version != w.balances[0].ID {
				t.Fatalf("the write's balances rows %v, want one %s at its id", w.balances, orders.BalancesWriteName)
			}
			row := w.balances[0]
			if got, want := heads(row.Payload), lines(w.moved); !slices.Equal(got, want) {
				t.Errorf("the row lists %q, want %q", got, want)
			}

			f.relay.Relay(ctx, append(w.events, row))
			if got := f.unrelayed(t); got != 0 {
				t.Errorf("%d rows left unrelayed", got)
			}
			var left int
			if err := f.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE id = $1`, row.ID).Scan(&left); err != nil || left != 0 {
				t.Errorf("the write's row is still there (%d, %v); want it deleted", left, err)
			}
			entries, jobs := f.consumeAll(t)
			if want := lines(w.moved); !slices.Equal(entries, want) {
				t.Errorf("the jobs carry %q, want %q", entries, want)
			}
			if want := len(w.moved); c.jobSize == 1 {
				if jobs != want {
					t.Errorf("%d jobs, want one a change, %d", jobs, want)
				}
			} else if jobs != 1 {
				t.Errorf("%d jobs, want the write's one", jobs)
			}
			f.assertCachedAt(t, w.moved)
		})
	}
}

// TestSweepCarriesBothFormsOfBalancesRows: the sweep carries what a relay
// left behind, a settlement write's row whole (every line, then the row
// deleted) and balances' rows of their own (deposits, and rows written
// before the upgrade) alike, in one sweep.
func TestSweepCarriesBothFormsOfBalancesRows(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name            string
		write, deposits bool
	}{
		{name: "a settlement write's row", write: true},
		{name: "a deposit's rows, one a balance", deposits: true},
		{name: "both, as at an upgrade", write: true, deposits: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCoherenceFixture(t, placement.WithSweepAge(0))
			_, placer := f.ordersQueue(t)
			settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
			taker := f.buyer(t)
			f.makers(t, 2, placer, settler)
			if _, err := f.relay.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			f.consumeAll(t)

			want := map[string]int64{}
			rows := 0
			if c.write {
				w := f.takeAll(t, taker, 2, placer, settler)
				maps.Copy(want, w.moved)
				rows += len(w.balances) + len(w.events)
			}
			if c.deposits {
				account := f.newAccount(t)
				for _, asset := range []string{"USD", "ETH"} {
					entry := f.depositWithOutbox(t, account, asset, "3")
					want[entry.Name] = entry.Version
					rows++
				}
			}
			if got := f.unrelayed(t); got != rows {
				t.Fatalf("%d rows unrelayed before the sweep, want %d", got, rows)
			}
			if n, err := f.relay.Sweep(ctx); err != nil || n != rows {
				t.Errorf("Sweep = %d, %v; want %d", n, err, rows)
			}
			if got := f.unrelayed(t); got != 0 {
				t.Errorf("%d rows left unrelayed", got)
			}
			var left int
			if err := f.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE name LIKE 'balances:%'`).Scan(&left); err != nil || left != 0 {
				t.Errorf("%d balances rows left after the sweep (%v); want every one deleted", left, err)
			}
			entries, _ := f.consumeAll(t)
			for _, line := range lines(want) {
				if !slices.Contains(entries, line) {
					t.Errorf("no job carries %s (carried %q)", line, entries)
				}
			}
			f.assertCachedAt(t, want)
		})
	}
}

// TestAPartlyCarriedWriteRowStaysUnrelayed: at one change a job, one
// shard's queue refuses a line's job (its declared kinds are gone, as
// after a purge), the other shards take theirs. The row is not marked relayed, by Relay or by the
// sweep, until every line went: then the sweep carries it whole (the lines
// that went before are dedup hits) and deletes it, and every balance
// reaches the cache.
func TestAPartlyCarriedWriteRowStaysUnrelayed(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name  string
		first func(ctx context.Context, f *coherenceFixture, w settledWrite) (int, error)
	}{
		{name: "relayed after its commit", first: func(ctx context.Context, f *coherenceFixture, w settledWrite) (int, error) {
			f.relay.Relay(ctx, w.balances)
			return 0, nil
		}},
		{name: "swept", first: func(ctx context.Context, f *coherenceFixture, w settledWrite) (int, error) {
			return f.relay.Sweep(ctx)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCoherenceFixture(t, placement.WithSweepAge(0), placement.WithCoherenceJobSize(1))
			_, placer := f.ordersQueue(t)
			settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
			taker := f.buyer(t)
			f.makers(t, 2, placer, settler)
			if _, err := f.relay.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			f.consumeAll(t)
			w := f.takeAll(t, taker, 2, placer, settler)
			// The events rows are not what this is about.
			f.relay.Relay(ctx, w.events)

			// The queue of the taker's USD line's job.
			name := orders.BalanceName(taker, "USD")
			line := lineOf(t, w.balances[0].Payload, name+"@"+strconv.FormatInt(w.moved[name], 10))
			refusing := f.client.Queue(placement.CoherenceJobQueue(placement.BalancesTable, line))
			if err := refusing.Purge(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := c.first(ctx, f, w); n != 0 || err != nil {
				t.Errorf("the carry relayed %d, %v; want nothing marked and no error", n, err)
			}
			if got := f.unrelayed(t); got != 1 {
				t.Fatalf("%d rows unrelayed after a partly failed carry, want the write's 1", got)
			}
			if got := f.pending(t); got == 0 {
				t.Errorf("no job admitted: the other shards' jobs should have gone")
			}

			if err := f.relay.Declare(ctx); err != nil {
				t.Fatal(err)
			}
			if n, err := f.relay.Sweep(ctx); n != 1 || err != nil {
				t.Errorf("Sweep once the queue takes jobs = %d, %v; want the row", n, err)
			}
			if got := f.unrelayed(t); got != 0 {
				t.Errorf("%d rows left unrelayed", got)
			}
			entries, _ := f.consumeAll(t)
			if want := lines(w.moved); !slices.Equal(entries, want) {
				t.Errorf("the jobs carry %q, want each line once, %q", entries, want)
			}
			f.assertCachedAt(t, w.moved)
		})
	}
}

// TestASweepOfWritesTheRelayCarriedMakesNoSecondJob: two settlement
// writes relayed, each its own job, whose process died before marking
// their rows: the sweep, taking both rows at once, makes a job a row, the
// relay's jobs again, and its admissions are dedup hits. Every line
// reaches the cache once, by the relay's jobs.
func TestASweepOfWritesTheRelayCarriedMakesNoSecondJob(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t, placement.WithSweepAge(0))
	_, placer := f.ordersQueue(t)
	settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
	f.makers(t, 3, placer, settler)
	takers := []string{f.buyer(t), f.buyer(t), f.buyer(t)}
	// A first write opens the venue's fee balances (rows of their own):
	// the two writes after it leave only their own rows.
	f.takeAll(t, takers[0], 1, placer, settler)
	if _, err := f.relay.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	f.consumeAll(t)

	forget := placement.CarryWithoutMarking(f.relay)
	want := map[string]int64{}
	var wantLines []string // each write's, the venue's fee balance in both
	for _, taker := range takers[1:] {
		w := f.takeAll(t, taker, 1, placer, settler)
		maps.Copy(want, w.moved)
		wantLines = append(wantLines, lines(w.moved)...)
		f.relay.Relay(ctx, append(w.events, w.balances...))
	}
	slices.Sort(wantLines)
	forget()
	if got := f.pending(t); got != 2 {
		t.Fatalf("%d jobs pending after two relayed writes, want one a write, 2", got)
	}
	if got := f.unrelayed(t); got == 0 {
		t.Fatal("no row unrelayed: the relay marked what it should have left")
	}

	if _, err := f.relay.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.unrelayed(t); got != 0 {
		t.Errorf("%d rows left unrelayed after the sweep", got)
	}
	if got := f.pending(t); got != 2 {
		t.Errorf("%d jobs pending after the sweep, want the relay's 2 (its jobs refused as duplicates)", got)
	}
	entries, jobs := f.consumeAll(t)
	if jobs != 2 || !slices.Equal(entries, wantLines) {
		t.Errorf("%d jobs carry %q, want 2 carrying %q", jobs, entries, wantLines)
	}
	f.assertCachedAt(t, want)
}

// countedRows reads balances' current rows and counts the names it read.
type countedRows struct {
	placement.BalanceRows
	mu    sync.Mutex
	names int
}

func (c *countedRows) Current(ctx context.Context, named []orders.BalanceVersion) (map[string]*orders.Balance, error) {
	c.mu.Lock()
	c.names += len(named)
	c.mu.Unlock()
	return c.BalanceRows.Current(ctx, named)
}

// TestAWriteFillsTheCacheFromItsOwnRow: a settlement write's row carries
// each moved balance's amounts, so the consumer fills the cache from its
// job and reads from PostgreSQL only the balances the cache held nothing
// of (here those the write opened); the cache then holds each balance
// exactly as PostgreSQL does. A write without amounts (a settler for a
// rolling deploy) and a deposit's rows are read back, as before.
func TestAWriteFillsTheCacheFromItsOwnRow(t *testing.T) {
	testserver.Parallel(t)
	for _, c := range []struct {
		name      string
		plain     bool // the settler writes no amounts
		makers    int
		wantReads bool
	}{
		{name: "a resting buy, its hold carried", makers: 0},
		{name: "two trades", makers: 2},
		{name: "two trades, no amounts written", makers: 2, plain: true, wantReads: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCoherenceFixture(t, placement.WithSweepAge(0))
			_, placer := f.ordersQueue(t)
			settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
			if c.plain {
				settler.WithoutBalanceValues()
			}
			taker := f.buyer(t)
			f.makers(t, c.makers, placer, settler)
			if _, err := f.relay.Sweep(ctx); err != nil {
				t.Fatal(err)
			}
			f.consumeAll(t)

			w := f.takeAll(t, taker, c.makers, placer, settler)
			for _, line := range strings.Split(w.balances[0].Payload, "\n") {
				if _, _, _, carried := orders.SplitBalanceAmounts(line); carried == c.plain {
					t.Errorf("the write's line %q carries amounts: %v, want %v", line, carried, !c.plain)
				}
			}
			uncached := 0 // the moved balances the cache holds nothing of
			for name := range w.moved {
				account, asset := splitBalanceName(t, name)
				cached, err := f.caches.ReadCache(ctx, placement.BalanceCacheKey(account))
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := cached[asset]; !ok {
					uncached++
				}
			}
			if uncached == len(w.moved) {
				t.Fatalf("the cache holds none of the %d balances the write moved", len(w.moved))
			}
			f.relay.Relay(ctx, append(w.events, w.balances...))
			rows := &countedRows{BalanceRows: postgres.NewBalances(f.db)}
			f.consumer = placement.NewBalanceCoherence(rows, f.caches, f.logger)
			f.consumeAll(t)
			want := uncached
			if c.wantReads {
				want = len(w.moved)
			}
			if rows.names != want {
				t.Errorf("the consumer read %d balances from PostgreSQL; want %d (%d of %d moved were not cached)", rows.names, want, uncached, len(w.moved))
			}
			f.assertCachedAsPostgreSQL(t, w.moved)

			// A deposit's row names no amounts: it is read.
			deposit := f.depositWithOutbox(t, taker, "ETH", "2")
			f.relay.Relay(ctx, []orders.OutboxEntry{deposit})
			before := rows.names
			f.consumeAll(t)
			if rows.names != before+1 {
				t.Errorf("the deposit's job read %d balances, want 1", rows.names-before)
			}
			f.assertCachedAsPostgreSQL(t, map[string]int64{deposit.Name: deposit.Version})
		})
	}
}

// assertCachedAsPostgreSQL fails unless the cache holds each balance at its
// version with PostgreSQL's amounts, spelled as PostgreSQL spells them.
func (f *coherenceFixture) assertCachedAsPostgreSQL(t testing.TB, versions map[string]int64) {
	t.Helper()
	var named []orders.BalanceVersion
	for name, version := range versions {
		account, asset := splitBalanceName(t, name)
		named = append(named, orders.BalanceVersion{Account: account, Asset: asset, Version: version})
	}
	truth, err := postgres.NewBalances(f.db).Current(context.Background(), named)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range named {
		cached, err := f.caches.ReadCache(context.Background(), placement.BalanceCacheKey(v.Account))
		if err != nil {
			t.Fatal(err)
		}
		want := truth[v.Name()]
		if got := cached[v.Asset]; want == nil || got.Version != want.Version || got.Value != want.Available+" "+want.Held {
			t.Errorf("%s: the cache holds %+v, PostgreSQL %+v", v.Name(), got, want)
		}
	}
}
