package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ordergate/ordergate/api/client"
	"github.com/ordergate/ordergate/internal/environ"
	"github.com/ordergate/ordergate/internal/jsonlog"
)

type config struct {
	gatewayURL   string
	apiKey       string
	symbols      string
	levels       int
	sizeMultiple int64
	interval     time.Duration
	refresh      time.Duration
	seed         uint64
	cancelWithin time.Duration
	logLevel     slog.Level
}

const usageHeader = `Usage: marketmaker [flags]

Quotes every instrument GET /v1/instruments lists (or those of -symbols):
-levels limit gtc post-only buys below and as many sells above a mid price
that walks at random (seeded, small steps, kept inside half the price band
around the instrument's reference price), on its tick and lot grids. Every
-interval it cancels an instrument's quotes (DELETE /v1/orders?symbol=) and
places new ones; every -refresh it reads the instruments again, so a halted
one is no longer quoted and the band follows the reference. A quote that
would trade on arrival is rejected (post-only), counted and logged. On
SIGTERM or SIGINT it cancels all its orders (DELETE /v1/orders) and exits.
The API key comes from MM_API_KEY only, never a flag, so it does not show in
the process list.

Every flag falls back to the environment variable in parentheses, then to the
default shown.

`

func parseConfig(args []string, getenv func(string) string, output io.Writer) (config, error) {
	env := environ.NewReader(getenv)
	var c config
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(output)
	flags.Usage = func() {
		fmt.Fprint(flags.Output(), usageHeader)
		flags.PrintDefaults()
	}
	flags.StringVar(&c.gatewayURL, "gateway-url", env.String("GATEWAY_URL", "http://127.0.0.1:8080"), "the gateway's base URL (GATEWAY_URL)")
	flags.StringVar(&c.symbols, "symbols", env.String("MM_SYMBOLS", ""),
		"instruments to quote, comma-separated; empty quotes every one GET /v1/instruments lists (MM_SYMBOLS)")
	flags.IntVar(&c.levels, "levels", env.Int("MM_LEVELS", 3), "price levels on each side (MM_LEVELS)")
	sizeMultiple := env.Int("MM_SIZE", 50)
	flags.IntVar(&sizeMultiple, "size", sizeMultiple,
		"each quote's notional at the reference price, in minimum notionals, rounded up to 2 digits and the lot (MM_SIZE)")
	flags.DurationVar(&c.interval, "interval", env.Duration("MM_INTERVAL", 2*time.Second), "how often the quotes are replaced (MM_INTERVAL)")
	flags.DurationVar(&c.refresh, "refresh", env.Duration("MM_REFRESH", 30*time.Second),
		"how often the instruments are read again: status, reference price, band (MM_REFRESH)")
	seed := env.Int("MM_SEED", 1)
	flags.Func("seed", fmt.Sprintf("seed of the reference prices' random walk (MM_SEED) (default %d)", seed), func(s string) error {
		_, err := fmt.Sscan(s, &seed)
		return err
	})
	flags.DurationVar(&c.cancelWithin, "cancel-timeout", env.Duration("MM_CANCEL_TIMEOUT", 5*time.Second),
		"at shutdown, how long canceling the last quotes may take (MM_CANCEL_TIMEOUT)")
	flags.TextVar(&c.logLevel, "log-level", env.Level("LOG_LEVEL", slog.LevelInfo), "debug, info, warn or error (LOG_LEVEL)")
	if err := env.Err(); err != nil {
		return config{}, err
	}
	if err := flags.Parse(args[1:]); err != nil {
		return config{}, err
	}
	if flags.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %v", flags.Args())
	}
	c.apiKey = getenv("MM_API_KEY")
	if c.apiKey == "" {
		return config{}, errors.New("MM_API_KEY is required: the market maker's API key (admin demo prints one as mm_api_key=)")
	}
	if c.interval <= 0 {
		return config{}, fmt.Errorf("-interval must be above zero, got %s", c.interval)
	}
	if c.refresh <= 0 {
		return config{}, fmt.Errorf("-refresh must be above zero, got %s", c.refresh)
	}
	if c.levels < 1 {
		return config{}, fmt.Errorf("-levels must be at least 1, got %d", c.levels)
	}
	if sizeMultiple < 1 {
		return config{}, fmt.Errorf("-size must be at least 1, got %d", sizeMultiple)
	}
	c.sizeMultiple = int64(sizeMultiple)
	if seed < 0 {
		return config{}, fmt.Errorf("-seed must not be negative, got %d", seed)
	}
	c.seed = uint64(seed)
	return c, nil
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	return runWith(ctx, args, getenv, stdout, &http.Client{Timeout: 5 * time.Second})
}

// runWith is run with the HTTP client the generated client sends through:
// tests pass one that checks every exchange against the spec.
func runWith(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer, doer client.HttpRequestDoer) error {
	c, err := parseConfig(args, getenv, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	symbols, err := symbolsOf(c.symbols)
	if err != nil {
		return err
	}
	logger, logDone := jsonlog.ProcessLogger(stdout, c.logLevel, 0)
	defer func() { _ = logDone() }()
	m, err := newMaker(c, symbols, doer, logger)
	if err != nil {
		return err
	}
	if err := m.start(ctx); err != nil {
		return err
	}
	logger.Info("market maker started", "gateway", c.gatewayURL, "symbols", strings.Join(slices.Sorted(maps.Keys(m.quoting)), ","),
		"levels", c.levels, "interval", c.interval.String(), "refresh", c.refresh.String(), "seed", c.seed)
	m.quoteUntil(ctx, c.refresh)
	// The signal ended ctx: the orders are canceled on a context of their
	// own, bounded, so a stuck gateway cannot hold the exit.
	cancelCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cancelWithin)
	defer cancel()
	err = m.cancelEverything(cancelCtx)
	logger.Info("market maker stopped", m.stats.attrs()...)
	if err != nil {
		return fmt.Errorf("at shutdown: %w", err)
	}
	return nil
}

// start reads the instruments, trying again for a few seconds while the
// gateway does not answer. A -symbols entry the gateway does not list is
// an error here, a typo to fix (later it is only logged: a listing may
// change).
func (m *maker) start(ctx context.Context) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = m.refresh(ctx); err == nil || attempt == 10 {
			break
		}
		m.logger.Warn("instruments", "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt) * 200 * time.Millisecond):
		}
	}
	if err != nil {
		return err
	}
	var unknown []string
	for _, symbol := range m.symbols {
		if m.walks[symbol] == nil && !m.listed[symbol] {
			unknown = append(unknown, symbol)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("-symbols: %s not listed by GET /v1/instruments (listed: %s)",
			strings.Join(unknown, ", "), strings.Join(slices.Sorted(maps.Keys(m.listed)), ", "))
	}
	return nil
}
