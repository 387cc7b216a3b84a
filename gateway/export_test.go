package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"

	"github.com/ordergate/ordergate/placement"
)

// FollowStream has s's stream registry follow a stream of key, as
// streamEvents does once the stream's request was authenticated, and
// returns a channel closed when the registry ends the stream, and what
// stops following it (the stream's handler returning).
func FollowStream(s *Server, key string) (ended <-chan struct{}, leave func()) {
	ctx, end := context.WithCancelCause(context.Background())
	open := &openStream{seat: placement.StreamSeat{ID: newRequestID(), Key: keyDigest(key)}, end: end,
		control: http.NewResponseController(httptest.NewRecorder())}
	s.streams.join(key, open)
	return ctx.Done(), func() { s.streams.leave(open) }
}
