package environ_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/internal/environ"
)

func TestReader(t *testing.T) {
	env := map[string]string{
		"TEXT": "hello", "COUNT": "12", "BAD_COUNT": "12.5", "WAIT": "1m30s", "BAD_WAIT": "90",
		"ON": "false", "BAD_ON": "yes", "LEVEL": "warn", "BAD_LEVEL": "loud", "OLD": "1h",
	}
	r := environ.NewReader(func(name string) string { return env[name] })
	tests := []struct {
		name      string
		got, want any
	}{
		{"TEXT", r.String("TEXT", "x"), "hello"},
		{"unset text", r.String("NONE", "x"), "x"},
		{"COUNT", r.Int("COUNT", 1), 12},
		{"unset count", r.Int("NONE", 1), 1},
		{"BAD_COUNT gives the fallback", r.Int("BAD_COUNT", 1), 1},
		{"WAIT", r.Duration("WAIT", time.Second), 90 * time.Second},
		{"BAD_WAIT gives the fallback", r.Duration("BAD_WAIT", time.Second), time.Second},
		{"ON", r.Bool("ON", true), false},
		{"BAD_ON gives the fallback", r.Bool("BAD_ON", true), true},
		{"LEVEL", r.Level("LEVEL", slog.LevelInfo), slog.LevelWarn},
		{"BAD_LEVEL gives the fallback", r.Level("BAD_LEVEL", slog.LevelInfo), slog.LevelInfo},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	r.Removed("OLD", "set NEW instead")
	r.Removed("NONE", "set NEW instead")
	err := r.Err()
	if err == nil {
		t.Fatal("Err: nil, want the four variables that did not parse and the one removed")
	}
	var named []string
	for _, line := range strings.Split(err.Error(), "\n") {
		name, _, _ := strings.Cut(line, "=")
		named = append(named, name)
	}
	if want := []string{"BAD_COUNT", "BAD_WAIT", "BAD_ON", "BAD_LEVEL", "OLD"}; !slices.Equal(named, want) {
		t.Errorf("Err names %v, want %v (%q)", named, want, err)
	}
	if !strings.Contains(err.Error(), `OLD="1h": no longer read; set NEW instead`) {
		t.Errorf("Err does not say OLD is no longer read: %q", err)
	}
	if err := environ.NewReader(func(string) string { return "" }).Err(); err != nil {
		t.Errorf("Err with nothing set: %v, want nil", err)
	}
}
