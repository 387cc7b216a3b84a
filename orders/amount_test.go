package orders

import (
	"errors"
	"strings"
	"testing"
)

func TestParseAmount(t *testing.T) {
	tests := []struct {
		in      string
		want    string // the exact value; empty when refused
		refusal string // part of the reason when refused
	}{
		{in: "1", want: "1"},
		{in: "0.015", want: "0.015"},
		{in: "0.010", want: "0.010"},
		{in: "50000.00", want: "50000.00"},
		{in: "0", want: "0"},
		{in: "123456789.123456789", want: "123456789.123456789"},
		{in: "", refusal: "empty"},
		{in: "-1", refusal: "sign"},
		{in: "+1", refusal: "sign"},
		{in: "1e5", refusal: "exponent"},
		{in: "1E-2", refusal: "exponent"},
		{in: "01", refusal: "leading zero"},
		{in: "00.5", refusal: "leading zero"},
		{in: ".5", refusal: "before the decimal point"},
		{in: "1.", refusal: "after the decimal point"},
		{in: "1.2.3", refusal: "character"},
		{in: " 1", refusal: "character"},
		{in: "1,5", refusal: "character"},
		{in: "NaN", refusal: "character"},
		{in: "Infinity", refusal: "character"},
		{in: "0x10", refusal: "character"},
		{in: "1_000", refusal: "character"},
		{in: "1234567890.1234567890", refusal: "digits"},
		{in: "0.0000000000000000001", refusal: "digits"},
		{in: "12345678901234567890", refusal: "digits"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseAmount(tt.in)
			if tt.refusal != "" {
				var amountErr *AmountError
				if !errors.As(err, &amountErr) || !errors.Is(err, ErrAmount) || !strings.Contains(amountErr.Reason, tt.refusal) {
					t.Fatalf("ParseAmount(%q) = %v, %v; want a refusal about %q", tt.in, got, err, tt.refusal)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("ParseAmount(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
			}
		})
	}
}
