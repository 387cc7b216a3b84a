package lua

import (
	"embed"
	"regexp"
	"strings"
	"testing"
)

//go:embed *.lua
var files embed.FS

// Every script opens with a header comment naming itself, its KEYS, its ARGV
// and its replies, and touches only keys it was given in KEYS: a key built
// inside a script is invisible to Redis Cluster's slot routing.
func TestScriptsDeclareTheirKeysAndArguments(t *testing.T) {
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	keysUsed := regexp.MustCompile(`KEYS\[(\d+)\]`)
	// A command whose first argument is a string literal names a key the
	// caller did not pass (TIME and friends take no key).
	literalKey := regexp.MustCompile(`redis\.call\(\s*'([A-Za-z]+)'\s*,\s*['"]`)
	for _, entry := range entries {
		name := strings.TrimSuffix(entry.Name(), ".lua")
		data, err := files.ReadFile(entry.Name())
		if err != nil {
			t.Fatal(err)
		}
		source := string(data)
		var header, body []string
		inHeader := true
		for _, line := range strings.Split(source, "\n") {
			if inHeader && strings.HasPrefix(line, "--") {
				header = append(header, line)
				continue
			}
			inHeader = false
			body = append(body, line)
		}
		head := strings.Join(header, "\n")
		if !strings.HasPrefix(source, "-- "+name+":") {
			t.Errorf("%s: does not open with \"-- %s: <what it does>\"", entry.Name(), name)
		}
		for _, match := range literalKey.FindAllStringSubmatch(strings.Join(body, "\n"), -1) {
			if strings.EqualFold(match[1], "INFO") {
				continue // its argument is a section of the server's report
			}
			t.Errorf("%s: redis.call('%s', <literal>) names a key that is not in KEYS", entry.Name(), match[1])
		}
		if name == "lib" || name == "permit_bucket" || name == "clock" || name == "log_lib" || name == "cache_lib" {
			continue // helpers: they touch only the keys their callers pass
		}
		if !strings.Contains(head, "-- ARGV") || !strings.Contains(strings.ToLower(head), "-- repl") {
			t.Errorf("%s: the header does not list ARGV and the replies", entry.Name())
		}
		used := keysUsed.FindAllStringSubmatch(strings.Join(body, "\n"), -1)
		if len(used) == 0 && !strings.Contains(source, "KEYS") {
			t.Errorf("%s: touches no key from KEYS", entry.Name())
		}
		for _, match := range used {
			if !strings.Contains(head, "-- KEYS["+match[1]+"]") {
				t.Errorf("%s: uses KEYS[%s], which its header does not describe", entry.Name(), match[1])
			}
		}
	}
}

// The rate limiter takes its bucket from KEYS and its time from the server.
func TestRateLimitUsesOnlyItsKeyAndServerTime(t *testing.T) {
	body := RateLimit
	for _, want := range []string{"redis.call('TIME')", "KEYS[1]", "'PX'"} {
		if !strings.Contains(body, want) {
			t.Errorf("ratelimit.lua lacks %s", want)
		}
	}
	if keys := regexp.MustCompile(`KEYS\[(\d+)\]`).FindAllStringSubmatch(body, -1); len(keys) == 0 {
		t.Error("ratelimit.lua uses no key from KEYS")
	} else {
		for _, k := range keys {
			if k[1] != "1" {
				t.Errorf("ratelimit.lua uses KEYS[%s]; it is given one key", k[1])
			}
		}
	}
}
