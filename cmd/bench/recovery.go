package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ordergate/ordergate/emq"
)

// recoveryResult is how soon a dead worker's jobs were claimed by another.
type recoveryResult struct {
	// Name is "default" for the runtime's own reap interval, the target's
	// measurement; the others show what a longer interval costs.
	Name           string  `json:"name"`
	LeaseMs        float64 `json:"lease_ms"`
	ReapIntervalMs float64 `json:"reap_interval_ms"`
	Jobs           int     `json:"jobs"`
	// From the dead worker's claim (its last sign of life: it never
	// heartbeats) to the live worker's claim of the same job.
	MedianMs float64 `json:"median_ms"`
	MaxMs    float64 `json:"max_ms"`
	// Max minus the lease: what the target allows up to 1 s of.
	OvershootMs float64 `json:"overshoot_ms"`
	Met         bool    `json:"met"`
}

const (
	recoveryLease  = time.Second
	recoveryRounds = 3
	recoveryJobs   = 8
)

// measureRecovery runs a live worker (emq Queue.Work with the given reap
// interval; 0 takes the runtime's default for the lease) and, in rounds,
// admits jobs and claims them as a worker that dies at once: it never
// completes them and never heartbeats, as after a SIGKILL. It times each job
// from that claim to the live worker's claim. The live worker is a client of
// its own (dialled to redisURL), as another process's would be: an
// admission made through its client would wake it at once (emq's local
// wake), and it would take the fresh jobs before the dead one could.
func (e *env) measureRecovery(ctx context.Context, redisURL, name string, reap time.Duration, progress func(string, ...any)) (recoveryResult, error) {
	r := recoveryResult{Name: name, LeaseMs: ms(recoveryLease)}
	queue := e.queue.Queue("bench-recovery-" + name + "-" + e.run)
	const kind = "bench.recover"
	if err := queue.Declare(ctx, kind); err != nil {
		return r, err
	}
	live, err := emq.Dial(ctx, redisURL, emq.WithLogger(e.logger))
	if err != nil {
		return r, err
	}
	defer live.Close()
	var mu sync.Mutex
	rescued := map[string]time.Time{}
	arrived := make(chan struct{}, recoveryRounds*recoveryJobs)
	handler := func(_ context.Context, claim emq.Claim) error {
		at := time.Now()
		mu.Lock()
		// Token 1 is a first claim, of a job the dead worker lost the race
		// for; a reclaimed job has token 2.
		if claim.Token > 1 {
			rescued[claim.ID] = at
		}
		mu.Unlock()
		arrived <- struct{}{}
		return nil
	}
	options := emq.WorkerOptions{Concurrency: recoveryJobs, Lease: recoveryLease, ReapInterval: reap, Logger: e.logger}
	r.ReapIntervalMs = ms(reap)
	if reap == 0 {
		r.ReapIntervalMs = ms(min(recoveryLease/4, 500*time.Millisecond)) // the runtime's default, see emq.WorkerOptions
	}
	workCtx, stopWork := context.WithCancel(ctx)
	worked := make(chan error, 1)
	go func() { worked <- live.Queue(queue.Name()).Work(workCtx, handler, options) }()
	defer func() { stopWork(); <-worked }()
	// Let the live worker's idle poll back off to its ceiling, so the dead
	// worker usually wins the race for the fresh jobs.
	time.Sleep(500 * time.Millisecond)

	var recoveries []time.Duration
	for round, attempt := 0, 0; round < recoveryRounds; attempt++ {
		if attempt == 2*recoveryRounds {
			return r, fmt.Errorf("recovery: the live worker took every job first in %d of %d rounds", attempt-round, attempt)
		}
		jobs := make([]emq.Job, recoveryJobs)
		for i := range jobs {
			jobs[i] = emq.Job{ID: fmt.Sprintf("rec-%s-%d-%d", e.run, attempt, i), Kind: kind, Group: "g" + strconv.Itoa(i), Payload: []byte("x")}
		}
		if _, errs := queue.AdmitMany(ctx, jobs); errs[0] != nil {
			return r, errs[0]
		}
		claims, err := queue.Claim(ctx, recoveryJobs, recoveryLease)
		if err != nil {
			return r, err
		}
		died := time.Now()
		if len(claims) == 0 {
			continue
		}
		deadline := time.After(recoveryLease + 10*time.Second)
		for waiting := true; waiting; {
			mu.Lock()
			all := true
			for _, claim := range claims {
				if _, ok := rescued[claim.ID]; !ok {
					all = false
				}
			}
			mu.Unlock()
			if all {
				break
			}
			select {
			case <-arrived:
			case <-deadline:
				waiting = false
			case <-ctx.Done():
				return r, ctx.Err()
			}
		}
		mu.Lock()
		for _, claim := range claims {
			at, ok := rescued[claim.ID]
			if !ok {
				mu.Unlock()
				return r, fmt.Errorf("recovery: job %s not claimed again within %s", claim.ID, recoveryLease+10*time.Second)
			}
			recoveries = append(recoveries, at.Sub(died))
		}
		mu.Unlock()
		round++
		progress("recovery (reap %s): round %d of %d, the dead worker's %d jobs all claimed again", name, round, recoveryRounds, len(claims))
	}
	slices.Sort(recoveries)
	r.Jobs = len(recoveries)
	r.MedianMs = ms(recoveries[len(recoveries)/2])
	r.MaxMs = ms(recoveries[len(recoveries)-1])
	r.OvershootMs = r.MaxMs - r.LeaseMs
	r.Met = recoveries[len(recoveries)-1] <= recoveryLease+time.Second
	return r, nil
}
