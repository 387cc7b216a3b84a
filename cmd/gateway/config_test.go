package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/placement"
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

func TestEventStreamCapsConfiguration(t *testing.T) {
	tests := []struct {
		name            string
		args            []string
		env             map[string]string
		perKey, perAddr int
		refused         bool
	}{
		{"defaults", nil, nil, 8, 32, false},
		{"from the environment", nil, map[string]string{"EVENTS_STREAMS_PER_KEY": "2", "EVENTS_STREAMS_PER_ADDRESS": "5"}, 2, 5, false},
		{"uncapped", nil, map[string]string{"EVENTS_STREAMS_PER_KEY": "0", "EVENTS_STREAMS_PER_ADDRESS": "0"}, 0, 0, false},
		{"flags over the environment", []string{"-events-streams-per-key", "3", "-events-streams-per-address", "9"},
			map[string]string{"EVENTS_STREAMS_PER_KEY": "2"}, 3, 9, false},
		{"malformed", nil, map[string]string{"EVENTS_STREAMS_PER_KEY": "a few"}, 0, 0, true},
		{"negative", nil, map[string]string{"EVENTS_STREAMS_PER_ADDRESS": "-1"}, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseWith(tt.args, tt.env)
			if tt.refused {
				if err == nil {
					t.Errorf("accepted %v, want refused", tt.env)
				}
				return
			}
			if err != nil || c.http.EventStreamsPerKey != tt.perKey || c.http.EventStreamsPerAddress != tt.perAddr {
				t.Errorf("per key %d, per address %d, %v; want %d, %d", c.http.EventStreamsPerKey, c.http.EventStreamsPerAddress, err, tt.perKey, tt.perAddr)
			}
		})
	}
}

func TestKeyCacheStaleIfErrorConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    time.Duration
		refused bool
	}{
		{"default", nil, nil, placement.DefaultKeyStaleIfError, false},
		{"from the environment", nil, map[string]string{"KEY_CACHE_STALE_IF_ERROR": "30s"}, 30 * time.Second, false},
		{"off", nil, map[string]string{"KEY_CACHE_STALE_IF_ERROR": "0"}, 0, false},
		{"flag over the environment", []string{"-key-cache-stale-if-error", "2m"}, map[string]string{"KEY_CACHE_STALE_IF_ERROR": "30s"}, 2 * time.Minute, false},
		{"malformed", nil, map[string]string{"KEY_CACHE_STALE_IF_ERROR": "a while"}, 0, true},
		{"negative", nil, map[string]string{"KEY_CACHE_STALE_IF_ERROR": "-1s"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseWith(tt.args, tt.env)
			if tt.refused {
				if err == nil {
					t.Errorf("accepted %v as %s, want refused", tt.env, c.keyStaleIfError)
				}
				return
			}
			if err != nil || c.keyStaleIfError != tt.want {
				t.Errorf("stale-if-error %s, %v; want %s", c.keyStaleIfError, err, tt.want)
			}
		})
	}
}

// A malformed variable once became 0 or a default without a word: a
// REQUEST_TIMEOUT typo started a gateway that timed out every request, and
// MIGRATE=yes turned migrations off. Each is refused at start now.
func TestConfigurationRefusesWhatItCannotRunWith(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		refused bool
	}{
		{"defaults", nil, nil, false},
		{"timeout from the environment", nil, map[string]string{"REQUEST_TIMEOUT": "2s"}, false},
		{"cancel wait", nil, map[string]string{"CANCEL_WAIT": "500ms"}, false},
		{"cancels in PostgreSQL", []string{"-cancel-wait", "0"}, nil, false},
		{"negative cancel wait", nil, map[string]string{"CANCEL_WAIT": "-1s"}, true},
		{"malformed timeout", nil, map[string]string{"REQUEST_TIMEOUT": "soon"}, true},
		{"zero timeout", nil, map[string]string{"REQUEST_TIMEOUT": "0s"}, true},
		{"negative timeout", []string{"-request-timeout", "-1s"}, nil, true},
		{"zero body limit", []string{"-body-limit", "0"}, nil, true},
		{"one-byte body limit", []string{"-body-limit", "1"}, nil, false},
		{"malformed dedup retention", nil, map[string]string{"DEDUP_RETENTION": "a day"}, true},
		{"zero dedup retention", nil, map[string]string{"DEDUP_RETENTION": "0"}, true},
		{"malformed instrument refresh", nil, map[string]string{"INSTRUMENT_REFRESH": "often"}, true},
		{"zero instrument refresh", []string{"-instrument-refresh", "0s"}, nil, true},
		{"malformed shutdown timeout", nil, map[string]string{"SHUTDOWN_TIMEOUT": "10"}, true},
		{"no shutdown wait", nil, map[string]string{"SHUTDOWN_TIMEOUT": "0s"}, false},
		{"malformed log level", nil, map[string]string{"LOG_LEVEL": "verbose"}, true},
		{"log level", nil, map[string]string{"LOG_LEVEL": "warn"}, false},
		{"migrate off", nil, map[string]string{"MIGRATE": "false"}, false},
		{"migrate as a number", nil, map[string]string{"MIGRATE": "0"}, false},
		{"migrate as a word", nil, map[string]string{"MIGRATE": "yes"}, true},
		{"log lines at once", nil, map[string]string{"LOG_FLUSH_INTERVAL": "0"}, false},
		{"negative log flush interval", []string{"-log-flush-interval", "-1s"}, nil, true},
		{"malformed log flush interval", nil, map[string]string{"LOG_FLUSH_INTERVAL": "often"}, true},
		{"event heartbeat", nil, map[string]string{"EVENTS_HEARTBEAT": "5s"}, false},
		{"zero event heartbeat", nil, map[string]string{"EVENTS_HEARTBEAT": "0s"}, true},
		{"the events' retention by its old name", nil, map[string]string{"EVENTS_RETENTION_AGE": "1h"}, true},
		{"the events' count by its old name", nil, map[string]string{"EVENTS_RETENTION_COUNT": "500"}, true},
		{"malformed event heartbeat", []string{"-events-heartbeat", "often"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseWith(tt.args, tt.env)
			if refused := err != nil; refused != tt.refused {
				t.Errorf("config %+v, error %v; want refused %v", c, err, tt.refused)
			}
		})
	}
}

