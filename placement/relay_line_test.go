package placement_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// gapCountingOutbox is the real outbox, counting the reads of the rows
// missing before a relayed events row (the gap fill).
type gapCountingOutbox struct {
	*postgres.Outbox
	gapReads atomic.Int64
}

func (o *gapCountingOutbox) EventRows(ctx context.Context, name string, after, before int64) ([]orders.OutboxEntry, error) {
	o.gapReads.Add(1)
	return o.Outbox.EventRows(ctx, name, after, before)
}

// TestRelaysInTurnAppendEachSourceInOrderWithoutGaps: relays of one
// source's events rows, each in turn behind the one before, started in
// the reverse order, append every row once, in the source's order, with
// no gap to fill from the outbox; and they leave no row unrelayed.
func TestRelaysInTurnAppendEachSourceInOrderWithoutGaps(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.buyer(t)
	queue, placer := f.ordersQueue(t)
	settler := postgres.NewSettler(f.db, nil, f.logger) // relays nothing itself
	const n = 12
	var placed []string
	for i := range n {
		placed = append(placed, restingBuy(t, placer, queue, settler, account, "turn-"+string(rune('a'+i))).ID)
	}
	outbox := &gapCountingOutbox{Outbox: postgres.NewOutbox(f.db)}
	relay := placement.NewOutboxRelay(outbox, f.client, placement.CoherenceModes, f.logger)
	rows, err := outbox.EventRows(ctx, orders.EventsName(account, "BTC-USD"), 0, 100)
	if err != nil || len(rows) != n {
		t.Fatalf("events rows %v, %v; want %d", rows, err, n)
	}
	outbox.gapReads.Store(0)

	inLine := make([]chan struct{}, n)
	for i := range inLine {
		inLine[i] = make(chan struct{})
	}
	var relaying sync.WaitGroup
	for i := n - 1; i >= 0; i-- {
		var turn <-chan struct{}
		if i > 0 {
			turn = inLine[i-1]
		}
		relaying.Go(func() {
			relay.RelayInTurn(ctx, rows[i:i+1], turn, func() { close(inLine[i]) })
		})
		time.Sleep(time.Millisecond)
	}
	relaying.Wait()

	var want []string
	for _, id := range placed {
		want = append(want, "order.accepted "+id, "order.open "+id)
	}
	if got := logOf(t, placement.NewEventLogs(f.client).For(account), account); !slices.Equal(got, want) {
		t.Errorf("the log holds %v, want %v", got, want)
	}
	if reads := outbox.gapReads.Load(); reads != 0 {
		t.Errorf("the relays read the outbox %d times to fill gaps, want none", reads)
	}
	var unrelayed int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE name = $1 AND relayed_at IS NULL`,
		orders.EventsName(account, "BTC-USD")).Scan(&unrelayed); err != nil {
		t.Fatal(err)
	}
	if unrelayed != 0 {
		t.Errorf("%d events rows left unrelayed", unrelayed)
	}
}

// TestARelayInTurnAdmitsItsCoherenceJobsBeforeItsTurn: the coherence jobs
// need no order, so a relay waiting for its turn has admitted them
// already; its events wait for the turn.
func TestARelayInTurnAdmitsItsCoherenceJobsBeforeItsTurn(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	account := f.buyer(t)
	queue, placer := f.ordersQueue(t)
	settler := postgres.NewSettler(f.db, nil, f.logger)
	order := restingBuy(t, placer, queue, settler, account, "held")
	var entries []orders.OutboxEntry
	rows, err := f.db.Query(ctx, `SELECT id, name, version, payload FROM outbox WHERE relayed_at IS NULL AND name LIKE $1`, "%"+account+"%")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var entry orders.OutboxEntry
		if err := rows.Scan(&entry.ID, &entry.Name, &entry.Version, &entry.Payload); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry)
	}
	if rows.Close(); rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	turn, inLine := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.relay.RelayInTurn(ctx, entries, turn, func() { close(inLine) })
	}()
	deadline := time.Now().Add(5 * time.Second)
	for f.pending(t) == 0 {
		if time.Now().After(deadline) {
			close(turn)
			t.Fatal("no coherence job admitted while the relay waits for its turn")
		}
		time.Sleep(5 * time.Millisecond)
	}
	events := placement.NewEventLogs(f.client).For(account)
	if got := logOf(t, events, account); len(got) != 0 {
		t.Errorf("the log holds %v before the relay's turn, want nothing", got)
	}
	close(turn)
	<-inLine
	<-done
	if got, want := logOf(t, events, account), []string{"order.accepted " + order.ID, "order.open " + order.ID}; !slices.Equal(got, want) {
		t.Errorf("the log holds %v, want %v", got, want)
	}
	var left int
	if err := f.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE relayed_at IS NULL AND name LIKE $1`, "%"+account+"%").Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d of the account's rows left unrelayed", left)
	}
}

