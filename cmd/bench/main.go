// Command bench measures ordergate on this machine (`make bench`): HTTP
// admission against the real gateway and the bare admit script beside it,
// emq against asynq on the same Redis, settlement and matching in the book
// (one hot instrument, then three) against pgbench on the same PostgreSQL,
// Redis memory per order job and what a sustained rate leaves per hour of
// dedup retention, how soon a dead worker's jobs are claimed again, and,
// with 1,000 event streams open, a sustained open loop over three
// instruments at half the matching rate (placement → decided, commit →
// client) and a load at half the admission peak. Every figure that is
// compared is measured in the same run.
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
	if err := run(ctx, os.Args, os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
