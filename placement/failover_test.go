package placement_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/govalues/decimal"
	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/settlement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestRetryAfterFailoverSettlesOnce: Redis loses an admitted and settled
// order in a failover (the replica had not received it), and the client's
// identical retry is admitted again on the promoted replica under a new
// order id. Settlement rejects the retry: one order moved money.
func TestRetryAfterFailoverSettlesOnce(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	db := migratedPool(t)
	account, err := postgres.NewAccounts(db).Create(ctx, "trader")
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.NewLedger(db).Deposit(ctx, account, "USD", "100000"); err != nil {
		t.Fatal(err)
	}
	primary, replica, replicaClient := replicatedRedis(t)

	placer, queue := ordersQueueOn(t, primary)
	// The queue's declaration reaches the replica before replication is cut.
	if n, err := primary.Client(t).Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	// Replication cut: what the primary takes from now on, the replica
	// misses. It is promoted at once (REPLICAOF NO ONE does both).
	if err := replicaClient.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}

	command := orders.PlaceCommand{Account: account, ClientOrderID: "retry-me", Symbol: "BTC-USD", Side: orders.Buy,
		Type: orders.Limit, Quantity: decimal.MustParse("0.1"), Price: decimal.MustParse("50000")}
	settler := postgres.NewSettler(db, nil, slog.New(slog.DiscardHandler))
	first := placeAndSettle(t, placer, queue, settler, command)

	// Failover: the client's retry reaches the promoted replica, which
	// never saw the order or its dedup key, and admits it again.
	placer, queue = ordersQueueOn(t, replica)
	retry := placeAndSettle(t, placer, queue, settler, command)
	if retry.ID == first.ID {
		t.Fatalf("the retry was answered from a dedup key the replica should not have (%s)", retry.ID)
	}

	history := postgres.NewHistory(db)
	if got, err := history.Order(ctx, account, first.ID); err != nil || got.Status != orders.StatusOpen {
		t.Errorf("the first order: %+v, %v; want open", got, err)
	}
	got, err := history.Order(ctx, account, retry.ID)
	if err != nil || got.Status != orders.StatusRejected || got.RejectReason != orders.ReasonDuplicateClientOrderID || got.DuplicateOf != first.ID {
		t.Errorf("the retry: %+v, %v; want rejected %s, a duplicate of %s", got, err, orders.ReasonDuplicateClientOrderID, first.ID)
	}
	// One hold: 0.1 × 50000 + 20 bps.
	var held string
	if err := db.QueryRow(ctx, `SELECT trim_scale(held)::text FROM balances WHERE account_id = $1 AND asset = 'USD'`, account).Scan(&held); err != nil || held != "5010" {
		t.Errorf("held %s USD (%v), want 5010: one order's hold", held, err)
	}
	report, err := postgres.RunAudit(ctx, db)
	if err != nil || len(report.Violations) > 0 {
		t.Errorf("audit: %v, %v", report.Violations, err)
	}
}

