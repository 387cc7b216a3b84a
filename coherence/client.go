package coherence

import (
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/ordergate/ordergate/internal/scriptpipe"
	"github.com/ordergate/ordergate/lua"
)

// Client runs the coherence moves (broadcast, subscribe, versioned cache
// fill) on a Redis connection it shares: it does not own rdb, so closing the
// connection stays with whoever opened it (often an emq.Client, through its
// Redis method).
type Client struct {
	rdb    redis.UniversalClient
	logger *slog.Logger
}

// Option configures New.
type Option func(*Client)

// WithLogger sets the logger of the subscriptions; slog.Default otherwise.
func WithLogger(logger *slog.Logger) Option {
	return func(c *Client) { c.logger = logger }
}

// New runs the coherence moves on rdb.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, logger: slog.Default()}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// cacheFillScript runs EVALSHA first, EVAL when the server answers NOSCRIPT
// (after a restart or SCRIPT FLUSH). It is Repeatable: a second run of a fill
// finds the versions it wrote and writes nothing, and what it answers, the
// entries the hash holds, is the same (only Wrote says false).
var cacheFillScript = scriptpipe.Repeatable(lua.CacheFill)

// cacheFillHashesScript is cacheFillScript over several hashes of one slot,
// Repeatable for the same reason.
var cacheFillHashesScript = scriptpipe.Repeatable(lua.CacheFillHashes)
