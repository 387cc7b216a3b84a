package placement

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// The event streams open at once are capped per API key and per client
// address, across every gateway on the orders queue's Redis: each stream
// holds a seat in its key's seat set and in its address's (emq seat sets,
// under the queue's hash tag) from before it opens until it ends. A
// gateway renews the seats of its open streams every StreamSeatRenewal;
// a seat not renewed for StreamSeatTTL (its gateway stopped without
// leaving it) expires, so a crashed gateway's streams count against their
// key for at most that long.

const (
	// StreamSeatTTL is how long a stream's seats last without a renewal.
	StreamSeatTTL = 15 * time.Second
	// StreamSeatRenewal is how often a gateway renews its streams' seats:
	// a third of their ttl, so two renewals may fail in a row.
	StreamSeatRenewal = StreamSeatTTL / 3
	// MaxStreamsPerLimit is the largest cap of a StreamLimit.
	MaxStreamsPerLimit = emq.MaxSeats
)

// StreamLimit caps the streams open at once per API key and per client
// address; 0 leaves that one uncapped.
type StreamLimit struct {
	PerKey, PerAddress int
}

// StreamSeat names one stream and what it counts against.
type StreamSeat struct {
	// ID is the stream's own, unique among all gateways' streams.
	ID string
	// Key is its API key's digest, Address its client address as its
	// limits key it (the IPv4 address, the IPv6 /64).
	Key, Address string
}

// ErrTooManyStreams matches every *TooManyStreamsError.
var ErrTooManyStreams = errors.New("placement: too many event streams open")

// TooManyStreamsError refuses a stream past one of its caps; nothing was
// held. Per names the cap: PerKey or PerAddress.
type TooManyStreamsError struct {
	Per  StreamCap
	Most int
}

// StreamCap is which cap a stream met.
type StreamCap string

const (
	PerKey     StreamCap = "key"
	PerAddress StreamCap = "address"
)

func (e *TooManyStreamsError) Error() string {
	return fmt.Sprintf("placement: %d event streams are open for this %s, the most it may have", e.Most, e.Per)
}

func (e *TooManyStreamsError) Unwrap() error { return ErrTooManyStreams }

// StreamSeats holds the seats of event streams on the orders queue.
type StreamSeats struct {
	queue *emq.Queue
}

// NewStreamSeats keeps streams' seats on queue, the orders queue.
func NewStreamSeats(queue *emq.Queue) *StreamSeats { return &StreamSeats{queue: queue} }

// Open takes the stream's seats, one per cap of limit that is set, or
// refuses it with a *TooManyStreamsError; a Redis that does not answer is
// orders.ErrUnavailable (the stream could not be served anyway).
func (s *StreamSeats) Open(ctx context.Context, stream StreamSeat, limit StreamLimit) error {
	limits := seatLimits(stream, limit)
	if len(limits) == 0 {
		return nil
	}
	err := s.queue.TakeSeat(ctx, stream.ID, limits, StreamSeatTTL)
	var full *emq.NoSeatError
	if errors.As(err, &full) {
		per := PerKey
		if full.Limit.Set == addressSeats(stream.Address) {
			per = PerAddress
		}
		return &TooManyStreamsError{Per: per, Most: full.Limit.Seats}
	}
	if err != nil {
		return streamSeatsUnavailable(err)
	}
	return nil
}

// Renew renews the seats the streams hold under limit, in a few round
// trips for them all.
func (s *StreamSeats) Renew(ctx context.Context, streams []StreamSeat, limit StreamLimit) error {
	seats := seatsOf(streams, limit)
	if len(seats) == 0 {
		return nil
	}
	if err := s.queue.RenewSeats(ctx, seats, StreamSeatTTL); err != nil {
		return streamSeatsUnavailable(err)
	}
	return nil
}

// Close frees the seats the stream held under limit.
func (s *StreamSeats) Close(ctx context.Context, stream StreamSeat, limit StreamLimit) error {
	seats := seatsOf([]StreamSeat{stream}, limit)
	if len(seats) == 0 {
		return nil
	}
	if err := s.queue.LeaveSeats(ctx, seats); err != nil {
		return streamSeatsUnavailable(err)
	}
	return nil
}

func streamSeatsUnavailable(err error) error {
	return fmt.Errorf("%w: event stream seats: %w", orders.ErrUnavailable, err)
}

func seatLimits(stream StreamSeat, limit StreamLimit) []emq.SeatLimit {
	var limits []emq.SeatLimit
	if limit.PerKey > 0 {
		limits = append(limits, emq.SeatLimit{Set: keySeats(stream.Key), Seats: limit.PerKey})
	}
	if limit.PerAddress > 0 {
		limits = append(limits, emq.SeatLimit{Set: addressSeats(stream.Address), Seats: limit.PerAddress})
	}
	return limits
}

func seatsOf(streams []StreamSeat, limit StreamLimit) []emq.Seat {
	seats := make([]emq.Seat, 0, 2*len(streams))
	for _, stream := range streams {
		for _, l := range seatLimits(stream, limit) {
			seats = append(seats, emq.Seat{Set: l.Set, Holder: stream.ID})
		}
	}
	return seats
}

func keySeats(key string) string         { return "streams:key:" + key }
func addressSeats(address string) string { return "streams:addr:" + address }