// TestRelaysInTurnBehindOneThatNeverTakesItsTurnAppendEveryRowOnce: the
// relays of one source's rows start in the reverse order of the rows, and
// the first's turn never comes (the batch before it never relays): in one
// owner's line, or in an old owner's line beside the new owner's, whose
// first relay has no turn to wait for. Each relay goes once its wait
// ends, the later ones' waits racing the earlier ones' places in line,
// the gaps a late relay leaves are filled from the outbox, and the log
// holds every row once, in the source's order, with none left unrelayed.
func TestRelaysInTurnBehindOneThatNeverTakesItsTurnAppendEveryRowOnce(t *testing.T) {
	const n = 4
	never := make(chan struct{})
	for _, tt := range []struct {
		name string
		// turn is the turn of relay i, given the places in line.
		turn func(i int, inLine []chan struct{}) <-chan struct{}
	}{
		{"one owner", func(i int, inLine []chan struct{}) <-chan struct{} {
			if i == 0 {
				return never
			}
			return inLine[i-1]
		}},
		{"an old owner's line beside the new owner's", func(i int, inLine []chan struct{}) <-chan struct{} {
			switch i {
			case 0:
				return never
			case n / 2:
				return nil
			}
			return inLine[i-1]
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			f := newCoherenceFixture(t)
			account := f.buyer(t)
			queue, placer := f.ordersQueue(t)
			settler := postgres.NewSettler(f.db, nil, f.logger)
			var placed []string
			for i := range n {
				placed = append(placed, restingBuy(t, placer, queue, settler, account, "late-"+string(rune('a'+i))).ID)
			}
			outbox := postgres.NewOutbox(f.db)
			relay := placement.NewOutboxRelay(outbox, f.client, placement.CoherenceModes, f.logger)
			rows, err := outbox.EventRows(ctx, orders.EventsName(account, "BTC-USD"), 0, 100)
			if err != nil || len(rows) != n {
				t.Fatalf("events rows %v, %v; want %d", rows, err, n)
			}
			inLine := make([]chan struct{}, n)
			for i := range inLine {
				inLine[i] = make(chan struct{})
			}
			began := time.Now()
			var relaying sync.WaitGroup
			for i := n - 1; i >= 0; i-- {
				turn := tt.turn(i, inLine)
				relaying.Go(func() {
					relay.RelayInTurn(ctx, rows[i:i+1], turn, func() { close(inLine[i]) })
				})
			}
			relaying.Wait()
			if took := time.Since(began); took > 8*time.Second {
				t.Errorf("the relays took %v behind one whose turn never came, want about one turn's wait", took)
			}
			var want []string
			for _, id := range placed {
				want = append(want, "order.accepted "+id, "order.open "+id)
			}
			if got := logOf(t, placement.NewEventLogs(f.client).For(account), account); !slices.Equal(got, want) {
				t.Errorf("the log holds %v, want %v", got, want)
			}
			var unrelayed int
			if err := f.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE name = $1 AND relayed_at IS NULL`,
				orders.EventsName(account, "BTC-USD")).Scan(&unrelayed); err != nil {
				t.Fatal(err)
			}
			if unrelayed != 0 {
				t.Errorf("%d events rows left unrelayed", unrelayed)
			}
		})
	}
}
