package orders

import (
	"errors"
	"math"
	"testing"
)

func TestFillIDRoundTrips(t *testing.T) {
	for _, n := range []int64{1, 9, 10, 123456789, math.MaxInt64} {
		id := FillID(n)
		if got, err := ParseFillID(id); err != nil || got != n {
			t.Errorf("ParseFillID(%q) = %d, %v; want %d", id, got, err, n)
		}
	}
	for _, bad := range []string{"", "FIL_", "FIL_0", "FIL_-1", "FIL_+1", "FIL_01", "FIL_1.0", "FIL_ 1", "fil_1", "1",
		"TRD_1", "FIL_9223372036854775808", "ORD_01J9Z8K3M4N5P6Q7R8S9T0V1W2"} {
		if _, err := ParseFillID(bad); !errors.Is(err, ErrMalformedFillID) {
			t.Errorf("ParseFillID(%q) = %v, want ErrMalformedFillID", bad, err)
		}
	}
}

func TestSideOpposite(t *testing.T) {
	if Buy.Opposite() != Sell || Sell.Opposite() != Buy {
		t.Errorf("Buy.Opposite() = %s, Sell.Opposite() = %s", Buy.Opposite(), Sell.Opposite())
	}
}
