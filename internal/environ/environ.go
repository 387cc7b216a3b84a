// Package environ reads a command's settings from environment variables for
// its flags' defaults. A value that does not parse is kept as an error, not
// read as zero or as the default: a typo in a timeout must stop the process
// at start, not run it with a setting nobody chose.
package environ

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Reader reads variables through getenv; an empty or unset variable gives the
// fallback. Err reports every variable that did not parse.
type Reader struct {
	getenv func(string) string
	errs   []error
}

// NewReader reads through getenv (os.Getenv, or a map in tests).
func NewReader(getenv func(string) string) *Reader { return &Reader{getenv: getenv} }

// Err joins the errors of the variables that did not parse; nil when all did.
func (r *Reader) Err() error { return errors.Join(r.errs...) }

// String is the variable's text.
func (r *Reader) String(name, fallback string) string {
	if value := r.getenv(name); value != "" {
		return value
	}
	return fallback
}

// parse reads name with parse, or keeps why it did not parse (want) and
// returns fallback.
func parse[T any](r *Reader, name string, fallback T, want string, parse func(string) (T, error)) T {
	value := r.getenv(name)
	if value == "" {
		return fallback
	}
	parsed, err := parse(value)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: %s", name, value, want))
		return fallback
	}
	return parsed
}

// Int is the variable as a whole number.
func (r *Reader) Int(name string, fallback int) int {
	return parse(r, name, fallback, "not a whole number", strconv.Atoi)
}

// Duration is the variable as a Go duration such as 5s or 1m30s.
func (r *Reader) Duration(name string, fallback time.Duration) time.Duration {
	return parse(r, name, fallback, "not a duration such as 5s", time.ParseDuration)
}

// Bool is the variable as true or false (or 1, 0, t, f, as strconv reads).
func (r *Reader) Bool(name string, fallback bool) bool {
	return parse(r, name, fallback, "want true or false", strconv.ParseBool)
}

// Level is the variable as a log level.
func (r *Reader) Level(name string, fallback slog.Level) slog.Level {
	return parse(r, name, fallback, "want debug, info, warn or error", func(text string) (slog.Level, error) {
		var level slog.Level
		err := level.UnmarshalText([]byte(text))
		return level, err
	})
}

// Removed refuses a variable no longer read, with what replaced it: a
// setting an operator left behind must not be ignored in silence.
func (r *Reader) Removed(name, instead string) {
	if value := r.getenv(name); value != "" {
		r.errs = append(r.errs, fmt.Errorf("%s=%q: no longer read; %s", name, value, instead))
	}
}
