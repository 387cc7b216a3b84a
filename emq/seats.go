package emq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A seat set caps how many holders keep something open at once, across
// every process on the queue's Redis: a seat is taken before the thing is
// opened (TakeSeat), renewed while it stays open (RenewSeats), and left
// when it closes (LeaveSeats). Each seat expires unless renewed, so a
// process that dies leaves seats that run out, not seats held for good.
// Sets are sorted sets under the queue's hash tag (SeatsKey), so a take
// may span several of them in one script run, on a Redis Cluster too.

// MaxSeats is the most seats a set may have.
const MaxSeats = 1_000_000

// MaxSeatTTL is the longest a seat may last without a renewal.
const MaxSeatTTL = 24 * time.Hour

// seatBatch bounds the seats one RenewSeats or LeaveSeats call names.
const seatBatch = 512

// SeatsKey is the Redis key of the queue's named seat set: a sorted set of
// holders scored by when their seat expires (server milliseconds).
func (q *Queue) SeatsKey(set string) string { return q.key("seats:" + set) }

// SeatLimit names a seat set and how many seats it has.
type SeatLimit struct {
	Set   string
	Seats int
}

// Seat is a holder's seat in a set.
type Seat struct {
	Set, Holder string
}

// ErrNoSeat matches every *NoSeatError.
var ErrNoSeat = errors.New("emq: no seat free")

// NoSeatError: every seat of a set was held by others, so no seat was
// taken in any set.
type NoSeatError struct {
	// Limit is the set that was full, Held the seats held in it.
	Limit SeatLimit
	Held  int
}

func (e *NoSeatError) Error() string {
	return fmt.Sprintf("emq: seat set %s has %d of its %d seats held", e.Limit.Set, e.Held, e.Limit.Seats)
}

func (e *NoSeatError) Unwrap() error { return ErrNoSeat }

// TakeSeat takes a seat for holder in every set of limits, or in none
// (a *NoSeatError names the first full set), in one script run on the
// server's clock (lua/seat_take.lua). Each set first drops its seats past
// their expiry. The seats last ttl unless renewed; a holder that had a
// seat has it renewed. Set names and holders are the caller's; they must
// be non-empty, and set names without braces or spaces.
func (q *Queue) TakeSeat(ctx context.Context, holder string, limits []SeatLimit, ttl time.Duration) error {
	if err := validSeatTTL(ttl); err != nil {
		return err
	}
	if holder == "" || len(limits) == 0 {
		return fmt.Errorf("emq: take a seat: want a holder and at least one set")
	}
	keys := make([]string, len(limits))
	args := make([]any, 0, 2+len(limits))
	args = append(args, holder, strconv.FormatInt(ttl.Milliseconds(), 10))
	for i, limit := range limits {
		if err := validSeatSet(limit.Set); err != nil {
			return err
		}
		if limit.Seats < 1 || limit.Seats > MaxSeats {
			return fmt.Errorf("emq: seat set %s: %d seats, want 1 to %d", limit.Set, limit.Seats, MaxSeats)
		}
		keys[i] = q.SeatsKey(limit.Set)
		args = append(args, strconv.Itoa(limit.Seats))
	}
	reply, err := seatTakeScript.Run(ctx, q.client.rdb, keys, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("emq: take a seat in %s: %w", keys[0], err)
	}
	if len(reply) != 3 || reply[1] < 0 || reply[1] > int64(len(limits)) {
		return fmt.Errorf("emq: take a seat in %s: unexpected reply %v", keys[0], reply)
	}
	if reply[0] == 1 {
		return nil
	}
	return &NoSeatError{Limit: limits[reply[1]-1], Held: int(reply[2])}
}

// RenewSeats puts the seats to expire ttl from now, the server's, and
// seats their holders again where a set lost them (a renewal that came
// late, a failover that lost a write): they are held, so they count. A
// call names the seats of many holders and sets at once, a few hundred to
// a script run.
func (q *Queue) RenewSeats(ctx context.Context, seats []Seat, ttl time.Duration) error {
	if err := validSeatTTL(ttl); err != nil {
		return err
	}
	for start := 0; start < len(seats); start += seatBatch {
		batch := seats[start:min(start+seatBatch, len(seats))]
		keys := make([]string, len(batch))
		args := make([]any, 0, 1+len(batch))
		args = append(args, strconv.FormatInt(ttl.Milliseconds(), 10))
		for i, seat := range batch {
			if err := validSeat(seat); err != nil {
				return err
			}
			keys[i] = q.SeatsKey(seat.Set)
			args = append(args, seat.Holder)
		}
		if err := seatRenewScript.Run(ctx, q.client.rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("emq: renew %d seats: %w", len(batch), err)
		}
	}
	return nil
}

// LeaveSeats frees the seats (a seat not held is no error), a few hundred
// to a round trip.
func (q *Queue) LeaveSeats(ctx context.Context, seats []Seat) error {
	for start := 0; start < len(seats); start += seatBatch {
		batch := seats[start:min(start+seatBatch, len(seats))]
		pipe := q.client.rdb.Pipeline()
		for _, seat := range batch {
			if err := validSeat(seat); err != nil {
				return err
			}
			pipe.ZRem(ctx, q.SeatsKey(seat.Set), seat.Holder)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("emq: leave %d seats: %w", len(batch), err)
		}
	}
	return nil
}

func validSeat(seat Seat) error {
	if seat.Holder == "" {
		return fmt.Errorf("emq: seat in %s: want a holder", seat.Set)
	}
	return validSeatSet(seat.Set)
}

func validSeatSet(set string) error {
	if set == "" || strings.ContainsAny(set, "{} ") {
		return fmt.Errorf("emq: seat set %q: want a non-empty name without braces or spaces", set)
	}
	return nil
}

func validSeatTTL(ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > MaxSeatTTL {
		return fmt.Errorf("emq: seat ttl %s: want 1 ms to %s", ttl, MaxSeatTTL)
	}
	return nil
}
