package main

import (
	"io"
	"testing"
)

func TestRateLimitConfiguration(t *testing.T) {
	base := map[string]string{"DATABASE_URL": "postgres://x"}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range base {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	c, err := parseConfig([]string{"gateway"}, envOf(base), io.Discard)
	if err != nil || c.http.RateLimitBurst != 100 || c.http.RateLimitPerSecond != 50 {
		t.Errorf("defaults: burst %d, per second %d, %v; want 100, 50", c.http.RateLimitBurst, c.http.RateLimitPerSecond, err)
	}
	c, err = parseConfig([]string{"gateway"}, envOf(with(map[string]string{"RATE_LIMIT_BURST": "20", "RATE_LIMIT_PER_SECOND": "5"})), io.Discard)
	if err != nil || c.http.RateLimitBurst != 20 || c.http.RateLimitPerSecond != 5 {
		t.Errorf("from the environment: burst %d, per second %d, %v; want 20, 5", c.http.RateLimitBurst, c.http.RateLimitPerSecond, err)
	}
	c, err = parseConfig([]string{"gateway", "-rate-limit-burst", "7", "-rate-limit-per-second", "3"}, envOf(with(map[string]string{"RATE_LIMIT_BURST": "20"})), io.Discard)
	if err != nil || c.http.RateLimitBurst != 7 || c.http.RateLimitPerSecond != 3 {
		t.Errorf("flags over the environment: burst %d, per second %d, %v; want 7, 3", c.http.RateLimitBurst, c.http.RateLimitPerSecond, err)
	}
	if c, err = parseConfig([]string{"gateway"}, envOf(with(map[string]string{"RATE_LIMIT_BURST": "0", "RATE_LIMIT_PER_SECOND": "0"})), io.Discard); err != nil || c.http.RateLimitBurst != 0 {
		t.Errorf("burst 0 turns the limit off: %+v, %v", c.http, err)
	}
	for _, bad := range []map[string]string{
		{"RATE_LIMIT_BURST": "lots"},
		{"RATE_LIMIT_BURST": "-1"},
		{"RATE_LIMIT_PER_SECOND": "0"},
		{"RATE_LIMIT_PER_SECOND": "2.5"},
		{"RATE_LIMIT_BURST": "1000001"},
	} {
		if _, err := parseConfig([]string{"gateway"}, envOf(with(bad)), io.Discard); err == nil {
			t.Errorf("%v accepted, want refused", bad)
		}
	}
}
