package signing_test

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/signing"
)

// TestSignMatchesOpenSSL: the signatures docs/api.md makes with printf
// and openssl dgst -sha256 -hmac, the values below, are the ones Sign
// makes (the README's example runs in gateway's TestREADMESignedCurl).
func TestSignMatchesOpenSSL(t *testing.T) {
	tests := []struct {
		name                 string
		method, target, body string
		want                 string
	}{
		// printf '%s\n%s\n%s\n%s' 1700000000000 POST '/v1/orders?x=1' '{"a":"b"}' | openssl dgst -sha256 -hmac ogs_test-secret -r
		{"with a query and a body", "POST", "/v1/orders?x=1", `{"a":"b"}`, "d05a4d02beb676bd3da83b51917854d50aa2d69fe49e200d7cf142b6831ffd6a"},
		// printf '%s\n%s\n%s\n' 1700000000000 GET /v1/balances | openssl dgst -sha256 -hmac ogs_test-secret -r
		{"without a body", "GET", "/v1/balances", "", "2311a8f1dd9b3a71140aa7c3a4765049c94fc373d82e08948cd62f28987c9e4f"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := signing.Sign(secret.New("ogs_test-secret"), "1700000000000", tt.method, tt.target, []byte(tt.body)); got != tt.want {
				t.Errorf("Sign = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestTargetIsTheOriginForm: a target in absolute-form, as a forward proxy
// receives it, is signed as the path and query a client without the proxy
// sends; every other target as it is.
func TestTargetIsTheOriginForm(t *testing.T) {
	tests := []struct {
		name, requestURI, want string
	}{
		{"origin-form", "/v1/orders?limit=5", "/v1/orders?limit=5"},
		{"origin-form, escaped", "/v1/orders/ORD%5F1", "/v1/orders/ORD%5F1"},
		{"absolute-form", "http://gateway.example/v1/orders?limit=5", "/v1/orders?limit=5"},
		{"absolute-form with a port and user", "https://u:p@gateway.example:8443/v1/balances", "/v1/balances"},
		{"absolute-form, escaped", "http://gateway.example/v1/orders/ORD%5F1?x=%2F", "/v1/orders/ORD%5F1?x=%2F"},
		{"absolute-form without a path", "http://gateway.example?limit=5", "/?limit=5"},
		{"absolute-form, the authority alone", "http://gateway.example", "/"},
		{"asterisk-form", "*", "*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := signing.Target(tt.requestURI); got != tt.want {
				t.Errorf("Target(%q) = %q, want %q", tt.requestURI, got, tt.want)
			}
		})
	}
}

func TestParseSignature(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	tests := []struct {
		name string
		text string
		ok   bool
	}{
		{"lowercase hex", sum, true},
		{"uppercase hex", strings.ToUpper(sum), true},
		{"empty", "", false},
		{"one digit short", sum[1:], false},
		{"one digit long", sum + "a", false},
		{"not hex", strings.Repeat("zz", 32), false},
		{"base64", base64.StdEncoding.EncodeToString(make([]byte, 32)), false},
		{"padded", " " + sum[1:], false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := signing.ParseSignature(tt.text)
			if ok != tt.ok || (ok && hex.EncodeToString(got) != strings.ToLower(tt.text)) {
				t.Errorf("ParseSignature(%q) = %x, %v; want ok %v", tt.text, got, ok, tt.ok)
			}
		})
	}
}

func TestNewSecretIsFreshAndPrefixed(t *testing.T) {
	a, err := signing.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	b, err := signing.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	random, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(a.Reveal(), signing.SecretPrefix))
	if !strings.HasPrefix(a.Reveal(), signing.SecretPrefix) || err != nil || len(random) != 32 || a.Reveal() == b.Reveal() {
		t.Errorf("secrets %q and %q: want %s and 32 random bytes each", a.Reveal(), b.Reveal(), signing.SecretPrefix)
	}
}

func TestParseEncryptionKey(t *testing.T) {
	key := bytes.Repeat([]byte{0xA5}, 32)
	tests := []struct {
		name string
		text string
		ok   bool
	}{
		{"hex", hex.EncodeToString(key), true},
		{"base64", base64.StdEncoding.EncodeToString(key), true},
		{"16 bytes of hex", hex.EncodeToString(key[:16]), false},
		{"33 bytes of base64", base64.StdEncoding.EncodeToString(append(key, 1)), false},
		{"text", "correct horse battery staple", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := signing.ParseEncryptionKey(tt.text)
			if (err == nil) != tt.ok || (tt.ok && !bytes.Equal(got, key)) {
				t.Errorf("ParseEncryptionKey(%q) = %x, %v; want ok %v", tt.text, got, err, tt.ok)
			}
		})
	}
}

func newSealer(t testing.TB, fill byte) *signing.Sealer {
	t.Helper()
	sealer, err := signing.NewSealer(bytes.Repeat([]byte{fill}, signing.EncryptionKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	return sealer
}

// TestSealerOpensOnlyWhatItSealedForTheKey: a sealed secret holds no
// trace of the secret, each sealing draws its own nonce, and it opens only
// under the encryption key and for the API key it was sealed for, unchanged.
func TestSealerOpensOnlyWhatItSealedForTheKey(t *testing.T) {
	const text, keyID = "ogs_the-secret-itself", "KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F1"
	sealer := newSealer(t, 1)
	sealed, err := sealer.Seal(secret.New(text), keyID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sealer.Seal(secret.New(text), keyID)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed, []byte("the-secret")) || bytes.Equal(sealed[:12], again[:12]) {
		t.Fatalf("sealed %x and %x: want no clear text and a nonce each", sealed, again)
	}
	if got, err := sealer.Open(sealed, keyID); err != nil || got.Reveal() != text {
		t.Fatalf("Open = %q, %v; want %q", got.Reveal(), err, text)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	tests := []struct {
		name   string
		sealer *signing.Sealer
		sealed []byte
		keyID  string
	}{
		{"another encryption key", newSealer(t, 2), sealed, keyID},
		{"another API key", sealer, sealed, "KEY_01J9Z7W2X3Y4Z5A6B7C8D9E0F2"},
		{"changed", sealer, tampered, keyID},
		{"cut short", sealer, sealed[:20], keyID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := tt.sealer.Open(tt.sealed, tt.keyID); err == nil {
				t.Errorf("opened %q, want ErrOpen", got.Reveal())
			}
		})
	}
}
