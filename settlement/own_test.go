package settlement_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// ownerLog records the instruments each worker takes over and gives up,
// and any moment two own one instrument at once.
type ownerLog struct {
	mu       sync.Mutex
	owner    map[string]string // symbol → the worker owning it
	epochs   map[string]int64  // symbol → the last epoch taken over at
	overlaps []string
}

func (l *ownerLog) worker(name string) settlement.InstrumentOwner {
	return &loggedOwner{log: l, name: name}
}

func (l *ownerLog) owners() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.owner)
}

type loggedOwner struct {
	log  *ownerLog
	name string
}

func (o *loggedOwner) TakeOver(_ context.Context, symbol string, epoch int64) error {
	o.log.mu.Lock()
	defer o.log.mu.Unlock()
	if other, ok := o.log.owner[symbol]; ok {
		o.log.overlaps = append(o.log.overlaps, fmt.Sprintf("%s taken over by %s while %s owned it", symbol, o.name, other))
	}
	if epoch <= o.log.epochs[symbol] {
		o.log.overlaps = append(o.log.overlaps, fmt.Sprintf("%s taken over at epoch %d after %d", symbol, epoch, o.log.epochs[symbol]))
	}
	o.log.owner[symbol], o.log.epochs[symbol] = o.name, epoch
	return nil
}

func (o *loggedOwner) GiveUp(symbol string) {
	o.log.mu.Lock()
	defer o.log.mu.Unlock()
	if o.log.owner[symbol] == o.name {
		delete(o.log.owner, symbol)
	}
}

// TestWorkersOwnInstrumentsAndSettleTheirOrders: two workers spread the
// three instruments' queues between them, one owner each, taking each over
// under a rising epoch; the orders of every instrument settle; a worker
// that stops gives its instruments up, and the other takes them over
// within the ownership lease and a second.
func TestWorkersOwnInstrumentsAndSettleTheirOrders(t *testing.T) {
	ctx := context.Background()
	database := testserver.MigratedPostgres(t)
	redisServer := testserver.QueueRedisServer(t)
	db := database.Pool(t)
	logger := slog.New(slog.DiscardHandler)
	config := settlement.DefaultConfig()
	config.Concurrency = 16
	config.OwnLease = time.Second
	owners := &ownerLog{owner: map[string]string{}, epochs: map[string]int64{}}
	t.Cleanup(func() {
		owners.mu.Lock()
		defer owners.mu.Unlock()
		for _, overlap := range owners.overlaps {
			t.Error(overlap)
		}
	})
	stops := map[string]func(){}
	for _, name := range []string{"a", "b"} {
		stops[name] = runWorker(t, database.URL, redisServer.URL(), config, logger, func(deps *settlement.Deps) { deps.Owner = owners.worker(name) })
	}
	spread := func() bool {
		held := map[string]int{}
		for _, worker := range owners.owners() {
			held[worker]++
		}
		return len(owners.owners()) == len(spreadSymbols) && held["a"] >= 1 && held["b"] >= 1
	}
	waitUntil(t, 10*time.Second, "the instruments spread over both workers", spread)

	account, err := postgres.NewAccounts(db).Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewLedger(db).Deposit(ctx, account, "USD", "1000000"); err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewLedger(db).Deposit(ctx, account, "BTC", "10"); err != nil {
		t.Fatal(err)
	}
	client, err := emq.Connect(ctx, redisServer.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	placer := placement.NewPlacer(placement.NewOrderQueues(client))
	place := func(clientOrderID string) []string {
		var ids []string
		for _, symbol := range spreadSymbols {
			price := map[string]string{"BTC-USD": "100.00", "ETH-USD": "100.00", "ETH-BTC": "0.01000"}[symbol]
			placed, err := placer.Place(ctx, orders.PlaceCommand{Account: account, ClientOrderID: clientOrderID + "-" + symbol,
				Symbol: symbol, Side: orders.Buy, Type: orders.Limit, Quantity: decimal.MustParse("0.100"), Price: decimal.MustParse(price)})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, placed.Order.ID)
		}
		return ids
	}
	settled := func(ids []string) func() bool {
		return func() bool {
			var n int
			err := db.QueryRow(ctx, `SELECT count(*) FROM orders WHERE id = ANY($1)`, ids).Scan(&n)
			return err == nil && n == len(ids)
		}
	}
	waitUntil(t, 10*time.Second, "every instrument's order settled", settled(place("first")))

	before := owners.owners()
	stops["a"]()
	start := time.Now()
	waitUntil(t, config.OwnLease+time.Second+500*time.Millisecond, "b owns every instrument", func() bool {
		now := owners.owners()
		return len(now) == len(spreadSymbols) && !slices.Contains(slices.Collect(maps.Values(now)), "a")
	})
	t.Logf("owners %v; after a stopped, b owned them all in %v", before, time.Since(start).Round(time.Millisecond))
	waitUntil(t, 10*time.Second, "the orders placed after settled", settled(place("second")))
}

// waitUntil polls condition until it holds, failing after within.
func waitUntil(t testing.TB, within time.Duration, what string, condition func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !condition() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runWorker connects a worker to databaseURL and redisURL with config,
// the connections changed by with (nil changes nothing), and runs it until
// the stop it returns, which t.Cleanup calls too, has ended it.
func runWorker(t testing.TB, databaseURL, redisURL string, config settlement.Config, logger *slog.Logger, with func(*settlement.Deps)) (stop func()) {
	t.Helper()
	ctx := context.Background()
	deps, err := settlement.Connect(ctx, databaseURL, redisURL, config, logger)
	if err != nil {
		t.Fatal(err)
	}
	if with != nil {
		with(&deps)
	}
	worker, err := settlement.New(ctx, deps, config)
	if err != nil {
		deps.Close()
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer deps.Close()
		if err := worker.Run(runCtx); err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}
