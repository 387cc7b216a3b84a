package orders

import (
	"crypto/sha256"
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/govalues/decimal"
)

// Fingerprints live in Redis to recognise retries across deploys: these
// values were computed by the first implementation and must never change.
func TestFingerprintIsStable(t *testing.T) {
	d := decimal.MustParse
	tests := []struct {
		name string
		cmd  PlaceCommand
		want string
	}{
		{"limit", PlaceCommand{Account: "ACC_01HZX", ClientOrderID: "c-1", Symbol: "BTC-USD", Side: Buy, Type: Limit,
			Quantity: d("0.010"), Price: d("65000.50")}, "4AjNMN4v-w7bP53HzQycdQ"},
		{"limit, amounts trimmed", PlaceCommand{Account: "ACC_01HZX", ClientOrderID: "c-1", Symbol: "BTC-USD", Side: Buy, Type: Limit,
			Quantity: d("0.01"), Price: d("65000.5")}, "4AjNMN4v-w7bP53HzQycdQ"},
		{"market ignores price", PlaceCommand{Account: "ACC_01HZX", ClientOrderID: "c-2", Symbol: "ETH-USD", Side: Sell, Type: Market,
			Quantity: d("3"), Price: d("123.4")}, "KVfs3OFQl3NYRETwBJ4_qA"},
		{"market", PlaceCommand{Account: "ACC_01HZX", ClientOrderID: "c-2", Symbol: "ETH-USD", Side: Sell, Type: Market,
			Quantity: d("3.000")}, "KVfs3OFQl3NYRETwBJ4_qA"},
		{"zero command", PlaceCommand{}, "0gsxDzKr7mG287a5senO6A"},
		{"non-ASCII, NUL and negative", PlaceCommand{Account: "acct", ClientOrderID: "ünï\x00cødé", Symbol: "X", Side: "buy", Type: "limit",
			Quantity: d("-1.50"), Price: d("0")}, "lH-t2Z7xHTTiZ3gqcdfhKQ"},
		{"unknown type, 19 digits", PlaceCommand{Account: "a", ClientOrderID: "b", Symbol: "c", Side: "sell", Type: "stop",
			Quantity: d("1000000000000000000"), Price: d("9")}, "tWmmdqS2-LsCaGRqEx2QiA"},
		{"extreme scales", PlaceCommand{Account: "ACC", ClientOrderID: "x", Symbol: "SOL-USD", Side: Buy, Type: Limit,
			Quantity: d("0.000000000000000001"), Price: d("9999999999999999999")}, "m5FF4E-OYykzdDdHCBkPMg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cmd.Fingerprint(); got != tt.want {
				t.Errorf("Fingerprint() = %q, want %q", got, tt.want)
			}
		})
	}
}

// firstFingerprint is the first implementation of Fingerprint, kept as the
// reference its replacement must agree with.
func firstFingerprint(c PlaceCommand) string {
	price := ""
	if c.Type == Limit {
		price = c.Price.Trim(0).String()
	}
	canonical := strings.Join([]string{
		"place/1", c.Account, c.ClientOrderID, c.Symbol, string(c.Side), string(c.Type),
		c.Quantity.Trim(0).String(), price,
	}, "\x00")
	sum := sha256.Sum256([]byte(canonical))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

func TestFingerprintMatchesTheFirstImplementation(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>32))
	for range 20000 {
		cmd := PlaceCommand{
			Account:       randomString(rng),
			ClientOrderID: randomString(rng),
			Symbol:        randomString(rng),
			Side:          []Side{Buy, Sell, Side(randomString(rng))}[rng.IntN(3)],
			Type:          []OrderType{Limit, Market, OrderType(randomString(rng))}[rng.IntN(3)],
			Quantity:      randomDecimal(rng),
			Price:         randomDecimal(rng),
		}
		if rng.IntN(50) == 0 {
			// Longer than Fingerprint's stack buffer.
			cmd.ClientOrderID = strings.Repeat(cmd.ClientOrderID+"x", 300)
		}
		if got, want := cmd.Fingerprint(), firstFingerprint(cmd); got != want {
			t.Fatalf("Fingerprint() = %q, first implementation %q\ncommand: %#v", got, want, cmd)
		}
	}
}

// BenchmarkFingerprint compares Fingerprint with its first implementation;
// read the ratio between the sub-benchmarks.
func BenchmarkFingerprint(b *testing.B) {
	cmd := PlaceCommand{Account: "ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", ClientOrderID: "client-order-0001", Symbol: "BTC-USD",
		Side: Buy, Type: Limit, Quantity: decimal.MustParse("0.015"), Price: decimal.MustParse("65000.50")}
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = firstFingerprint(cmd)
		}
	})
	b.Run("current", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = cmd.Fingerprint()
		}
	})
}
