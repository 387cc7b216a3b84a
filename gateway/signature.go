package gateway

import (
	"bytes"
	"crypto/hmac"
	"fmt"
	"io"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/signing"
)

// maxTimestampDigits bounds X-Ordergate-Timestamp: Unix milliseconds have
// 13 digits until the year 2286.
const maxTimestampDigits = 15

// replayRecordSkews is how many times the allowed skew a signature is
// remembered for. Two cover every moment its timestamp is within the skew
// of one clock (from a skew before the timestamp to a skew after it); the
// third covers another gateway's clock up to a skew behind the one that
// accepted it, where the timestamp stays acceptable that much longer. With two,
// a replay sent to a gateway d behind was accepted for d.
const replayRecordSkews = 3

// verifySignature lets through a request of a key that requires signatures
// only when it carries a signature of its timestamp, method, target and
// body under the key's secret (signing.Message), made within the allowed skew
// of now either way, and not received before. The body is read for it, up
// to the body limit, and put back for the handler.
func (s *Server) verifySignature(c echo.Context, caller orders.Caller, digest string) error {
	r := c.Request()
	timestamp, signature := r.Header.Get(signing.HeaderTimestamp), r.Header.Get(signing.HeaderSignature)
	if timestamp == "" || signature == "" {
		return &requestError{kind: kindSignatureRequired, detail: fmt.Sprintf(
			"this API key requires signed requests: send %s and %s (see the API description)", signing.HeaderTimestamp, signing.HeaderSignature)}
	}
	if caller.SigningSecret.IsZero() || s.signatures == nil {
		// Every request of the key meets it until the operator acts, so it
		// is logged sparsely, not once per request.
		if s.unverifiableLogs.Allow() {
			s.requestLogger(c).Error("a key that requires signatures cannot be verified on this gateway; its signed requests are answered 503 (logged at most every 10 s)",
				"account", caller.Account, "err", orders.ErrSigningUnavailable)
		}
		return orders.ErrSigningUnavailable
	}
	sum, ok := signing.ParseSignature(signature)
	if !ok {
		return &requestError{kind: kindSignatureInvalid, detail: signing.HeaderSignature + " must be the HMAC-SHA256 in 64 hex digits"}
	}
	signedAt, ok := parseTimestamp(timestamp)
	if !ok {
		return &requestError{kind: kindSignatureInvalid, detail: signing.HeaderTimestamp + " must be Unix milliseconds in decimal digits"}
	}
	allowed := s.config.SignatureSkew
	if skew := time.Since(signedAt); skew > allowed || skew < -allowed {
		return &requestError{kind: kindSignatureSkewed, detail: fmt.Sprintf(
			"the request was signed at %d, %s from the gateway's clock (%d); sign it within %s of the time it is sent, anew for each retry",
			signedAt.UnixMilli(), skew.Round(time.Millisecond), time.Now().UnixMilli(), allowed)}
	}
	body, err := s.requestBody(c, readBody)
	if err != nil {
		return err
	}
	r = c.Request()
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	// RequestURI is the target as the request line sent it, which is
	// what the client signed, not a form the server parsed and wrote anew;
	// in absolute-form (through a forward proxy) the client signed its
	// path and query.
	target := signing.Target(r.RequestURI)
	if !hmac.Equal(sum, signing.Sum(caller.SigningSecret, signing.Message(timestamp, r.Method, target, body))) {
		return &requestError{kind: kindSignatureInvalid, detail: "the signature does not match the request: sign the timestamp, method, path and query as sent, and body, joined by newlines, with the key's signing secret"}
	}
	first, err := s.signatures.FirstUse(r.Context(), digest, sum, replayRecordSkews*allowed)
	if err != nil {
		return err
	}
	if !first {
		return &requestError{kind: kindSignatureReplayed, detail: "this signature was received before; sign each request, and each retry, anew with a fresh timestamp"}
	}
	return nil
}

// parseTimestamp reads Unix milliseconds written as decimal digits only:
// no sign, no spaces, so the text signed is the one number.
func parseTimestamp(text string) (time.Time, bool) {
	if len(text) == 0 || len(text) > maxTimestampDigits {
		return time.Time{}, false
	}
	var ms int64
	for _, digit := range []byte(text) {
		if digit < '0' || digit > '9' {
			return time.Time{}, false
		}
		ms = ms*10 + int64(digit-'0')
	}
	return time.UnixMilli(ms), true
}
