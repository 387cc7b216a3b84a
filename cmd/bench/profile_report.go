package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// profileMarkdown is the matching runs' profiles as tables, one column per
// run (the statements one table per run), to be pasted into
// docs/performance.md.
func profileMarkdown(runs []matchRun) string {
	var profiled []matchRun
	for _, r := range runs {
		if r.Profile != nil {
			profiled = append(profiled, r)
		}
	}
	if len(profiled) == 0 {
		return ""
	}
	var b strings.Builder
	header := func(first string) {
		b.WriteString("| " + first + " |")
		for _, r := range profiled {
			b.WriteString(" " + r.Name + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---:|", len(profiled)) + "\n")
	}
	row := func(label string, cell func(p *runProfile) string) {
		b.WriteString("| " + label + " |")
		for _, r := range profiled {
			b.WriteString(" " + cell(r.Profile) + " |")
		}
		b.WriteString("\n")
	}
	perOrder := func(p *runProfile, v float64) float64 { return v / float64(max(p.Orders, 1)) }
	perTrade := func(p *runProfile, v float64) float64 { return v / float64(max(p.Trades, 1)) }

	fmt.Fprintf(&b, "**Profile** (`-profile`): the window runs from the workers' start until the coherence queue was drained; every figure is of that window.\n\n")
	header("CPU by process: cores busy on average (CPU µs per order)")
	cores := func(p *runProfile, seconds float64) string {
		return fmt.Sprintf("%.2f (%.0f µs)", seconds/p.CPU.Seconds, 1e6*perOrder(p, seconds))
	}
	row("window seconds; orders; trades", func(p *runProfile) string {
		return fmt.Sprintf("%.2f s; %d; %d", p.CPU.Seconds, p.Orders, p.Trades)
	})
	row("the machine, every process (of its cores)", func(p *runProfile) string {
		all := (p.CPU.MachineBusy + p.CPU.MachineIdle) / p.CPU.Seconds
		return fmt.Sprintf("%.2f of %.1f", p.CPU.MachineBusy/p.CPU.Seconds, all)
	})
	row("PostgreSQL, every process", func(p *runProfile) string {
		if !p.CPU.HasPostgres {
			return "n/a"
		}
		return cores(p, p.CPU.Postgres)
	})
	if len(profiled[0].Profile.CPU.PostgresKinds) > 0 {
		for i, kind := range profiled[0].Profile.CPU.PostgresKinds {
			row("· "+kind.Name, func(p *runProfile) string {
				if i >= len(p.CPU.PostgresKinds) {
					return "n/a"
				}
				return cores(p, p.CPU.PostgresKinds[i].Seconds)
			})
		}
	}
	row("PostgreSQL processes started; exited (seen in the window)", func(p *runProfile) string {
		if !p.CPU.HasPostgres {
			return "n/a"
		}
		return fmt.Sprintf("%d; %d", p.CPU.PostgresStarted, p.CPU.PostgresExited)
	})
	row("the bench process: the workers (settlement, outbox relay, coherence), its polling of the queue", func(p *runProfile) string { return cores(p, p.CPU.Bench) })
	row("· of which Go GC (the runtime's estimate)", func(p *runProfile) string { return cores(p, p.CPU.BenchGC) })
	row("redis-server", func(p *runProfile) string {
		if !p.CPU.HasRedis {
			return "n/a"
		}
		return cores(p, p.CPU.Redis)
	})
	row("other processes on the machine", func(p *runProfile) string { return cores(p, p.CPU.others()) })
	row("idle", func(p *runProfile) string { return fmt.Sprintf("%.2f", p.CPU.MachineIdle/p.CPU.Seconds) })
	row("the bench process's Go heap: allocations; KB; per order (GC cycles)", func(p *runProfile) string {
		return fmt.Sprintf("%.0f; %.1f KB (%d)", perOrder(p, float64(p.GoAllocs.Objects)), perOrder(p, float64(p.GoAllocs.Bytes))/1024, p.GoAllocs.GCCycles)
	})
	b.WriteString("\n")

	b.WriteString(redisCommandsMarkdown(profiled))

	header("writes and work (per order; per trade)")
	row("settlement batches; orders per batch; decided again", func(p *runProfile) string {
		return fmt.Sprintf("%d; %.1f; %.0f", p.Batches.Batches, p.Batches.Orders/float64(max(p.Batches.Batches, 1)), p.Batches.Redecided)
	})
	row("transactions committed (batches, coherence, relay) / order; rolled back", func(p *runProfile) string {
		return fmt.Sprintf("%.3f; %d", perOrder(p, float64(p.Database.Commits)), p.Database.Rollbacks)
	})
	topLevel := func(p *runProfile) (calls int64, ms float64) {
		for _, s := range p.Statements {
			if s.TopLevel {
				calls, ms = calls+s.Calls, ms+s.TotalMs
			}
		}
		return calls, ms
	}
	row("statements run at the top level (deferred triggers at commit included) / order; / trade", func(p *runProfile) string {
		if p.StatementsError != "" {
			return "n/a"
		}
		calls, _ := topLevel(p)
		return fmt.Sprintf("%.2f; %.2f", perOrder(p, float64(calls)), perTrade(p, float64(calls)))
	})
	row("· of which the clients' own (postgres/sql files, BEGIN, COMMIT, SAVEPOINT…) / order", func(p *runProfile) string {
		if p.StatementsError != "" {
			return "n/a"
		}
		var calls int64
		for _, s := range p.Statements {
			if s.TopLevel && (s.File || s.transactionControl()) {
				calls += s.Calls
			}
		}
		return fmt.Sprintf("%.2f", perOrder(p, float64(calls)))
	})
	row("PostgreSQL execution time (top level) µs / order", func(p *runProfile) string {
		if p.StatementsError != "" {
			return "n/a"
		}
		_, ms := topLevel(p)
		return fmt.Sprintf("%.0f", 1000*perOrder(p, ms))
	})
	written := func(p *runProfile) (n int64) {
		for _, t := range p.Tables {
			n += t.written()
		}
		return n
	}
	row("rows written (inserted + updated + deleted) / order; / trade", func(p *runProfile) string {
		n := float64(written(p))
		return fmt.Sprintf("%.2f; %.2f", perOrder(p, n), perTrade(p, n))
	})
	var tables []string
	for _, r := range profiled {
		for _, t := range r.Profile.Tables {
			if !slices.Contains(tables, t.Name) {
				tables = append(tables, t.Name)
			}
		}
	}
	slices.SortFunc(tables, func(a, c string) int {
		return cmp.Or(-cmp.Compare(tableWritten(profiled[0].Profile, a), tableWritten(profiled[0].Profile, c)), strings.Compare(a, c))
	})
	for _, name := range tables {
		row("· "+name+": inserted / updated (HOT) / deleted per order", func(p *runProfile) string {
			for _, t := range p.Tables {
				if t.Name == name {
					s := fmt.Sprintf("%.2f / %.2f (%.2f) / %.2f", perOrder(p, float64(t.Inserted)), perOrder(p, float64(t.Updated)),
						perOrder(p, float64(t.HOTUpdated)), perOrder(p, float64(t.Deleted)))
					if t.SeqScans > 0 {
						s += fmt.Sprintf(", %d seq scans", t.SeqScans)
					}
					return s
				}
			}
			return "0"
		})
	}
	row("WAL bytes / order; full-page images / order (the server's)", func(p *runProfile) string {
		return fmt.Sprintf("%.0f; %.2f", perOrder(p, float64(p.WAL.Bytes)), perOrder(p, float64(p.WAL.FPI)))
	})
	row("WAL syncs / s; commits per sync; ms per sync", func(p *runProfile) string {
		syncs := float64(max(p.WAL.Syncs, 1))
		return fmt.Sprintf("%.0f; %.1f; %.2f", float64(p.WAL.Syncs)/p.Seconds, float64(p.Database.Commits)/syncs, p.WAL.SyncMs/syncs)
	})
	row("blocks hit / read from the OS per order; deadlocks", func(p *runProfile) string {
		return fmt.Sprintf("%.0f / %.2f; %d", perOrder(p, float64(p.Database.BlksHit)), perOrder(p, float64(p.Database.BlksRead)), p.Database.Deadlocks)
	})
	b.WriteString("\n")

	for _, r := range profiled {
		p := r.Profile
		if p.StatementsError != "" {
			fmt.Fprintf(&b, "%s: no pg_stat_statements (%s)\n\n", r.Name, p.StatementsError)
			continue
		}
		_, total := topLevel(p)
		fmt.Fprintf(&b, "| %s: statement (postgres/sql; ↳ inside a trigger or function) | calls / order | mean µs | total ms | µs / order | share | rows / call |\n", r.Name)
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
		const shown = 16
		var restCalls int64
		var restMs float64
		for i, s := range p.Statements {
			if i >= shown {
				if s.TopLevel {
					restCalls, restMs = restCalls+s.Calls, restMs+s.TotalMs
				}
				continue
			}
			name := s.Name
			if !s.TopLevel {
				name = "↳ " + name
			}
			fmt.Fprintf(&b, "| %s | %.2f | %.0f | %.0f | %.0f | %.1f %% | %.1f |\n", strings.ReplaceAll(name, "|", "\\|"),
				perOrder(p, float64(s.Calls)), 1000*s.TotalMs/float64(max(s.Calls, 1)), s.TotalMs, 1000*perOrder(p, s.TotalMs),
				100*s.TotalMs/max(total, 1e-9), float64(s.Rows)/float64(max(s.Calls, 1)))
		}
		if restCalls > 0 {
			fmt.Fprintf(&b, "| %d more (top level) | %.2f | | %.0f | %.0f | %.1f %% | |\n", len(p.Statements)-shown,
				perOrder(p, float64(restCalls)), restMs, 1000*perOrder(p, restMs), 100*restMs/max(total, 1e-9))
		}
		b.WriteString("\n")
	}

	header(fmt.Sprintf("the run's backends (client connections), by what they were doing: on average (share of those in a transaction), sampled every %s", activityInterval))
	var states []string
	for _, r := range profiled {
		for _, s := range r.Profile.Waits.States {
			if !slices.Contains(states, s.Name) {
				states = append(states, s.Name)
			}
		}
	}
	row("samples", func(p *runProfile) string { return fmt.Sprintf("%d", p.Waits.Samples) })
	row("in a transaction", func(p *runProfile) string { return fmt.Sprintf("%.2f", p.Waits.inTransaction()) })
	row("waiting on a heavyweight lock (every Lock: row below)", func(p *runProfile) string {
		sum := 0.0
		for _, s := range p.Waits.States {
			if strings.HasPrefix(s.Name, "Lock: ") {
				sum += s.Backends
			}
		}
		return fmt.Sprintf("%.2f (%.0f %%)", sum, 100*sum/max(p.Waits.inTransaction(), 1e-9))
	})
	for _, name := range states {
		row(name, func(p *runProfile) string {
			for _, s := range p.Waits.States {
				if s.Name == name {
					if !s.InTransaction {
						return fmt.Sprintf("%.2f", s.Backends)
					}
					return fmt.Sprintf("%.2f (%.0f %%)", s.Backends, 100*s.Backends/max(p.Waits.inTransaction(), 1e-9))
				}
			}
			return "0"
		})
	}
	b.WriteString("\n")

	header("a settlement batch's cycle: p50 / p99 ms; seconds summed over the batches (share of the cycle)")
	for _, phase := range []string{"acquire", "read", "decide", "write", "redecide"} {
		row(phase, func(p *runProfile) string {
			for _, ph := range p.Batches.Phases {
				if ph.Name == phase {
					if ph.Count == 0 {
						return "0"
					}
					return fmt.Sprintf("%.2f / %.2f; %.2f s (%.0f %%)", ph.P50Ms, ph.P99Ms, ph.Seconds, 100*ph.Seconds/max(p.Batches.cycleSeconds(), 1e-9))
				}
			}
			return "n/a"
		})
	}
	row("cycle: mean ms; seconds summed; batches in flight on average", func(p *runProfile) string {
		cycle := p.Batches.cycleSeconds()
		return fmt.Sprintf("%.2f; %.2f s; %.2f", 1000*cycle/float64(max(p.Batches.Batches, 1)), cycle, cycle/p.Seconds)
	})
	b.WriteString("\n")
	return b.String()
}

func tableWritten(p *runProfile, name string) int64 {
	for _, t := range p.Tables {
		if t.Name == name {
			return t.written()
		}
	}
	return 0
}

// redisCommandsMarkdown is Redis's commands per order in each run's window,
// one column per run: every command any run called, most calls first in the
// first run.
func redisCommandsMarkdown(profiled []matchRun) string {
	var b strings.Builder
	b.WriteString("| Redis commands (INFO commandstats; a script is one evalsha, its commands under their names) per order (µs per order) |")
	for _, r := range profiled {
		b.WriteString(" " + r.Name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(profiled)) + "\n")
	var names []string
	for _, r := range profiled {
		for _, c := range r.Profile.RedisCommands {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	}
	cell := func(p *runProfile, calls int64, usec float64) string {
		orders := float64(max(p.Orders, 1))
		return fmt.Sprintf("%.2f (%.1f)", float64(calls)/orders, usec/orders)
	}
	b.WriteString("| every command |")
	for _, r := range profiled {
		if r.Profile.RedisError != "" {
			b.WriteString(" n/a |")
			continue
		}
		var calls int64
		var usec float64
		for _, c := range r.Profile.RedisCommands {
			calls, usec = calls+c.Calls, usec+c.Usec
		}
		b.WriteString(" " + cell(r.Profile, calls, usec) + " |")
	}
	b.WriteString("\n")
	for _, name := range names {
		b.WriteString("| · " + name + " |")
		for _, r := range profiled {
			i := slices.IndexFunc(r.Profile.RedisCommands, func(c redisCommand) bool { return c.Name == name })
			if i < 0 {
				b.WriteString(" 0 |")
				continue
			}
			c := r.Profile.RedisCommands[i]
			b.WriteString(" " + cell(r.Profile, c.Calls, c.Usec) + " |")
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	b.WriteString("| the workers' Redis calls by script (a command sent directly: · name) per order |")
	for _, r := range profiled {
		b.WriteString(" " + r.Name + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(profiled)) + "\n")
	var scripts []string
	for _, r := range profiled {
		for name := range r.Profile.WorkerRedisCalls {
			if !slices.Contains(scripts, name) {
				scripts = append(scripts, name)
			}
		}
	}
	first := profiled[0].Profile.WorkerRedisCalls
	slices.SortFunc(scripts, func(a, c string) int { return cmp.Or(cmp.Compare(first[c], first[a]), strings.Compare(a, c)) })
	for _, name := range scripts {
		b.WriteString("| " + name + " |")
		for _, r := range profiled {
			fmt.Fprintf(&b, " %.3f |", float64(r.Profile.WorkerRedisCalls[name])/float64(max(r.Profile.Orders, 1)))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}
