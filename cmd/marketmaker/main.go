// Command marketmaker keeps quotes on both sides of every instrument, so the
// market has liquidity to trade against: a few price levels of limit gtc
// post-only orders around a mid that walks at random inside the band around
// the instrument's reference price, replaced on a timer. It reads the
// instruments from GET /v1/instruments (again every -refresh, so a halt or
// a moved reference is followed), speaks to the gateway through the
// generated client (api/client) with its own API key, and cancels all its
// orders on SIGTERM or SIGINT before it exits.
// Run it with -h for its flags and environment variables.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal cancels the quotes; a second ends the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "marketmaker:", err)
		os.Exit(1)
	}
}
