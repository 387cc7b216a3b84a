// Package cputime reads the CPU time the test process has used, for
// benchmarks that report CPU per operation: a loaded machine stretches wall
// time, but not the CPU the work took.
package cputime

import (
	"syscall"
	"testing"
	"time"
)

// Process is the CPU time the process has used so far, user and system,
// over all its threads. It fails tb if the kernel does not answer.
func Process(tb testing.TB) time.Duration {
	tb.Helper()
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
