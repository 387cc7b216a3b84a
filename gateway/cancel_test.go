package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestCancelPendingOrder(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	ctx := context.Background()
	id := f.placeNew(t, f.keys[0], "to-cancel")

	canceled := f.cancel(t, f.keys[0], id)
	if canceled.status != http.StatusOK {
		t.Fatalf("cancel: %d %s, want 200", canceled.status, canceled.body)
	}
	order := canceled.json(t)
	if order["id"] != id || order["status"] != "canceled" || order["canceled_at"] == nil {
		t.Errorf("canceled order = %s", canceled.body)
	}
	if read := f.get(t, f.keys[0], id); read.status != http.StatusOK || read.json(t)["status"] != "canceled" {
		t.Errorf("get after cancel: %d %s, want it canceled", read.status, read.body)
	}
	if pending, _ := f.queue.Pending(ctx); pending != 0 {
		t.Errorf("%d orders still pending after the cancel", pending)
	}
	if depth, _ := f.queue.LaneDepth(ctx, f.accounts[0]); depth != 0 {
		t.Errorf("the account's lane holds %d after the cancel", depth)
	}
	if claims, err := f.queue.Claim(ctx, 1, time.Minute); err != nil || len(claims) != 0 {
		t.Errorf("a worker could still claim %+v (%v)", claims, err)
	}

	again := f.cancel(t, f.keys[0], id)
	assertNotCancelable(t, again, "canceled")
}

// TestCancelOnlyWhileNoWorkerHoldsTheOrder moves orders through the queue as
// a worker would and cancels them in each state.
func TestCancelOnlyWhileNoWorkerHoldsTheOrder(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	ctx := context.Background()
	tests := []struct {
		name string
		// move plays the worker on the claimed order.
		move func(t *testing.T, claim emq.Claim)
		// status is what GET shows before the cancel.
		status string
		// canceled is whether the cancel succeeds; otherwise it is a 409
		// naming status.
		canceled bool
	}{
		{"active", func(*testing.T, emq.Claim) {}, "active", false},
		{"waiting for a retry", func(t *testing.T, claim emq.Claim) {
			retried, err := f.queue.Retry(ctx, claim.ID, claim.Token, errors.New("matcher unreachable"), emq.DefaultRetryPolicy)
			if err != nil || retried.Dead {
				t.Fatalf("retry: %+v, %v", retried, err)
			}
		}, "pending", true},
		{"accepted", func(t *testing.T, claim emq.Claim) {
			if err := f.queue.Complete(ctx, claim.ID, claim.Token); err != nil {
				t.Fatal(err)
			}
		}, "accepted", false},
		{"failed", func(t *testing.T, claim emq.Claim) {
			if err := f.queue.Bury(ctx, claim.ID, claim.Token, errors.New("payload unreadable")); err != nil {
				t.Fatal(err)
			}
		}, "failed", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each case leaves nothing pending, so the claim takes this order.
			id := f.placeNew(t, f.keys[0], strings.ReplaceAll(tt.name, " ", "-"))
			tt.move(t, f.claim(t, id))
			if read := f.get(t, f.keys[0], id); read.json(t)["status"] != tt.status {
				t.Fatalf("status before the cancel: %s, want %s", read.body, tt.status)
			}

			res := f.cancel(t, f.keys[0], id)
			if tt.canceled {
				if res.status != http.StatusOK || res.json(t)["status"] != "canceled" {
					t.Fatalf("cancel: %d %s, want 200 canceled", res.status, res.body)
				}
				return
			}
			assertNotCancelable(t, res, tt.status)
			if read := f.get(t, f.keys[0], id); read.json(t)["status"] != tt.status {
				t.Errorf("the refused cancel changed the order: %s, want %s", read.body, tt.status)
			}
		})
	}
}

func assertNotCancelable(t *testing.T, res response, status string) {
	t.Helper()
	if res.status != http.StatusConflict {
		t.Fatalf("cancel: %d %s, want 409", res.status, res.body)
	}
	problem := res.json(t)
	if problem["type"] != "urn:ordergate:problem:order-not-cancelable" {
		t.Errorf("problem type %v, want order-not-cancelable", problem["type"])
	}
	if detail, _ := problem["detail"].(string); !strings.Contains(detail, " is "+status+";") {
		t.Errorf("detail %q does not name the status %s", detail, status)
	}
}
