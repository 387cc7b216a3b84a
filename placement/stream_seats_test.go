package placement_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/testkit/testserver"
)

// Streams are capped per API key and per client address, each cap on its
// own (0 leaves it off): past one, a stream is refused naming that cap,
// and holds nothing; a stream that closes frees its seats; with Redis
// down, opening is unavailable.
func TestStreamSeatsCapStreamsPerKeyAndPerAddress(t *testing.T) {
	testserver.Parallel(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		limit   placement.StreamLimit
		streams []placement.StreamSeat // opened in turn; the last is refused
		per     placement.StreamCap
		most    int
	}{
		{"per key", placement.StreamLimit{PerKey: 2, PerAddress: 10},
			[]placement.StreamSeat{{Key: "k1", Address: "a1"}, {Key: "k1", Address: "a2"}, {Key: "k1", Address: "a3"}}, placement.PerKey, 2},
		{"per address", placement.StreamLimit{PerKey: 10, PerAddress: 2},
			[]placement.StreamSeat{{Key: "k1", Address: "a1"}, {Key: "k2", Address: "a1"}, {Key: "k3", Address: "a1"}}, placement.PerAddress, 2},
		{"per address alone", placement.StreamLimit{PerAddress: 1},
			[]placement.StreamSeat{{Key: "k1", Address: "a1"}, {Key: "k1", Address: "a1"}}, placement.PerAddress, 1},
		{"per key alone", placement.StreamLimit{PerKey: 1},
			[]placement.StreamSeat{{Key: "k1", Address: "a1"}, {Key: "k1", Address: "a2"}}, placement.PerKey, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, queue, server := placerOnRedis(t)
			seats := placement.NewStreamSeats(queue)
			for i := range tt.streams {
				tt.streams[i].ID = fmt.Sprintf("stream-%d", i)
			}
			last := len(tt.streams) - 1
			for _, stream := range tt.streams[:last] {
				if err := seats.Open(ctx, stream, tt.limit); err != nil {
					t.Fatalf("open %+v: %v", stream, err)
				}
			}
			err := seats.Open(ctx, tt.streams[last], tt.limit)
			var refused *placement.TooManyStreamsError
			if !errors.As(err, &refused) || !errors.Is(err, placement.ErrTooManyStreams) || refused.Per != tt.per || refused.Most != tt.most {
				t.Fatalf("open past the cap: %v, want refused per %s at %d", err, tt.per, tt.most)
			}
			if err := seats.Renew(ctx, tt.streams[:last], tt.limit); err != nil {
				t.Fatal(err)
			}
			if err := seats.Close(ctx, tt.streams[0], tt.limit); err != nil {
				t.Fatal(err)
			}
			if err := seats.Open(ctx, tt.streams[last], tt.limit); err != nil {
				t.Errorf("open once one closed: %v", err)
			}
			server.Single(t, "stops Redis").Stop(t)
			if err := seats.Open(ctx, placement.StreamSeat{ID: "down", Key: "k9", Address: "a9"}, tt.limit); !errors.Is(err, orders.ErrUnavailable) {
				t.Errorf("open with Redis down: %v, want unavailable", err)
			}
		})
	}
	// No cap: no seat, no round trip.
	if err := placement.NewStreamSeats(nil).Open(ctx, placement.StreamSeat{ID: "s", Key: "k", Address: "a"}, placement.StreamLimit{}); err != nil {
		t.Errorf("open without caps: %v", err)
	}
}
