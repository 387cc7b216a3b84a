package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// gatherStep is an order placed, or a cancel (of one order, or all the
// account's) sent on the instrument's queue.
type gatherStep struct {
	order  orders.Order
	cancel *orders.Command
}

// TestOwnerGathersAsTheLockedPath: as TestOwnerDecidesAsTheLockedPath, with
// the owner's writes slowed so that most orders arrive while a write is in
// flight and are decided into the batch decided after it (gather), and
// cancels and cancel-alls among the orders: one by one under the
// instrument's lock and by the owner, the same orders, trades and balances
// (versions included), both audits clean, and the owner never refused a
// write (a gathered decision on funds or a book PostgreSQL would not hold
// is refused, and the book loaded again).
func TestOwnerGathersAsTheLockedPath(t *testing.T) {
	const customers = 6
	n := 500
	if testing.Short() {
		n = 150
	}
	locked, owned := newMarket(t), newMarket(t)
	names := make([]string, customers)
	lockedAccounts, ownedAccounts := make(map[string]string), make(map[string]string)
	for i := range names {
		names[i] = fmt.Sprintf("#%d", i)
		// Funds that run short, so that what an account's resting orders
		// earn decides whether its next order is accepted.
		funds := map[string]string{"USD": "6000", "BTC": "0.12"}
		lockedAccounts[names[i]], ownedAccounts[names[i]] = locked.newCustomerWith(t, funds), owned.newCustomerWith(t, funds)
	}
	lockedAccounts["alice"], lockedAccounts["bob"] = locked.alice, locked.bob
	ownedAccounts["alice"], ownedAccounts["bob"] = owned.alice, owned.bob
	random := rand.New(rand.NewPCG(24, 16))
	placed := randomOrders(random, names, n)
	var steps []gatherStep
	for i, order := range placed {
		switch {
		case i > 0 && i%29 == 0:
			// a client order id an earlier order of the account holds
			for j := i - 1; j >= 0; j-- {
				if placed[j].Account == order.Account {
					order.ClientOrderID = placed[j].ClientOrderID
					break
				}
			}
		case i > 0 && i%41 == 0:
			order = placed[i-1-random.IntN(min(i, 4))] // a redelivery
		}
		placed[i] = order
		steps = append(steps, gatherStep{order: order})
		switch k := random.IntN(40); {
		case k < 3 && i >= 60:
			// a cancel of an order placed a while ago, resting or not
			j := max(0, i-60-random.IntN(60))
			steps = append(steps, gatherStep{cancel: &orders.Command{Kind: orders.CommandCancel,
				Account: placed[j].Account, Symbol: "BTC-USD", OrderID: placed[j].ID}})
		case k == 3:
			steps = append(steps, gatherStep{cancel: &orders.Command{Kind: orders.CommandCancelAll,
				Account: order.Account, Symbol: "BTC-USD"}})
		}
	}
	on := func(accounts map[string]string, step gatherStep) gatherStep {
		if step.cancel != nil {
			cmd := *step.cancel
			cmd.Account = accounts[cmd.Account]
			return gatherStep{cancel: &cmd}
		}
		step.order.Account = accounts[step.order.Account]
		return step
	}

	ctx := context.Background()
	for _, step := range steps {
		step = on(lockedAccounts, step)
		var err error
		switch {
		case step.cancel == nil:
			err = locked.settler.Settle(ctx, step.order, 1)
		case step.cancel.Kind == orders.CommandCancel:
			_, err = locked.settler.CancelResting(ctx, step.cancel.Account, step.cancel.OrderID)
			if errors.Is(err, orders.ErrNotCancelable) || errors.Is(err, orders.ErrNotFound) {
				err = nil
			}
		default:
			_, err = locked.settler.CancelAllResting(ctx, step.cancel.Account, step.cancel.Symbol)
		}
		if err != nil {
			t.Fatalf("locked: %v", err)
		}
	}

	s := owner(t, owned, "BTC-USD", 1)
	loads := postgres.OwnedLoads(s)
	// Slow writes: orders arrive while one is written and join the batch
	// decided to be written next.
	postgres.SetBeforeOwnedWrite(t, func() { time.Sleep(15 * time.Millisecond) })
	joined := make(chan struct{}, 1)
	postgres.SetOwnedJoined(t, func() { joined <- struct{}{} })
	pauses := rand.New(rand.NewPCG(uint64(n), 9))
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, step := range steps {
		step = on(ownedAccounts, step)
		wg.Go(func() {
			if step.cancel == nil {
				errs[i] = s.Settle(ctx, step.order, 1)
				return
			}
			_, errs[i] = s.Command(ctx, fmt.Sprintf("CMD_%d", i), *step.cancel, 1)
		})
		select {
		case <-joined:
		case <-time.After(10 * time.Second):
			t.Fatalf("step %d never joined the owner's queue", i)
		}
		time.Sleep(time.Duration(pauses.IntN(4000)) * time.Microsecond)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("owned: %v", err)
	}
	extended := postgres.OwnedExtended(s)
	t.Logf("%d steps; %d batches decided while one was written, %d requests gathered into them, %d loads",
		len(steps), postgres.OwnedOverlaps(s), extended, postgres.OwnedLoads(s)-loads)
	if extended < int64(len(steps))/20 {
		t.Errorf("only %d of %d requests were gathered into a batch decided before them", extended, len(steps))
	}
	if got := postgres.OwnedLoads(s) - loads; got != 0 {
		t.Errorf("the owner loaded its book %d times: writes were refused", got)
	}

	lockedState := marketState(t, locked.db, lockedAccounts)
	ownedState := marketState(t, owned.db, ownedAccounts)
	for _, part := range []string{"orders", "trades", "balances"} {
		got, want := ownedState[part], lockedState[part]
		if slices.Equal(got, want) {
			continue
		}
		for i := range max(len(got), len(want)) {
			g, w := "", ""
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("%s: first difference at %d:\n owned  %s\n locked %s", part, i, g, w)
				break
			}
		}
	}
	mustAudit(t, locked.db)
	mustAudit(t, owned.db)
}