// ordersQueueOn is server's orders queue, declared, and a placer on it.
func ordersQueueOn(t testing.TB, server *testserver.Redis) (*placement.Placer, *emq.Queue) {
	t.Helper()
	client, err := emq.Connect(context.Background(), server.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	queue := queues.For("BTC-USD")
	placer := placement.NewPlacer(queues)
	if err := placer.Declare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return placer, queue
}

// placeAndSettle admits the command and settles its job as a worker would:
// claim, settle, complete.
func placeAndSettle(t testing.TB, placer *placement.Placer, queue *emq.Queue, settler *postgres.Settler, command orders.PlaceCommand) orders.Order {
	t.Helper()
	ctx := context.Background()
	placed, err := placer.Place(ctx, command)
	if err != nil || placed.Replayed {
		t.Fatalf("place: %+v, %v; want admitted", placed, err)
	}
	claims, err := queue.Claim(ctx, 1, time.Minute)
	if err != nil || len(claims) != 1 || claims[0].ID != placed.Order.ID {
		t.Fatalf("claim: %v, %v; want %s", claims, err, placed.Order.ID)
	}
	if err := settlement.Settle(settler)(ctx, claims[0]); err != nil {
		t.Fatal(err)
	}
	if err := queue.Complete(ctx, claims[0].ID, claims[0].Token); err != nil {
		t.Fatal(err)
	}
	return placed.Order
}

// replicatedRedis starts a primary and a replica of it, in sync, and
// returns a client of the replica.
func replicatedRedis(t testing.TB) (primary, replica *testserver.Redis, replicaClient *redis.Client) {
	t.Helper()
	primary, replica = testserver.SingleRedis(t, "fails over to a replica of it"), testserver.StartRedis(t)
	replica.Follow(t, primary)
	return primary, replica, replica.Client(t)
}

// TestAdmissionWaitsForReplicas: with WithAdmitReplicas(1), a placement is
// answered once the replica holds it; once the replica stops following, a
// placement is admitted on the primary but answered unavailable, naming
// the replicas that held it, and its retry (a replay) is answered the same
// until a replica holds it.
func TestAdmissionWaitsForReplicas(t *testing.T) {
	ctx := context.Background()
	primary, _, replicaClient := replicatedRedis(t)
	client, err := emq.Connect(ctx, primary.Client(t), emq.WithAdmitReplicas(1, 300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	queues := placement.NewOrderQueues(client)
	queue := queues.For("BTC-USD")
	placer := placement.NewPlacer(queues)
	if err := placer.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	command := func(clientOrderID string) orders.PlaceCommand {
		return orders.PlaceCommand{Account: "acct-1", ClientOrderID: clientOrderID, Symbol: "BTC-USD", Side: orders.Buy,
			Type: orders.Limit, Quantity: decimal.MustParse("0.1"), Price: decimal.MustParse("50000")}
	}
	placed, err := placer.Place(ctx, command("replicated"))
	if err != nil {
		t.Fatalf("with the replica following: %v", err)
	}
	if got, err := replicaClient.HExists(ctx, emq.JobsKey(orders.InstrumentQueue("BTC-USD")), placed.Order.ID).Result(); err != nil || !got {
		t.Errorf("the replica does not hold the acknowledged order (%v, %v)", got, err)
	}

	if err := replicaClient.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	for _, attempt := range []string{"first", "retry"} {
		began := time.Now()
		_, err := placer.Place(ctx, command("unreplicated"))
		var notReplicated *emq.NotReplicatedError
		if !errors.Is(err, orders.ErrUnavailable) || !errors.As(err, &notReplicated) || notReplicated.Acked != 0 || notReplicated.Wanted != 1 {
			t.Errorf("%s placement without a replica: %v; want unavailable, acknowledged by 0 of 1", attempt, err)
		}
		var refused *placement.NotReplicatedError
		if !errors.As(err, &refused) || refused.Acked != 0 || refused.Wanted != 1 {
			t.Errorf("%s placement without a replica: %v; want a *placement.NotReplicatedError, acknowledged by 0 of 1", attempt, err)
		}
		if took := time.Since(began); took < 250*time.Millisecond {
			t.Errorf("%s placement answered after %v, before the wait's timeout", attempt, took)
		}
	}
	if pending, err := queue.Pending(ctx); err != nil || pending != 2 {
		t.Errorf("pending %d, %v; want both orders admitted on the primary, the retry once", pending, err)
	}
}

// TestConflictWhileNotReplicatedIsAConflict: a different request under a
// used client order id admits nothing, so a replica that stopped following
// does not make it unavailable: it is a conflict.
func TestConflictWhileNotReplicatedIsAConflict(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	primary, _, replicaClient := replicatedRedis(t)
	client, err := emq.Connect(ctx, primary.Client(t), emq.WithAdmitReplicas(1, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	placer := placement.NewPlacer(placement.NewOrderQueues(client))
	if err := placer.Declare(ctx); err != nil {
		t.Fatal(err)
	}
	command := func(quantity string) orders.PlaceCommand {
		return orders.PlaceCommand{Account: "acct-1", ClientOrderID: "c-1", Symbol: "BTC-USD", Side: orders.Buy,
			Type: orders.Limit, Quantity: decimal.MustParse(quantity), Price: decimal.MustParse("50000")}
	}
	if _, err := placer.Place(ctx, command("0.1")); err != nil {
		t.Fatal(err)
	}
	if err := replicaClient.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = placer.Place(ctx, command("0.2"))
	var conflict *orders.ConflictError
	if !errors.As(err, &conflict) {
		t.Errorf("a different request under a used client order id = %v; want a *orders.ConflictError", err)
	}
}
