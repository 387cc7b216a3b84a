package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ordergate/ordergate/secret"
	"github.com/ordergate/ordergate/signing"
)

// Signer signs the requests of an API key that requires signed requests:
// it sets the key's Authorization and the signature headers on each
// request, signing its timestamp, method, target and body (see
// signing.Message), and puts the body back for sending. Each request it
// signs gets a later timestamp than the one before, so two identical
// requests in one millisecond are not taken for a replay. A request is
// signed as it is made: a retry made anew is signed anew.
type Signer struct {
	// apiKey and signingSecret print as [secret], so a Signer can be
	// printed or logged whole.
	apiKey, signingSecret secret.Text
	now                   func() time.Time

	mu sync.Mutex
	// last is the last timestamp signed, Unix ms.
	last int64
}

// NewSigner signs with the key's signing secret (ogs_..., as issued).
func NewSigner(apiKey, signingSecret string) *Signer {
	return &Signer{apiKey: secret.New(apiKey), signingSecret: secret.New(signingSecret), now: time.Now}
}

// WithSigner signs every request of the client with the key's secret.
func WithSigner(apiKey, signingSecret string) ClientOption {
	return WithRequestEditorFn(NewSigner(apiKey, signingSecret).Edit)
}

// Edit signs req; it is a RequestEditorFn.
func (s *Signer) Edit(_ context.Context, req *http.Request) error {
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return err
		}
		if err := req.Body.Close(); err != nil {
			return err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	timestamp := strconv.FormatInt(s.timestamp(), 10)
	req.Header.Set("Authorization", "Bearer "+s.apiKey.Reveal())
	req.Header.Set(signing.HeaderTimestamp, timestamp)
	// RequestURI is the target the transport writes in the request line.
	req.Header.Set(signing.HeaderSignature, signing.Sign(s.signingSecret, timestamp, req.Method, req.URL.RequestURI(), body))
	return nil
}

// timestamp is now in Unix ms, or one past the last one signed.
func (s *Signer) timestamp() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = max(s.now().UnixMilli(), s.last+1)
	return s.last
}
