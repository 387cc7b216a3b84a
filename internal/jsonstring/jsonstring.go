// Package jsonstring appends a Go string as a quoted JSON string, escaped
// byte for byte as log/slog's JSONHandler escapes it or as encoding/json
// does: the one escaper behind the hand-written encoders (internal/jsonlog's
// log lines, orders.Order.AppendJSON), each held to its library's output by
// its own differential tests, and this package's to both.
package jsonstring

import "unicode/utf8"

// Flavour is whose escaping Append follows. The two differ only in the
// HTML-sensitive characters and two control characters; both escape the
// quote, the backslash and every other control character, write each byte
// of invalid UTF-8 as \ufffd, and escape U+2028 and U+2029 (valid JSON, but
// they end a line in JavaScript).
type Flavour uint8

const (
	// AsSlog escapes as log/slog's JSONHandler: <, > and & stay as they
	// are, and control characters other than \n, \r and \t become \u00XX.
	AsSlog Flavour = iota
	// AsEncodingJSON escapes as encoding/json's Marshal (HTML escaping on):
	// <, > and & become \u003c, \u003e and \u0026, and \b and \f are
	// written short.
	AsEncodingJSON
)

// Append appends s to dst, quoted and escaped as f says.
func Append(dst []byte, s string, f Flavour) []byte {
	const hex = "0123456789abcdef"
	safe := &safeSets[f]
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if safe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c == '\b' && f == AsEncodingJSON:
				dst = append(dst, '\\', 'b')
			case c == '\f' && f == AsEncodingJSON:
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// safeSets marks, per flavour, the bytes Append copies as they are:
// printable ASCII other than the quote and the backslash, and for
// AsEncodingJSON other than <, > and & too. Most of a string is such bytes,
// and the table makes each one a single load and test.
var safeSets = func() (sets [2][256]bool) {
	for c := byte(' '); c < utf8.RuneSelf; c++ {
		sets[AsSlog][c] = c != '"' && c != '\\'
		sets[AsEncodingJSON][c] = sets[AsSlog][c] && c != '<' && c != '>' && c != '&'
	}
	return sets
}()
