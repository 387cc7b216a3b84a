package chaos

import (
	"testing"

	"github.com/govalues/decimal"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// TestBookComparisonsSeeEveryDifference: the live check (Digest)
// and the fresh owner's check (bookDifferences) each report a book that
// differs from PostgreSQL's in any field they claim to compare; sequences
// only the fresh owner's.
func TestBookComparisonsSeeEveryDifference(t *testing.T) {
	dec := func(s string) decimal.Decimal { return must(orders.ParseExact(s)) }
	base := postgres.RestingOrder{ID: "ORD_1", Account: "acc_a", Side: orders.Buy, Price: dec("100"),
		Remaining: dec("1"), Hold: dec("100"), Sequence: 7}
	other := base
	other.ID, other.Price, other.Sequence = "ORD_2", dec("99"), 8
	want := postgres.OwnerBook{Symbol: "BTC-USD", Bids: []postgres.RestingOrder{base, other}}
	for _, tc := range []struct {
		name             string
		change           func(b *postgres.OwnerBook)
		digest, withSeqs bool // whether each check must see a difference
	}{
		{"same, trailing zeros", func(b *postgres.OwnerBook) { b.Bids[0].Hold = dec("100.00") }, false, false},
		{"hold", func(b *postgres.OwnerBook) { b.Bids[0].Hold = dec("99") }, true, true},
		{"remaining", func(b *postgres.OwnerBook) { b.Bids[1].Remaining = dec("0.5") }, true, true},
		{"account", func(b *postgres.OwnerBook) { b.Bids[0].Account = "acc_b" }, true, true},
		{"price", func(b *postgres.OwnerBook) { b.Bids[1].Price = dec("98") }, true, true},
		{"priority", func(b *postgres.OwnerBook) { b.Bids[0], b.Bids[1] = b.Bids[1], b.Bids[0] }, true, true},
		{"missing order", func(b *postgres.OwnerBook) { b.Bids = b.Bids[:1] }, true, true},
		{"extra order", func(b *postgres.OwnerBook) {
			b.Asks = []postgres.RestingOrder{{ID: "ORD_3", Side: orders.Sell, Price: dec("101")}}
		}, true, true},
		{"side swapped", func(b *postgres.OwnerBook) { b.Asks, b.Bids = b.Bids[1:], b.Bids[:1] }, true, true},
		{"sequence only", func(b *postgres.OwnerBook) { b.Bids[1].Sequence = 1 << 62 }, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := want
			got.Bids = append([]postgres.RestingOrder(nil), want.Bids...)
			tc.change(&got)
			if differs := got.Digest() != want.Digest(); differs != tc.digest {
				t.Errorf("digest differs %v, want %v", differs, tc.digest)
			}
			if diffs := bookDifferences(got, want); (len(diffs) > 0) != tc.withSeqs {
				t.Errorf("differences %q, want some: %v", diffs, tc.withSeqs)
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
