package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/internal/outage"
	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

// An event stream is authorized when it opens, and lives for hours. So the
// gateway keeps its open streams by API key and checks each key again
// through the very lookup a request's authentication makes (the key
// cache), when the cache's answer about it is due: a key revoked while
// the gateway heard the revocation's broadcast is checked at once (the
// cache tells the registry, NotifyRevocations), and one whose broadcast
// this gateway missed, or whose scopes changed, when the cache would
// next ask PostgreSQL anyway, a KEY_CACHE_TTL after it last did. Checking
// every key on a fixed short cadence instead cost ≈ 10 % of a gateway's
// CPU with 1,000 streams open, whatever the order rate
// (docs/performance.md, "Stream key checks"). A key found revoked, or
// without the read scope, has its streams ended at once, each with a last
// comment saying why. The same loop renews the streams' seats
// (placement.StreamSeats), which cap the streams open per key and per
// client address across gateways.

// streamCheckInterval is how often the loop looks for keys due a check
// (and seats due a renewal): a key is checked at most this long after
// its answer is due.
const streamCheckInterval = 100 * time.Millisecond

// streamPollInterval is how often a key is checked when the gateway's
// Authenticator does not say until when its answers stand.
const streamPollInterval = 500 * time.Millisecond

// streamRetryInterval is how soon a key whose check failed (PostgreSQL
// down past the key cache's stale-if-error period) is checked again.
const streamRetryInterval = time.Second

// streamCheckTimeout bounds one round of checks: keys not checked within
// it (PostgreSQL hanging) keep their streams until they are retried.
const streamCheckTimeout = 2 * time.Second

// KeyWatcher is an Authenticator that says until when its answers about
// keys stand, answering several keys with one lookup, and tells of the
// revocations it hears (placement.KeyCache): the gateway then checks its
// streams' keys when their answers are due, those due together at once,
// rather than every key every streamPollInterval.
type KeyWatcher interface {
	AuthenticateAll(ctx context.Context, keys []string) []placement.KeyAnswer
	NotifyRevocations(notify func(hash [sha256.Size]byte))
}

// streamEndGrace is how long an ended stream has to write its last
// comment and return before its connection's write deadline is put in the
// past, which ends a write its client does not read.
const streamEndGrace = 250 * time.Millisecond

// streamSeatTimeout bounds leaving a stream's seats as it ends.
const streamSeatTimeout = time.Second

// streamEnd is why the gateway ended a stream: the problem a request with
// the key would now get, named in the stream's last comment.
type streamEnd struct {
	kind   problemKind
	detail string
}

func (e *streamEnd) Error() string { return e.kind.slug + ": " + e.detail }

var (
	endRevoked   = &streamEnd{kind: kindUnauthorized, detail: "the API key was revoked"}
	endForbidden = &streamEnd{kind: kindForbidden, detail: "the API key no longer has the read scope"}
)

// openStream is one stream the registry follows.
type openStream struct {
	seat placement.StreamSeat
	// end ends the stream's reads with a cause; control reaches its
	// connection's write deadline while it is registered.
	end     context.CancelCauseFunc
	control *http.ResponseController
	// ended is set, under the registry's mu, once the registry ended it.
	ended bool
}

// streamRegistry follows the gateway's open streams by API key.
type streamRegistry struct {
	server *Server

	mu sync.Mutex
	// keys holds each key's open streams, by the key's digest; a key is
	// dropped with its last stream.
	keys map[string]*keyStreams
	// checking is true while the loop runs; it stops when no stream is open.
	checking bool
	// renewed is when the seats were last renewed.
	renewed time.Time

	// seatsMu keeps a renewal, which seats again the streams it names,
	// from falling between a stream leaving the registry and leaving its
	// seats: renewals hold it, leaves share it.
	seatsMu sync.RWMutex
	// failures keeps a failing check or renewal from logging every round.
	failures outage.Sparse

	// watcher is the server's Authenticator when it is a KeyWatcher.
	watcher KeyWatcher
	// wake has the loop look for due keys at once: one was revoked.
	wake chan struct{}
}

