package main

import (
	"maps"
	"testing"
)

// TestParseCostInfo reads the CPU seconds, the reads served, the calls of
// each command and the scripts' time from INFO cpu, stats and commandstats
// as Redis 7 writes them.
func TestParseCostInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:0.000000\r\n" +
		"used_cpu_sys_main_thread:1.400000\r\n\r\n# Stats\r\ntotal_reads_processed:4321\r\n" +
		"total_writes_processed:4000\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=120,usec=5000,usec_per_call=41.67,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hget:calls=360,usec=300,usec_per_call=0.83,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setname:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n"
	cpu, commands, reads, scripts, err := parseCostInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 3.75 {
		t.Errorf("cpu %v s, want 3.75 (user + sys, not the main thread's nor the children's)", cpu)
	}
	if reads != 4321 {
		t.Errorf("reads %d, want 4321", reads)
	}
	if scripts != 5000 {
		t.Errorf("script usec %d, want 5000 (evalsha's)", scripts)
	}
	if want := map[string]int64{"evalsha": 120, "hget": 360, "client|setname": 2}; !maps.Equal(commands, want) {
		t.Errorf("commands %v, want %v", commands, want)
	}
	if _, _, _, _, err := parseCostInfo("# Commandstats\r\n"); err == nil {
		t.Error("INFO without its cpu section was read")
	}
}

// TestCommandsLine lists a side's commands per order, most first.
func TestCommandsLine(t *testing.T) {
	c := sideCost{Orders: 100, Commands: map[string]int64{"hget": 300, "evalsha": 100, "time": 100, "info": 1}}
	if got, want := c.commandsLine(), "5.01 (hget 3.00, evalsha 1.00, time 1.00, info 0.01)"; got != want {
		t.Errorf("commandsLine() = %q, want %q", got, want)
	}
}
