package postgres_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/ordergate/ordergate/postgres"
)

// TestOwnedBookIsTheOneTheNextOwnerLoads: after an owner settled 200
// orders in pipelined batches, the book it holds is, order by order and in
// priority, the one the next owner loads from PostgreSQL (the sequences
// aside: the owner's own resting orders carry provisional ones), and the
// next owner's sequences are PostgreSQL's.
func TestOwnedBookIsTheOneTheNextOwnerLoads(t *testing.T) {
	m := newMarket(t)
	names := []string{"#0", "#1", "#2", "#3"}
	accounts := map[string]string{}
	for _, name := range names {
		accounts[name] = m.newCustomer(t)
	}
	placed := randomOrders(rand.New(rand.NewPCG(6, 24)), names, 200)
	for i := range placed {
		placed[i].Account = accounts[placed[i].Account]
	}
	a := owner(t, m, "BTC-USD", 1)
	for i, err := range settleInOrder(t, a, placed) {
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	// Every Settle has returned, but the driver may not have stopped yet:
	// OwnedBook answers only between batches.
	var held postgres.OwnerBook
	waitFor(t, "the owner's driver stops", func() bool {
		var ok bool
		held, ok = a.OwnedBook("BTC-USD")
		return ok
	})
	if held.Orders() == 0 {
		t.Fatalf("the owner holds no orders; want a book")
	}
	if _, ok := a.OwnedBook("ETH-USD"); ok {
		t.Errorf("a book of an instrument the settler does not own")
	}

	b := postgres.NewSettler(m.db, nil, slog.New(slog.DiscardHandler))
	if err := b.TakeOver(context.Background(), "BTC-USD", 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.GiveUp("BTC-USD") })
	loaded, ok := b.OwnedBook("BTC-USD")
	if !ok {
		t.Fatal("the next owner holds no book")
	}
	if held.Digest() != loaded.Digest() || held.Orders() != loaded.Orders() {
		t.Errorf("the owner held %d orders, the next owner loaded %d; digests differ: %v",
			held.Orders(), loaded.Orders(), held.Digest() != loaded.Digest())
	}
	var sequences int
	for _, side := range [][]postgres.RestingOrder{loaded.Bids, loaded.Asks} {
		for _, o := range side {
			var sequence int64
			if err := m.db.QueryRow(context.Background(), `SELECT sequence FROM orders WHERE id = $1`, o.ID).Scan(&sequence); err != nil {
				t.Fatal(err)
			}
			if sequence != o.Sequence {
				t.Errorf("%s: loaded at sequence %d, PostgreSQL %d", o.ID, o.Sequence, sequence)
			}
			sequences++
		}
	}
	if sequences != loaded.Orders() {
		t.Errorf("checked %d sequences of %d orders", sequences, loaded.Orders())
	}
}
