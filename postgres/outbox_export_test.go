package postgres

import "time"

// SetSweepHold sets how long o's sweeps may sit idle while they carry, and
// waits for their carries as NewOutbox does for SweepHold.
func SetSweepHold(o *Outbox, hold time.Duration) {
	o.sweepHold, o.carryWait = hold, share(hold, sweepWaitShare)
}

// SetCarryWait sets how long o's sweeps wait for their carries: a wait
// longer than the hold stands for a sweeper stopped mid-carry, whose timers
// cannot fire.
func SetCarryWait(o *Outbox, wait time.Duration) { o.carryWait = wait }

// SweepShutdownGrace bounds what a sweep does once its context is cancelled.
const SweepShutdownGrace = sweepShutdownGrace
