package gateway

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"
)

// The hand-written matchers accept exactly what these patterns do.
var (
	clientOrderIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
	requestIDPattern     = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	symbolPattern        = regexp.MustCompile(`^[A-Z0-9]{2,10}-[A-Z0-9]{2,10}$`)
)

func TestIdentifierMatchersAgreeWithTheirPatterns(t *testing.T) {
	matchers := []struct {
		name    string
		match   func(string) bool
		pattern *regexp.Regexp
	}{
		{"client order id", func(s string) bool { return idCharacters(s, maxClientOrderID) }, clientOrderIDPattern},
		{"request id", func(s string) bool { return idCharacters(s, maxRequestID) }, requestIDPattern},
		{"symbol", instrumentSymbol, symbolPattern},
	}
	inputs := []string{
		"", "a", "BTC-USD", "btc-usd", "B-USD", "BTC-U", "BTCBTCBTCB-USDUSDUSDU", "BTCBTCBTCBT-USD", "BTC--USD",
		"BTC-USD-ETH", "-BTC", "BTC-", "BT C-USD", "BTC_USD", "client-42:retry.1_A", "a b", "a/b", "réq", "a\x00",
		"a\n", strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("a", 128), strings.Repeat("a", 129),
	}
	const alphabet = "ABZ09az.-_:/ é\x00\xff"
	random := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		var b strings.Builder
		for range random.IntN(24) {
			b.WriteByte(alphabet[random.IntN(len(alphabet))])
		}
		inputs = append(inputs, b.String())
	}
	for _, m := range matchers {
		t.Run(m.name, func(t *testing.T) {
			accepted := 0
			for _, input := range inputs {
				got, want := m.match(input), m.pattern.MatchString(input)
				if got != want {
					t.Errorf("%q: matcher says %v, pattern %s says %v", input, got, m.pattern, want)
				}
				if got {
					accepted++
				}
			}
			if accepted == 0 {
				t.Error("no input was accepted: the comparison shows nothing")
			}
		})
	}
}

// A minted request id is a ULID of the moment it was minted whose ten
// random bytes are all drawn: the id is filled in place, and a byte left
// out would stay zero on every id.
func TestMintedRequestIDsAreULIDsOfTheirMoment(t *testing.T) {
	const workers, each = 4, 500
	before := ulid.Now()
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range each {
				ids[w] = append(ids[w], newRequestID())
			}
		})
	}
	wg.Wait()
	after := ulid.Now()
	seen := make(map[string]bool, workers*each)
	var values [10]map[byte]bool
	for i := range values {
		values[i] = map[byte]bool{}
	}
	for _, id := range slices.Concat(ids...) {
		parsed, err := ulid.ParseStrict(id)
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		if at := parsed.Time(); at < before || at > after {
			t.Errorf("%q is of %d ms, minted between %d and %d", id, at, before, after)
		}
		if seen[id] {
			t.Errorf("%q minted twice", id)
		}
		seen[id] = true
		for i, b := range parsed.Entropy() {
			values[i][b] = true
		}
	}
	for i, v := range values {
		if len(v) < 100 {
			t.Errorf("random byte %d took %d values over %d ids", i, len(v), len(seen))
		}
	}
}
