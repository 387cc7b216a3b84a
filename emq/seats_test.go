package emq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// takeSeat takes a seat for holder in the sets of limits and returns the
// refusal, nil when it was taken; any other error fails the test.
func takeSeat(t testing.TB, queue *emq.Queue, holder string, ttl time.Duration, limits ...emq.SeatLimit) *emq.NoSeatError {
	t.Helper()
	err := queue.TakeSeat(context.Background(), holder, limits, ttl)
	var refused *emq.NoSeatError
	if errors.As(err, &refused) {
		if !errors.Is(err, emq.ErrNoSeat) {
			t.Errorf("%v does not match ErrNoSeat", err)
		}
		return refused
	}
	if err != nil {
		t.Fatalf("take a seat for %s: %v", holder, err)
	}
	return nil
}

// A set's seats go to the first holders; past them a take is refused,
// naming the full set, and takes nothing in any set. A holder seated
// already is renewed, not counted twice. A seat left is free again, and a
// take spans its sets all or none.
func TestSeatSetsCapTheirHolders(t *testing.T) {
	testserver.Parallel(t)
	queue, rdb := newQueue(t)
	ctx := context.Background()
	key := emq.SeatLimit{Set: "key:k1", Seats: 2}
	address := emq.SeatLimit{Set: "addr:a1", Seats: 3}
	for _, holder := range []string{"s1", "s2"} {
		if refused := takeSeat(t, queue, holder, time.Minute, key, address); refused != nil {
			t.Fatalf("%s: %v, want a seat", holder, refused)
		}
	}
	if refused := takeSeat(t, queue, "s1", time.Minute, key, address); refused != nil {
		t.Errorf("s1 again: %v, want its seat renewed", refused)
	}
	refused := takeSeat(t, queue, "s3", time.Minute, key, address)
	if refused == nil || refused.Limit != key || refused.Held != 2 {
		t.Fatalf("s3 past the key's 2 seats: %+v, want the key's set full with 2", refused)
	}
	if held, _ := rdb.ZCard(ctx, queue.SeatsKey(address.Set)).Result(); held != 2 {
		t.Errorf("the address's set holds %d after a refused take, want 2: all or none", held)
	}
	other := emq.SeatLimit{Set: "key:k2", Seats: 2}
	if refused := takeSeat(t, queue, "s4", time.Minute, other, address); refused != nil {
		t.Fatalf("s4 with another key: %v, want the address's third seat", refused)
	}
	if refused := takeSeat(t, queue, "s5", time.Minute, other, address); refused == nil || refused.Limit != address {
		t.Fatalf("s5: %+v, want the address's set full", refused)
	}
	if err := queue.LeaveSeats(ctx, []emq.Seat{{Set: key.Set, Holder: "s1"}, {Set: address.Set, Holder: "s1"}}); err != nil {
		t.Fatal(err)
	}
	if refused := takeSeat(t, queue, "s5", time.Minute, other, address); refused != nil {
		t.Errorf("s5 once s1 left: %v, want its seat", refused)
	}
	for _, set := range []string{key.Set, address.Set} {
		if k := queue.SeatsKey(set); !strings.HasPrefix(k, "emq:{"+queue.Name()+"}:") {
			t.Errorf("seat set key %q is not under the queue's hash tag", k)
		}
	}
}

// A seat not renewed expires, and a set expires with its newest seat;
// a renewal keeps a seat past its first expiry, and seats a holder again
// whose seat its set lost.
func TestSeatsExpireUnlessRenewed(t *testing.T) {
	queue, rdb := newQueue(t)
	ctx := context.Background()
	limit := emq.SeatLimit{Set: "renewed", Seats: 1}
	const ttl = 300 * time.Millisecond
	if refused := takeSeat(t, queue, "kept", ttl, limit); refused != nil {
		t.Fatal(refused)
	}
	for range 3 {
		time.Sleep(ttl / 3)
		if err := queue.RenewSeats(ctx, []emq.Seat{{Set: limit.Set, Holder: "kept"}}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	if refused := takeSeat(t, queue, "late", ttl, limit); refused == nil {
		t.Fatal("a second holder took the one seat its renewed holder keeps")
	}
	time.Sleep(ttl + 100*time.Millisecond)
	if exists, _ := rdb.Exists(ctx, queue.SeatsKey(limit.Set)).Result(); exists != 0 {
		t.Error("the set outlived its newest seat")
	}
	if refused := takeSeat(t, queue, "late", ttl, limit); refused != nil {
		t.Errorf("after the seat expired: %v, want it free", refused)
	}
	if err := rdb.Del(ctx, queue.SeatsKey(limit.Set)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := queue.RenewSeats(ctx, []emq.Seat{{Set: limit.Set, Holder: "late"}}, ttl); err != nil {
		t.Fatal(err)
	}
	if refused := takeSeat(t, queue, "third", ttl, limit); refused == nil {
		t.Error("a renewal did not seat its holder again after its set was lost")
	}
}

// A renewal names the seats of many holders in many sets at once, past
// one script run's batch.
func TestRenewSeatsInBatches(t *testing.T) {
	testserver.Parallel(t)
	queue, rdb := newQueue(t)
	ctx := context.Background()
	var seats []emq.Seat
	for i := range 1200 {
		seats = append(seats, emq.Seat{Set: fmt.Sprintf("set-%d", i%7), Holder: fmt.Sprintf("h%d", i)})
	}
	if err := queue.RenewSeats(ctx, seats, time.Minute); err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for i := range 7 {
		n, err := rdb.ZCard(ctx, queue.SeatsKey(fmt.Sprintf("set-%d", i))).Result()
		if err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != int64(len(seats)) {
		t.Errorf("%d seats held after renewing %d", total, len(seats))
	}
	if err := queue.LeaveSeats(ctx, seats); err != nil {
		t.Fatal(err)
	}
	if left := testserver.Keys(t, rdb, "emq:{"+queue.Name()+"}:seats:*"); len(left) != 0 {
		t.Errorf("sets left after every seat left: %v", left)
	}
}

// The arguments a seat set refuses, before any round trip.
func TestSeatArgumentsAreChecked(t *testing.T) {
	testserver.Parallel(t)
	queue, _ := newQueue(t)
	ctx := context.Background()
	ok := emq.SeatLimit{Set: "s", Seats: 1}
	for _, tt := range []struct {
		name   string
		holder string
		limits []emq.SeatLimit
		ttl    time.Duration
	}{
		{"no holder", "", []emq.SeatLimit{ok}, time.Second},
		{"no set", "h", nil, time.Second},
		{"a set with braces", "h", []emq.SeatLimit{{Set: "a{b}", Seats: 1}}, time.Second},
		{"no seats", "h", []emq.SeatLimit{{Set: "s", Seats: 0}}, time.Second},
		{"too many seats", "h", []emq.SeatLimit{{Set: "s", Seats: emq.MaxSeats + 1}}, time.Second},
		{"no ttl", "h", []emq.SeatLimit{ok}, 0},
		{"a ttl too long", "h", []emq.SeatLimit{ok}, emq.MaxSeatTTL + time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := queue.TakeSeat(ctx, tt.holder, tt.limits, tt.ttl)
			if err == nil || errors.Is(err, emq.ErrNoSeat) {
				t.Errorf("%v, want the arguments refused", err)
			}
		})
	}
}
