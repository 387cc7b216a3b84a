package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestCancelWhoseCommandDiedIsSentAgain: a worker that buries the cancel
// command (one of before the job kind, which the rollout note allows for;
// or a command out of attempts) leaves the order resting. DELETE must not
// answer 202 "queued" for a command nothing will run: it sends the cancel
// again once, and answers 202 only for that live command; when that one
// dies too, 503 (retry later), never a promise.
func TestCancelWhoseCommandDiedIsSentAgain(t *testing.T) {
	testserver.Parallel(t)
	for _, tc := range []struct {
		name string
		// bury: how many commands the worker buries before it holds one.
		bury     int32
		status   int
		commands int32
	}{
		{name: "buried once", bury: 1, status: http.StatusAccepted, commands: 2},
		{name: "buried every time", bury: 1 << 20, status: http.StatusServiceUnavailable, commands: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newQueuedCancelFixture(t, 1, 2*time.Second)
			key, account := f.keys[0], f.accounts[0]
			id := f.insertRestingOrder(t, account, "BTC-USD", "sell", "0.01", "51000")
			ctx, stop := context.WithCancel(context.Background())
			var claimed atomic.Int32
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					claims, err := f.queue.Claim(ctx, 1, time.Minute)
					if err != nil || len(claims) != 1 || claims[0].Kind != orders.KindCommand {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					if claimed.Add(1) > tc.bury {
						return // held, as a live worker deciding it
					}
					_ = f.queue.Bury(ctx, claims[0].ID, claims[0].Token, errors.New("old worker: unknown job kind"))
				}
			}()
			res := f.cancel(t, key, id)
			stop()
			<-done
			if res.status != tc.status {
				t.Errorf("DELETE answered %d %s, want %d", res.status, res.body, tc.status)
			}
			if got := claimed.Load(); got != tc.commands {
				t.Errorf("%d cancel commands sent, want %d", got, tc.commands)
			}
			if status := f.get(t, key, id).json(t)["status"]; status != "open" {
				t.Fatalf("the order is %v", status)
			}
		})
	}
}

// TestCancelOfAnOrderTheMarketCanceledIsRefused: the market cancels the
// resting order (a cancel reason) before the owner decides its client's
// cancel, which then cancels nothing. DELETE answers 409, as the cancel
// under the instrument's lock does, not 200 as if the client's cancel had
// done it.
func TestCancelOfAnOrderTheMarketCanceledIsRefused(t *testing.T) {
	testserver.Parallel(t)
	f := newQueuedCancelFixture(t, 1, 2*time.Second)
	key, account := f.keys[0], f.accounts[0]
	id := f.insertRestingOrder(t, account, "BTC-USD", "sell", "0.01", "51000")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			claims, err := f.queue.Claim(ctx, 1, time.Minute)
			if err != nil || len(claims) != 1 || claims[0].Kind != orders.KindCommand {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if _, err := f.db.Exec(ctx, `UPDATE orders SET status = 'canceled', cancel_reason = 'amount_too_large', sequence = NULL,
				finished_at = now() WHERE id = $1`, id); err != nil {
				t.Errorf("the market's cancel: %v", err)
			}
			if err := f.queue.Complete(ctx, claims[0].ID, claims[0].Token); err != nil {
				t.Errorf("complete: %v", err)
			}
			return
		}
	}()
	res := f.cancel(t, key, id)
	stop()
	<-done
	if res.status != http.StatusConflict {
		t.Errorf("DELETE answered %d %s, want 409", res.status, res.body)
	}
}
