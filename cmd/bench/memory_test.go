package main

import (
	"strings"
	"testing"
)

// The dedup table shows each queue's figures, and is left out when the
// measurement did not run.
func TestDedupMarkdown(t *testing.T) {
	m := memoryResult{
		OrderDedup:     dedupResult{Jobs: 1000, RetentionHours: 24, HeldHours: 36.0167, BytesPerJob: 124.2, UsagePerJob: 114.5, PerJobPerHour: 186.4},
		CoherenceDedup: dedupResult{Jobs: 1000, RetentionHours: 1.0 / 6, HeldHours: 16.0 / 60, BytesPerJob: 107.9, UsagePerJob: 98.5, PerJobPerHour: 172.6},
	}
	table := m.dedupMarkdown()
	for _, want := range []string{
		"| dedup retention R, hours | 24 | 0.167 |",
		"| a key held at most (R + R/2 + 1 min), hours | 36 | 0.267 |",
		"| B per job, used_memory delta / job | 124 | 108 |",
		"per hour of retention** (used_memory × held / R) | 186 | 173 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if got := (memoryResult{}).dedupMarkdown(); got != "" {
		t.Errorf("without the measurement: %q, want nothing", got)
	}
}
