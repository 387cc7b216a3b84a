package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestGeneratedClientPlacesReadsAndCancelsAnOrder drives the gateway with the client
// generated from api/openapi.yaml, as an SDK user would.
func TestGeneratedClientPlacesReadsAndCancelsAnOrder(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 2)
	ctx := context.Background()
	sdk := func(key string) *client.ClientWithResponses {
		c, err := client.NewClientWithResponses(f.url,
			client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, nil, apitest.ValidateRequests())}),
			client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
				req.Header.Set("Authorization", "Bearer "+key)
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice, bob := sdk(f.keys[0]), sdk(f.keys[1])
	price := "3000.05"
	request := client.PlaceOrderRequest{
		ClientOrderID: "sdk-1", Symbol: "ETH-USD", Side: client.SideSell, Type: client.OrderTypeLimit,
		Quantity: "0.250", Price: &price,
	}
	placed, err := alice.PlaceOrderWithResponse(ctx, nil, request)
	if err != nil {
		t.Fatal(err)
	}
	if placed.StatusCode() != http.StatusAccepted || placed.JSON202 == nil {
		t.Fatalf("place: %d %s", placed.StatusCode(), placed.Body)
	}
	order := *placed.JSON202
	if order.Status != client.OrderStatusPending || order.AccountID != f.accounts[0] || order.Quantity != "0.250" || *order.Price != price {
		t.Errorf("placed order = %+v", order)
	}
	if placed.Headers202 == nil || placed.Headers202.Location != "/v1/orders/"+order.ID {
		t.Errorf("Location header = %+v", placed.Headers202)
	}

	replay, err := alice.PlaceOrderWithResponse(ctx, nil, request)
	if err != nil || replay.StatusCode() != http.StatusOK || replay.JSON200 == nil || replay.JSON200.ID != order.ID {
		t.Fatalf("replay: %v %d %s", err, replay.StatusCode(), replay.Body)
	}

	read, err := alice.GetOrderWithResponse(ctx, order.ID, nil)
	if err != nil || read.JSON200 == nil || read.JSON200.ID != order.ID || read.JSON200.ClientOrderID != "sdk-1" {
		t.Fatalf("get: %v %d %s", err, read.StatusCode(), read.Body)
	}
	hidden, err := bob.GetOrderWithResponse(ctx, order.ID, nil)
	if err != nil || hidden.ApplicationProblemJSON404 == nil {
		t.Fatalf("other account's get: %v %d %s", err, hidden.StatusCode(), hidden.Body)
	}

	notBobs, err := bob.CancelOrderWithResponse(ctx, order.ID, nil)
	if err != nil || notBobs.ApplicationProblemJSON404 == nil {
		t.Fatalf("other account's cancel: %v %d %s", err, notBobs.StatusCode(), notBobs.Body)
	}
	canceled, err := alice.CancelOrderWithResponse(ctx, order.ID, nil)
	if err != nil || canceled.JSON200 == nil || canceled.JSON200.Status != client.OrderStatusCanceled || canceled.JSON200.CanceledAt == nil {
		t.Fatalf("cancel: %v %d %s", err, canceled.StatusCode(), canceled.Body)
	}
	twice, err := alice.CancelOrderWithResponse(ctx, order.ID, nil)
	if err != nil || twice.ApplicationProblemJSON409 == nil || twice.ApplicationProblemJSON409.Type != client.ProblemTypeOrderNotCancelable {
		t.Fatalf("second cancel: %v %d %s", err, twice.StatusCode(), twice.Body)
	}
}
