// Package secret holds Text, what a secret (an API key as issued, a
// signing secret) is kept and passed in: however it is printed or logged
// (every fmt verb, %#v included, slog's handlers, encoding/json), it shows
// as [secret], so a value that carries one can be printed or logged whole.
// Only Reveal gives the text. It does no I/O.
package secret

import (
	"fmt"
	"io"
	"log/slog"
)

// Text is a secret. Its zero value is no secret (IsZero).
type Text struct {
	// text is behind a pointer because fmt prints an unexported field (a
	// Text inside another type's unexported field, say) by reflection,
	// without its methods: what it shows then is an address. Copies share
	// the text, which is never changed.
	text *string
}

// Redacted is how a Text that holds a secret prints; an empty one prints
// as none.
const (
	Redacted = "[secret]"
	none     = "[none]"
)

// New keeps text as a secret; "" is the zero Text.
func New(text string) Text {
	if text == "" {
		return Text{}
	}
	return Text{text: &text}
}

// Reveal is the secret's text, for the one use that needs it (an HMAC
// key, a hash, printing it to its holder once).
func (t Text) Reveal() string {
	if t.text == nil {
		return ""
	}
	return *t.text
}

// IsZero reports whether t holds no secret.
func (t Text) IsZero() bool { return t.text == nil }

// String is Redacted, or [none] for the zero Text.
func (t Text) String() string {
	if t.IsZero() {
		return none
	}
	return Redacted
}

// GoString is String: %#v shows no more than %v.
func (t Text) GoString() string { return t.String() }

// Format writes String for every verb, so %x, %q or %d show no more.
func (t Text) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// LogValue is String, for log/slog.
func (t Text) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalText is String, for encoding/json and its kin.
func (t Text) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
