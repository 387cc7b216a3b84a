package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
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
	interval     time.Duration
	seed         uint64
	cancelWithin time.Duration
	logLevel     slog.Level
}

const usageHeader = `Usage: marketmaker [flags]

Quotes every instrument through the gateway: -levels limit gtc buys below
and as many sells above a reference price that walks at random (seeded,
small steps, kept inside half the instrument's price band), on the tick and
lot grids. Every -interval it cancels its previous quotes and places new
ones; on SIGTERM or SIGINT it cancels them and exits. The API key comes from
MM_API_KEY only, never a flag, so it does not show in the process list.

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
	flags.StringVar(&c.symbols, "symbols", env.String("MM_SYMBOLS", "BTC-USD,ETH-USD,ETH-BTC"),
		"instruments to quote, comma-separated, of those the migrations seed (MM_SYMBOLS)")
	flags.IntVar(&c.levels, "levels", env.Int("MM_LEVELS", 3), "price levels on each side (MM_LEVELS)")
	flags.DurationVar(&c.interval, "interval", env.Duration("MM_INTERVAL", 2*time.Second), "how often the quotes are replaced (MM_INTERVAL)")
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
	instruments, err := instrumentsOf(c.symbols)
	if err != nil {
		return err
	}
	log, logDone := jsonlog.ProcessLogger(stdout, c.logLevel, 0)
	defer func() { _ = logDone() }()
	m, err := newMaker(c, instruments, doer, log)
	if err != nil {
		return err
	}
	log.Info("market maker started", "gateway", c.gatewayURL, "symbols", c.symbols, "levels", c.levels,
		"interval", c.interval.String(), "seed", c.seed)
	m.quoteUntil(ctx)
	// The signal ended ctx: the last quotes are canceled on a context of
	// their own, bounded, so a stuck gateway cannot hold the exit.
	cancelCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cancelWithin)
	defer cancel()
	left := m.cancelAll(cancelCtx)
	log.Info("market maker stopped", "quotes_left", left)
	if left > 0 {
		return fmt.Errorf("%d quotes could not be canceled at shutdown", left)
	}
	return nil
}
