package placement_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// TestAMixedJobRefreshesReadsAndFillsEachBalance: one
// job mixes a carried line over an older cached version, a carried line
// twice (older and newer) of one name, a carried line whose field Redis
// lost, one whose field holds a value without a version, and a line
// without amounts; afterwards the cache holds each balance as PostgreSQL
// does.
func TestAMixedJobRefreshesReadsAndFillsEachBalance(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	f := newCoherenceFixture(t)
	events := f.client.Queue(placement.EventsQueuePrefix + "0")
	f.consumer = placement.NewBalanceCoherence(postgres.NewBalances(f.db), f.caches, f.logger, placement.WithBalanceEvents(events))
	account, other := f.newAccount(t), f.newAccount(t)
	for _, asset := range []string{"USD", "BTC", "ETH"} {
		entry := f.depositWithOutbox(t, account, asset, "5.00")
		if _, err := f.consumer.Apply(ctx, entry.Payload); err != nil {
			t.Fatal(err)
		}
	}
	plain := f.depositWithOutbox(t, other, "USD", "1.00") // not applied: a plain line
	move := func(asset string) string {
		var payload string
		err := f.db.QueryRow(ctx, `SELECT payload FROM settlement_move_balances($1::text[], $2::text[], $3::text[],
			$4::numeric[], $5::numeric[], $6::bigint[], $7::text, true)`,
			[]string{orders.BalanceName(account, asset)}, []string{account}, []string{asset}, []string{"0.50"}, []string{"0"}, []int64{1},
			orders.BalancesWriteName).Scan(&payload)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSuffix(payload, "\n")
	}
	usdOld, usdNew := move("USD"), move("USD")
	btc, eth := move("BTC"), move("ETH")
	key := placement.BalanceCacheKey(account)
	if err := f.rdb.HDel(ctx, key, "BTC").Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.rdb.HSet(ctx, key, "ETH", "garbage").Err(); err != nil {
		t.Fatal(err)
	}
	payload := strings.Join([]string{usdNew, btc, plain.Payload, eth, usdOld}, "\n")
	if _, err := f.consumer.Apply(ctx, payload); err != nil {
		t.Fatal(err)
	}
	names := []string{orders.BalanceName(other, "USD")}
	for _, asset := range []string{"USD", "BTC", "ETH"} {
		names = append(names, orders.BalanceName(account, asset))
	}
	f.assertCacheCurrent(t, names)
	// Each balance's last event is PostgreSQL's current row.
	logged, err := events.ReadLog(ctx, account, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]orders.Balance{}
	for _, entry := range logged {
		var balance orders.Balance
		if err := json.Unmarshal(entry.Data, &balance); err != nil {
			t.Fatal(err)
		}
		last[balance.Asset] = balance
	}
	for _, asset := range []string{"USD", "BTC", "ETH"} {
		var version int64
		var available string
		if err := f.db.QueryRow(ctx, `SELECT version, trim_scale(available)::text FROM balances WHERE account_id = $1 AND asset = $2`,
			account, asset).Scan(&version, &available); err != nil {
			t.Fatal(err)
		}
		if got := last[asset]; got.Version != version {
			t.Errorf("%s: the last event carries %+v, PostgreSQL holds version %d of %s", asset, got, version, available)
		}
	}
}