// parseWith parses the gateway's config from args and env, with a database
// URL set (it is required).
func parseWith(args []string, env map[string]string) (config, error) {
	all := map[string]string{"DATABASE_URL": "postgres://x"}
	for k, v := range env {
		all[k] = v
	}
	return parseConfig(append([]string{"gateway"}, args...), envOf(all), io.Discard)
}

// The metrics have a listener of their own, configured as the worker's is.
func TestMetricsAddrConfiguration(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, "127.0.0.1:9090"},
		{"from the environment", nil, map[string]string{"METRICS_ADDR": ":9100"}, ":9100"},
		{"flag over the environment", []string{"-metrics-addr", "127.0.0.1:9200"}, map[string]string{"METRICS_ADDR": ":9100"}, "127.0.0.1:9200"},
		{"empty serves none", []string{"-metrics-addr", ""}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseWith(tt.args, tt.env)
			if err != nil || c.metricsAddr != tt.want {
				t.Errorf("metrics address %q, %v; want %q", c.metricsAddr, err, tt.want)
			}
			if c.addr != "127.0.0.1:8080" {
				t.Errorf("API address %q moved with the metrics'", c.addr)
			}
		})
	}
}

// TestSigningConfiguration: the receive window comes from SIGNATURE_MAX_SKEW
// or its flag and must be positive and at most a minute; the encryption key only from
// SIGNING_KEY_ENCRYPTION_KEY, 32 bytes in hex or base64, and one that does
// not parse stops the gateway rather than leave signed keys unverifiable.
func TestSigningConfiguration(t *testing.T) {
	key := strings.Repeat("ab", 32)
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		wantWindow time.Duration
		wantSealer bool
		refused    bool
	}{
		{"defaults", nil, nil, 5 * time.Second, false, false},
		{"window from the environment", nil, map[string]string{"SIGNATURE_MAX_SKEW": "2s"}, 2 * time.Second, false, false},
		{"window flag over the environment", []string{"-signature-max-skew", "10s"}, map[string]string{"SIGNATURE_MAX_SKEW": "2s"}, 10 * time.Second, false, false},
		{"no window", nil, map[string]string{"SIGNATURE_MAX_SKEW": "0"}, 0, false, true},
		{"a window of a minute", nil, map[string]string{"SIGNATURE_MAX_SKEW": "1m"}, time.Minute, false, false},
		{"a window over a minute", nil, map[string]string{"SIGNATURE_MAX_SKEW": "61s"}, 0, false, true},
		{"a window flag over a minute", []string{"-signature-max-skew", "1h"}, nil, 0, false, true},
		{"a malformed window", nil, map[string]string{"SIGNATURE_MAX_SKEW": "soon"}, 0, false, true},
		{"encryption key in hex", nil, map[string]string{"SIGNING_KEY_ENCRYPTION_KEY": key}, 5 * time.Second, true, false},
		{"encryption key in base64", nil, map[string]string{"SIGNING_KEY_ENCRYPTION_KEY": "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s="}, 5 * time.Second, true, false},
		{"encryption key too short", nil, map[string]string{"SIGNING_KEY_ENCRYPTION_KEY": key[:32]}, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseWith(tt.args, tt.env)
			if tt.refused {
				if err == nil || (tt.env["SIGNATURE_MAX_SKEW"] != "" || len(tt.args) > 0) && !strings.Contains(err.Error(), "SIGNATURE_MAX_SKEW") {
					t.Errorf("%v %v: %v, want refused naming the variable", tt.args, tt.env, err)
				}
				return
			}
			if err != nil || c.http.SignatureSkew != tt.wantWindow || (c.sealer != nil) != tt.wantSealer {
				t.Errorf("window %s, sealer %v, %v; want %s, %v", c.http.SignatureSkew, c.sealer != nil, err, tt.wantWindow, tt.wantSealer)
			}
		})
	}
}

func TestCoherenceRemoteConfiguration(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		remote  bool
		refused bool
	}{
		{name: "default: the remote queue", remote: true},
		{name: "off while earlier workers run", env: map[string]string{"COHERENCE_REMOTE": "false"}},
		{name: "the flag over the environment", args: []string{"-coherence-remote=true"}, env: map[string]string{"COHERENCE_REMOTE": "false"}, remote: true},
		{name: "not a boolean", env: map[string]string{"COHERENCE_REMOTE": "sometimes"}, refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"DATABASE_URL": "postgres://x"}
			for k, v := range tt.env {
				env[k] = v
			}
			c, err := parseConfig(append([]string{"gateway"}, tt.args...), envOf(env), io.Discard)
			if tt.refused {
				if err == nil || !strings.Contains(err.Error(), "COHERENCE_REMOTE") {
					t.Fatalf("err %v, want COHERENCE_REMOTE refused", err)
				}
				return
			}
			if err != nil || c.coherenceRemote != tt.remote {
				t.Fatalf("coherenceRemote %v, %v; want %v", c.coherenceRemote, err, tt.remote)
			}
		})
	}
}
