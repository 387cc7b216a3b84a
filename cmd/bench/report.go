package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func verdict(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}

// markdown is the run's table, printed and written as the Markdown report.
func (r report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ordergate bench, %s, %s, %d CPUs, concurrency %d, %s per load phase\n\n",
		r.Started.Format("2006-01-02 15:04:05Z"), r.GoVersion, r.CPUs, r.Concurrency, r.Duration)

	// A run with -phases leaves the other phases' results empty: their rows
	// are left out, not printed as zeros.
	var targets []string
	target := func(format string, a ...any) { targets = append(targets, fmt.Sprintf(format, a...)) }
	if r.Ceiling.Orders > 0 {
		b.WriteString("| admission | orders/s | p50 ms | p99 ms | p99.9 ms | max ms | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range []loadResult{r.Ceiling, r.HTTPClosed, r.HTTPOpen} {
			name := l.Name
			if l.TargetRate > 0 {
				name += fmt.Sprintf(" (target %.0f/s)", l.TargetRate)
			}
			fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.2f | %.2f | %.2f | %d |\n", name, l.PerSecond, l.P50Ms, l.P99Ms, l.P999Ms, l.MaxMs, l.Errors)
		}
		if len(r.HTTPRounds) > 0 {
			fmt.Fprintf(&b, "\nThe ceiling and the closed loop took turns, %d rounds of %s each; the ratio of the round ranged %.1f%%–%.1f%%.\n",
				len(r.HTTPRounds), r.roundLength(), 100*slices.Min(r.HTTPRounds), 100*slices.Max(r.HTTPRounds))
		}
		if l := r.HTTPOpen; l.Orders > 0 {
			fmt.Fprintf(&b, "\nThe open loop's own lag, inside its latencies: p99 %.2f ms from a request's scheduled time to its release by the generator's ticker, %.2f ms to a sender taking it.\n",
				l.ReleaseP99Ms, l.TakenP99Ms)
		}
		b.WriteString(r.admissionCostMarkdown())
		b.WriteString("\n")
		b.WriteString(r.sweepMarkdown())
		target("| HTTP admission ≥ 45%% of the admit-script ceiling | %.0f / %.0f = %.1f%% | %s |",
			r.HTTPClosed.PerSecond, r.Ceiling.PerSecond, 100*r.HTTPRatio, verdict(r.HTTPRatio >= 0.45))
		target("| p99 ≤ 10 ms at half the peak rate | p99 %.2f ms at %.0f/s | %s |",
			r.HTTPOpen.P99Ms, r.HTTPOpen.PerSecond, verdict(r.HTTPOpen.P99Ms <= 10 && r.HTTPOpen.Errors == 0))
	}
	if r.Replication.Without.Orders > 0 {
		b.WriteString(r.Replication.markdown())
	}
	if q := r.Queue; q.Jobs > 0 {
		b.WriteString(q.markdown())
		target("| emq claim+complete ≥ 2× asynq's processing rate | %.0f / %.0f jobs/s = %.2f× | %s |",
			q.EMQ.Process.PerSecond, q.Asynq.Process.PerSecond, q.ProcessRatio, verdict(q.ProcessRatio >= 2))
	}
	if s := r.Settlement; s.PerSecond > 0 {
		b.WriteString(s.markdown())
		target("| settlement ≥ 30%% of pgbench's TPS | %.0f orders/s / %.0f tps (-c %d) = %.1f%% | %s |",
			s.PerSecond, s.PgbenchTPS, s.PgbenchClients, 100*s.Ratio, verdict(s.Met))
	}
	if len(r.Matching.Runs) > 0 {
		b.WriteString(r.Matching.markdown())
		targets = append(targets, r.Matching.targets()...)
	}
	m := r.Memory
	if m.Jobs > 0 {
		target("| ≤ 400 B of Redis per pending order beyond its payload | %.0f B (%.0f B per job − %.0f B payload, used_memory over %d jobs) | %s |",
			m.PendingBeyondPayload, m.PendingBytes, m.PayloadBytes, m.Jobs, verdict(m.PendingBeyondPayload <= 400))
	}
	for _, rec := range r.Recovery {
		line := fmt.Sprintf("lease %.0f ms + %.0f ms (max of %d jobs; median %.0f ms after death)", rec.LeaseMs, rec.OvershootMs, rec.Jobs, rec.MedianMs)
		if rec.Name == "default" {
			target("| dead worker's jobs claimable within lease + 1 s (default reap interval, %.0f ms here) | %s | %s |", rec.ReapIntervalMs, line, verdict(rec.Met))
			continue
		}
		target("| for reference: the same with the reap interval set to %.0f ms | %s | (%s) |", rec.ReapIntervalMs, line, verdict(rec.Met))
	}
	if ev := r.Events.markdown(); ev != "" {
		b.WriteString(ev)
		targets = append(targets, r.Events.targets()...)
	}
	if tr := r.Tracking; tr.Invalidations > 0 {
		b.WriteString(tr.markdown())
		target("| invalidation p99 ≤ 5 ms, write to the key dropped from the local copy | %.2f ms (p50 %.2f ms) | %s |",
			tr.InvalidationP99, tr.InvalidationP50, verdict(tr.InvalidationP99 <= 5))
	}
	if len(targets) > 0 {
		b.WriteString("| target | measured | verdict |\n|---|---|---|\n")
		b.WriteString(strings.Join(targets, "\n") + "\n")
	}
	if m.Jobs > 0 {
		b.WriteString("\n| Redis memory per order job | bytes |\n|---|---:|\n")
		fmt.Fprintf(&b, "| pending, used_memory delta / job | %.0f |\n", m.PendingBytes)
		fmt.Fprintf(&b, "| pending, MEMORY USAGE: %s | %.0f |\n", m.pendingUsage(), m.UsagePerJob)
		fmt.Fprintf(&b, "| retained finished, used_memory delta / job (record + done index + dedup entry) | %.0f |\n", m.FinishedBytes)
		fmt.Fprintf(&b, "| retained finished beyond payload | %.0f |\n", m.FinishedBeyond)
		fmt.Fprintf(&b, "| retained finished, MEMORY USAGE: finished hash share %.0f + done zset share %.0f | %.0f |\n",
			m.UsageFinished, m.UsageDone, m.UsageFinished+m.UsageDone)
		fmt.Fprintf(&b, "| order payload (JSON) | %.0f |\n", m.PayloadBytes)
		b.WriteString(m.dedupMarkdown())
	}
	b.WriteString(m.Events.markdown())
	b.WriteString(r.Soak.markdown())
	return b.String()
}

// roundLength is how long each load ran in a round of the alternating
// closed loops.
func (r report) roundLength() string {
	total, err := time.ParseDuration(r.Duration)
	if err != nil || len(r.HTTPRounds) == 0 {
		return r.Duration
	}
	return (total / time.Duration(len(r.HTTPRounds))).Round(time.Millisecond).String()
}

// write stores the report as bench-<time>.json and .md under dir, with the
// admission chart (bench-<time>-admission.svg) beside them when there is one.
func (r report) write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	base := filepath.Join(dir, "bench-"+r.Started.Format("20060102T150405Z"))
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".json", append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(base+".md", []byte("# "+r.markdown()), 0o644); err != nil {
		return nil, err
	}
	paths := []string{base + ".json", base + ".md"}
	if len(r.Sweep) > 0 {
		chart := filepath.Join(dir, r.chartFile())
		if err := os.WriteFile(chart, r.admissionChart(), 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, chart)
	}
	return paths, nil
}