type keyStreams struct {
	// key is the API key as sent, for the check's lookup.
	key string
	// due is when the key is next checked: when the answer of its last
	// check stops standing; zero at the loop's next round.
	due time.Time
	// heard counts the revocations of the key heard: a check that began
	// before one does not put the next check off.
	heard   uint64
	streams map[*openStream]struct{}
}

// watch has the registry follow the revocations accounts hears, if it
// tells of them.
func (r *streamRegistry) watch(s *Server, accounts Authenticator) {
	r.server = s
	r.wake = make(chan struct{}, 1)
	if watcher, ok := accounts.(KeyWatcher); ok {
		r.watcher = watcher
		watcher.NotifyRevocations(r.revoked)
	}
}

// revoked has the key with this hash checked at once, if it has a stream
// open here. It runs on the key cache's broadcast loop, so it never waits
// for the check.
func (r *streamRegistry) revoked(hash [sha256.Size]byte) {
	digest := hex.EncodeToString(hash[:keyDigestBytes])
	r.mu.Lock()
	k := r.keys[digest]
	if k != nil {
		k.due = time.Time{}
		k.heard++
	}
	r.mu.Unlock()
	if k != nil {
		select {
		case r.wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// join follows stream, whose key is key, and starts the loop if it is not
// running.
func (r *streamRegistry) join(key string, stream *openStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]*keyStreams{}
	}
	k := r.keys[stream.seat.Key]
	if k == nil {
		k = &keyStreams{key: key, streams: map[*openStream]struct{}{}}
		r.keys[stream.seat.Key] = k
	}
	k.streams[stream] = struct{}{}
	if !r.checking {
		r.checking = true
		r.renewed = time.Now()
		go r.check()
	}
}

// leave stops following stream and frees its seats. After it returns the
// registry no longer touches the stream's connection.
func (r *streamRegistry) leave(stream *openStream) {
	r.seatsMu.RLock()
	defer r.seatsMu.RUnlock()
	r.mu.Lock()
	if k := r.keys[stream.seat.Key]; k != nil {
		delete(k.streams, stream)
		if len(k.streams) == 0 {
			delete(r.keys, stream.seat.Key)
		}
	}
	r.mu.Unlock()
	r.server.closeSeats(stream.seat)
}

// check is the loop: every streamCheckInterval, or at once when a key
// with a stream was revoked, it checks each key whose check is due, ends
// the streams of those revoked or without the read scope, and renews the
// seats when due. It returns once no stream is open.
func (r *streamRegistry) check() {
	ticker := time.NewTicker(streamCheckInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-r.wake:
		}
		r.mu.Lock()
		if len(r.keys) == 0 {
			r.checking = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		var due []dueKey
		for digest, k := range r.keys {
			if !now.Before(k.due) {
				due = append(due, dueKey{digest: digest, streams: k, heard: k.heard})
			}
		}
		renew := now.Sub(r.renewed) >= placement.StreamSeatRenewal
		if renew {
			r.renewed = now
		}
		r.mu.Unlock()
		if len(due) > 0 {
			r.checkKeys(due)
		}
		if renew {
			r.renewSeats()
		}
	}
}

// dueKey is a key due a check, by its digest, with the revocations of it
// heard when the check began.
type dueKey struct {
	digest  string
	streams *keyStreams
	heard   uint64
}

// checkKeys looks the keys up as a request's authentication does (those
// due together with one lookup), ends the streams of a key revoked or
// without the read scope, and sets when each is next checked. A lookup
// that fails (PostgreSQL down past the key cache's stale-if-error period)
// ends nothing: a key cannot be revoked while PostgreSQL is down.
func (r *streamRegistry) checkKeys(keys []dueKey) {
	ctx, cancel := context.WithTimeout(context.Background(), streamCheckTimeout)
	defer cancel()
	for i, answer := range r.authenticate(ctx, keys) {
		k := keys[i]
		var end *streamEnd
		switch err := answer.Err; {
		case errors.Is(err, orders.ErrUnauthenticated):
			end = endRevoked
		case err != nil:
			if r.failures.Allow() {
				r.server.logger.Warn("event streams: an API key could not be checked; its streams go on (logged at most every 10 s)", "err", err)
			}
			answer.Until = time.Now().Add(streamRetryInterval)
		case answer.Caller.Permits(orders.ScopeRead) != nil:
			end = endForbidden
		}
		if end != nil {
			// Checked again next round while its ended streams are on
			// their way out (a cache hit): a stream authorized before the
			// change that joins them meanwhile ends too, not a ttl later.
			answer.Until = time.Time{}
		}
		r.mu.Lock()
		if r.keys[k.digest] == k.streams && k.streams.heard == k.heard {
			k.streams.due = answer.Until
		}
		r.mu.Unlock()
		if end != nil {
			r.end(k.digest, end)
		}
	}
}

// authenticate checks keys, and says until when each answer stands.
func (r *streamRegistry) authenticate(ctx context.Context, keys []dueKey) []placement.KeyAnswer {
	if r.watcher != nil {
		plain := make([]string, len(keys))
		for i, k := range keys {
			plain[i] = k.streams.key
		}
		return r.watcher.AuthenticateAll(ctx, plain)
	}
	answers := make([]placement.KeyAnswer, len(keys))
	for i, k := range keys {
		answers[i].Caller, answers[i].Err = r.server.accounts.Authenticate(ctx, k.streams.key)
		answers[i].Until = time.Now().Add(streamPollInterval)
	}
	return answers
}

// end ends every stream of the key with the digest, for why.
func (r *streamRegistry) end(digest string, why *streamEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[digest]
	if k == nil {
		return
	}
	for stream := range k.streams {
		if stream.ended {
			continue // ended by an earlier round, and not gone yet
		}
		stream.ended = true
		stream.end(why)
		r.server.metrics.streamsEnded.WithLabelValues(why.kind.slug).Inc()
		// A stream blocked writing to a client that reads nothing would
		// not see its end before the write's own deadline: put that in
		// the past, if the stream is still open once it had time to end.
		time.AfterFunc(streamEndGrace, func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			if k := r.keys[digest]; k != nil {
				if _, open := k.streams[stream]; open {
					_ = stream.control.SetWriteDeadline(time.Now())
				}
			}
		})
	}
}

