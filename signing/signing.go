// Package signing holds what a signed request is made of, for the gateway
// that verifies it and the client that signs it alike: the headers, the
// message a signature covers, the HMAC-SHA256 over it, the signing secrets
// keys are issued with, and the sealing that keeps those secrets encrypted
// at rest. It does no I/O.
package signing

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/ordergate/ordergate/secret"
)

// The headers of a signed request.
const (
	// HeaderTimestamp carries when the request was signed, in Unix
	// milliseconds as decimal digits.
	HeaderTimestamp = "X-Ordergate-Timestamp"
	// HeaderSignature carries the signature: HMAC-SHA256 of Message under
	// the key's signing secret, as 64 hex digits.
	HeaderSignature = "X-Ordergate-Signature"
)

// SecretPrefix starts every signing secret, so one is not taken for an API
// key (orders.APIKeyPrefix) or the other way round.
const SecretPrefix = "ogs_"

// secretBytes is the random part of a signing secret.
const secretBytes = 32

// NewSecret draws a signing secret: SecretPrefix and 32 random bytes in
// unpadded base64url. Its text, as printed, is the HMAC key, so a client
// signs with the string it was given (openssl dgst -hmac "$SECRET").
func NewSecret() (secret.Text, error) {
	random := make([]byte, secretBytes)
	if _, err := rand.Read(random); err != nil {
		return secret.Text{}, err
	}
	return secret.New(SecretPrefix + base64.RawURLEncoding.EncodeToString(random)), nil
}

// Message is what a signature covers: the timestamp header's text, the
// method, the request target (the path and query exactly as sent in the
// request line, percent-encoding and all: Target) and the body, joined by newlines;
// nothing follows the body, which is empty for a request without one.
func Message(timestamp, method, target string, body []byte) []byte {
	message := make([]byte, 0, len(timestamp)+len(method)+len(target)+len(body)+3)
	message = append(message, timestamp...)
	message = append(message, '\n')
	message = append(message, method...)
	message = append(message, '\n')
	message = append(message, target...)
	message = append(message, '\n')
	return append(message, body...)
}

// Target is the request target a signature covers, given the target of
// the request line as received (http.Request.RequestURI): an origin-form
// target (/path?query) as it is; an absolute-form one
// (http://host/path?query, what a client writes to a forward proxy, which
// may pass it on) without its scheme and authority, so a signer through a
// proxy signs what it would sign without one (url.URL.RequestURI).
// Anything else is left as it is.
func Target(requestURI string) string {
	if strings.HasPrefix(requestURI, "/") {
		return requestURI
	}
	_, rest, absolute := strings.Cut(requestURI, "://")
	if !absolute {
		return requestURI
	}
	// The authority ends at the path, the query or the end.
	switch end := strings.IndexAny(rest, "/?"); {
	case end < 0:
		return "/"
	case rest[end] == '?':
		return "/" + rest[end:]
	default:
		return rest[end:]
	}
}

// Sum is the HMAC-SHA256 of message under the signing secret key.
func Sum(key secret.Text, message []byte) []byte {
	mac := hmac.New(sha256.New, []byte(key.Reveal()))
	mac.Write(message)
	return mac.Sum(nil)
}

// Sign is the signature header's value for a request: Sum of its Message,
// in lowercase hex.
func Sign(key secret.Text, timestamp, method, target string, body []byte) string {
	return hex.EncodeToString(Sum(key, Message(timestamp, method, target, body)))
}

// ParseSignature reads a signature header's value: 64 hex digits, either
// case. ok is false for anything else.
func ParseSignature(text string) (sum []byte, ok bool) {
	if len(text) != 2*sha256.Size || strings.TrimSpace(text) != text {
		return nil, false
	}
	sum, err := hex.DecodeString(text)
	return sum, err == nil
}
