package gateway_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/gateway"
)

func TestConfigValidate(t *testing.T) {
	with := func(change func(*gateway.Config)) gateway.Config {
		c := gateway.DefaultConfig()
		change(&c)
		return c
	}
	tests := []struct {
		name   string
		config gateway.Config
		want   string // part of the error; "" when valid
	}{
		{"defaults", gateway.DefaultConfig(), ""},
		{"rate limit off", with(func(c *gateway.Config) { c.RateLimitBurst, c.RateLimitPerSecond = 0, 0 }), ""},
		{"largest bucket", with(func(c *gateway.Config) { c.RateLimitBurst, c.RateLimitPerSecond = 1_000_000, 1_000_000 }), ""},
		{"no refill", with(func(c *gateway.Config) { c.RateLimitPerSecond = 0 }), "rate limit"},
		{"negative burst", with(func(c *gateway.Config) { c.RateLimitBurst = -1 }), "rate limit"},
		{"burst too large", with(func(c *gateway.Config) { c.RateLimitBurst = 1_000_001 }), "rate limit"},
		{"refill too large", with(func(c *gateway.Config) { c.RateLimitPerSecond = 1_000_001 }), "rate limit"},
		{"no body", with(func(c *gateway.Config) { c.BodyLimit = 0 }), "body limit"},
		{"no time", with(func(c *gateway.Config) { c.RequestTimeout = 0 }), "request timeout"},
		{"negative time", with(func(c *gateway.Config) { c.RequestTimeout = -time.Second }), "request timeout"},
		{"no signature skew", with(func(c *gateway.Config) { c.SignatureSkew = 0 }), "signature skew"},
		{"a signature skew of a minute", with(func(c *gateway.Config) { c.SignatureSkew = time.Minute }), ""},
		{"a signature skew over a minute", with(func(c *gateway.Config) { c.SignatureSkew = time.Minute + time.Millisecond }), "at most 1m0s"},
		{"event streams uncapped", with(func(c *gateway.Config) { c.EventStreamsPerKey, c.EventStreamsPerAddress = 0, 0 }), ""},
		{"negative streams per key", with(func(c *gateway.Config) { c.EventStreamsPerKey = -1 }), "event streams"},
		{"negative streams per address", with(func(c *gateway.Config) { c.EventStreamsPerAddress = -1 }), "event streams"},
		{"too many streams per key", with(func(c *gateway.Config) { c.EventStreamsPerKey = 1_000_001 }), "event streams"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.config.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate: %v, want an error about %s", err, tt.want)
			}
			// New refuses what Validate refuses: a library caller cannot
			// start a gateway that answers every placement with 503.
			defer func() {
				if recovered := recover(); recovered == nil {
					t.Errorf("New accepted %+v, want a panic", tt.config)
				}
			}()
			gateway.New(gateway.Deps{}, tt.config)
		})
	}
}
