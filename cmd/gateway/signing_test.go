package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/migrations"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/signing"
	"github.com/ordergate/ordergate/testkit/apitest"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestGoClientSignsForARealGateway: the Go client's signer (api/client)
// places, reads and cancels an order on a gateway run as main runs it,
// with SIGNING_KEY_ENCRYPTION_KEY opening the key's secret (preloaded, and
// looked up when issued after the start). The same key without the signer,
// or signed with another secret, is refused. A gateway started without the
// encryption key says so in its log and answers the key 503.
func TestGoClientSignsForARealGateway(t *testing.T) {
	ctx := context.Background()
	redisServer := testserver.QueueRedisServer(t)
	database := testserver.Postgres(t)
	if err := migrations.Up(database.URL); err != nil {
		t.Fatal(err)
	}
	encryptionKey := bytes.Repeat([]byte{0x42}, signing.EncryptionKeyBytes)
	sealer, err := signing.NewSealer(encryptionKey)
	if err != nil {
		t.Fatal(err)
	}
	accounts := postgres.NewAccounts(database.Pool(t), postgres.SealSecretsWith(sealer))
	issue := func() orders.IssuedKey {
		t.Helper()
		account, err := accounts.Create(ctx, "signer")
		if err != nil {
			t.Fatal(err)
		}
		issued, err := accounts.IssueKeyFor(ctx, account, orders.KeySpec{Scopes: orders.AllScopes, Signed: true})
		if err != nil {
			t.Fatal(err)
		}
		return issued
	}
	preloaded := issue()
	env := func(addr string) map[string]string {
		return map[string]string{"REDIS_URL": redisServer.URL(), "DATABASE_URL": database.URL, "GATEWAY_ADDR": addr, "METRICS_ADDR": testserver.FreeAddr(t)}
	}
	withKey := env(testserver.FreeAddr(t))
	withKey["SIGNING_KEY_ENCRYPTION_KEY"] = hex.EncodeToString(encryptionKey)
	runGateway(t, withKey)
	learned := issue()
	sdk := func(addr string, opt client.ClientOption) *client.ClientWithResponses {
		t.Helper()
		c, err := client.NewClientWithResponses("http://"+addr, opt,
			client.WithHTTPClient(&http.Client{Transport: apitest.Transport(t, nil, apitest.ValidateRequests())}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, key := range []orders.IssuedKey{preloaded, learned} {
		signed := sdk(withKey["GATEWAY_ADDR"], client.WithSigner(key.Key.Reveal(), key.SigningSecret.Reveal()))
		price := "50000.00"
		placed, err := signed.PlaceOrderWithResponse(ctx, nil, client.PlaceOrderRequest{
			ClientOrderID: "signed-1", Symbol: "BTC-USD", Side: client.SideBuy, Type: client.OrderTypeLimit, Quantity: "0.01000", Price: &price,
		})
		if err != nil || placed.JSON202 == nil {
			t.Fatalf("signed placement: %v %d %s", err, placed.StatusCode(), placed.Body)
		}
		read, err := signed.GetOrderWithResponse(ctx, placed.JSON202.ID, nil)
		if err != nil || read.JSON200 == nil {
			t.Fatalf("signed read: %v %d %s", err, read.StatusCode(), read.Body)
		}
		canceled, err := signed.CancelOrderWithResponse(ctx, placed.JSON202.ID, nil)
		if err != nil || canceled.JSON200 == nil || canceled.JSON200.Status != client.OrderStatusCanceled {
			t.Fatalf("signed cancel: %v %d %s", err, canceled.StatusCode(), canceled.Body)
		}
	}
	refusals := []struct {
		name string
		opt  client.ClientOption
		want client.ProblemType
	}{
		{"unsigned", client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			req.Header.Set("Authorization", "Bearer "+learned.Key.Reveal())
			return nil
		}), client.ProblemTypeSignatureRequired},
		{"another key's secret", client.WithSigner(learned.Key.Reveal(), preloaded.SigningSecret.Reveal()), client.ProblemTypeSignatureInvalid},
	}
	for _, tt := range refusals {
		res, err := sdk(withKey["GATEWAY_ADDR"], tt.opt).ListBalancesWithResponse(ctx, nil)
		if err != nil || res.ApplicationProblemJSON401 == nil || res.ApplicationProblemJSON401.Type != tt.want {
			t.Errorf("%s: %v %d %s, want 401 %s", tt.name, err, res.StatusCode(), res.Body, tt.want)
		}
	}

	withoutAddr := testserver.FreeAddr(t)
	without := runGateway(t, env(withoutAddr))
	if !strings.Contains(without.out.String(), "API keys require signatures whose secrets do not open here") {
		t.Errorf("a gateway without the encryption key logged nothing of it:\n%s", without.out.String())
	}
	res, err := sdk(withoutAddr, client.WithSigner(preloaded.Key.Reveal(), preloaded.SigningSecret.Reveal())).ListBalancesWithResponse(ctx, nil)
	if err != nil || res.StatusCode() != http.StatusServiceUnavailable {
		t.Errorf("a gateway without the encryption key: %v %d %s, want 503", err, res.StatusCode(), res.Body)
	}
}
