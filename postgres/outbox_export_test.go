package postgres

import "time"

// SetSweepHold sets how long o's sweeps may sit idle while they carry.
func SetSweepHold(o *Outbox, hold time.Duration) { o.sweepHold = hold }
