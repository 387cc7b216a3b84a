package main

import (
	"context"
	"flag"
	"io"
	"log/slog"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// run connects to the queue (the protocol fence included) and declares the
// order kind. Claiming and settlement arrive with the worker runtime; until
// then the process holds its connection and waits for a signal.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	redisURL := getenv("REDIS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379/0"
	}
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.SetOutput(stdout)
	flags.StringVar(&redisURL, "redis-url", redisURL, "Redis URL; addr= parameters make it a cluster (REDIS_URL)")
	if err := flags.Parse(args[1:]); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stdout, nil))
	rdb, err := emq.Open(redisURL)
	if err != nil {
		return err
	}
	queueClient, err := emq.Connect(ctx, rdb, emq.WithLogger(log))
	if err != nil {
		rdb.Close()
		return err
	}
	defer queueClient.Close()
	if err := queueClient.Queue(orders.Queue).Declare(ctx, orders.KindPlace); err != nil {
		return err
	}
	log.Info("worker connected; settlement is not built yet, waiting for a signal", "queue", orders.Queue)
	<-ctx.Done()
	log.Info("worker stopped")
	return nil
}