// renewSeats renews the seats of every open stream.
func (r *streamRegistry) renewSeats() {
	if r.server.streamSeats == nil {
		return
	}
	r.seatsMu.Lock()
	defer r.seatsMu.Unlock()
	r.mu.Lock()
	var seats []placement.StreamSeat
	for _, k := range r.keys {
		for stream := range k.streams {
			seats = append(seats, stream.seat)
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), streamCheckTimeout)
	defer cancel()
	if err := r.server.streamSeats.Renew(ctx, seats, r.server.streamLimit()); err != nil && r.failures.Allow() {
		r.server.logger.Warn("event streams: their seats were not renewed; a seat not renewed for 15 s expires (logged at most every 10 s)", "streams", len(seats), "err", err)
	}
}

// streamLimit is the caps of a key's and an address's open streams.
func (s *Server) streamLimit() placement.StreamLimit {
	return placement.StreamLimit{PerKey: s.config.EventStreamsPerKey, PerAddress: s.config.EventStreamsPerAddress}
}

// openSeats takes the stream's seats; a cap met is a too-many-streams
// refusal, counted.
func (s *Server) openSeats(c echo.Context, seat placement.StreamSeat) error {
	if s.streamSeats == nil {
		return nil
	}
	err := s.streamSeats.Open(c.Request().Context(), seat, s.streamLimit())
	var refused *placement.TooManyStreamsError
	if errors.As(err, &refused) {
		s.metrics.streamsRefused.WithLabelValues(string(refused.Per)).Inc()
		c.Response().Header().Set("Retry-After", retryAfterTooManyStreams)
	}
	return err
}

// retryAfterTooManyStreams is when a stream refused for its caps may try
// again: a seat left by a stream that ended is free at once, one left by
// a gateway that stopped within a renewal or so.
const retryAfterTooManyStreams = "5"

// closeSeats frees a stream's seats as it ends, whatever ended it.
func (s *Server) closeSeats(seat placement.StreamSeat) {
	if s.streamSeats == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamSeatTimeout)
	defer cancel()
	if err := s.streamSeats.Close(ctx, seat, s.streamLimit()); err != nil {
		s.logger.Warn("event stream: its seats were not left; they expire unrenewed", "err", err)
	}
}
