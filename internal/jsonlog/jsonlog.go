// Package jsonlog is a log/slog handler that writes exactly the JSON lines
// slog.NewJSONHandler writes, but formats the common flat records (strings,
// numbers, bools, durations and times) by appending straight into a pooled
// buffer, without reflection or allocation. Access logging is on the hot path
// of every request, and the standard handler spends most of its time in
// encoding/json for floats and in per-record state setup.
//
// Every record the fast path cannot format byte for byte like the standard
// handler (groups, Any and LogValuer values, errors, non-finite floats, times
// outside years 0–9999, ReplaceAttr, AddSource) is handed to an internal
// *slog.JSONHandler, so the output never depends on which path ran.
package jsonlog

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ordergate/ordergate/internal/jsonstring"
)

// New returns a handler whose output is byte for byte what
// slog.NewJSONHandler(w, opts) writes for the same records. Each record is
// written with a single Write call.
func New(w io.Writer, opts *slog.HandlerOptions) slog.Handler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	out := &lockedWriter{w: w}
	return &handler{
		out:  out,
		std:  slog.NewJSONHandler(out, opts),
		fast: opts.ReplaceAttr == nil && !opts.AddSource,
	}
}

type handler struct {
	// out is shared by every handler derived from New's, and by their
	// standard handlers, so lines from both paths never interleave.
	out *lockedWriter
	// std has seen the same WithAttrs and WithGroup calls as this handler,
	// so it can take over any record.
	std slog.Handler
	// fast reports whether records may be formatted here: no ReplaceAttr,
	// AddSource or groups, and only flat attrs added by WithAttrs.
	fast bool
	// pre holds the WithAttrs attrs already formatted, each as `,"key":value`.
	pre []byte
}

// lockedWriter serializes the writes of both paths with one mutex; the
// standard handler's own mutex covers only the standard handler's lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lockedWriter) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return lw.w.Write(p)
}

// Enabled leaves the level check to the standard handler, which reads
// opts.Level on every call, so a *slog.LevelVar may change at run time.
func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.std.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	if !h.fast {
		return h.std.Handle(ctx, r)
	}
	bp := buffers.Get().(*[]byte)
	defer freeBuffer(bp)
	line, ok := h.appendRecord((*bp)[:0], r)
	*bp = line // keep the grown buffer for the next record
	if !ok {
		return h.std.Handle(ctx, r)
	}
	_, err := h.out.Write(line)
	return err
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	h2 := &handler{out: h.out, fast: h.fast}
	if h.fast {
		// Clip so that handlers derived from the same parent never share
		// the bytes they append.
		pre := slices.Clip(h.pre)
		for _, a := range attrs {
			var ok bool
			if pre, ok = appendAttr(pre, a); !ok {
				h2.fast = false
				break
			}
		}
		if h2.fast {
			h2.pre = pre
		}
	}
	h2.std = h.std.WithAttrs(attrs)
	return h2
}

// WithGroup hands everything after it to the standard handler: grouped
// output is rare and the standard handler's group bookkeeping is subtle.
func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{out: h.out, std: h.std.WithGroup(name)}
}

var buffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 1024)
	return &b
}}

func freeBuffer(bp *[]byte) {
	// As in log/slog: a rare huge line should not pin its buffer forever.
	const maxBufferSize = 16 << 10
	if cap(*bp) <= maxBufferSize {
		buffers.Put(bp)
	}
}

// appendRecord formats r as the standard handler does when ReplaceAttr and
// AddSource are unset. It reports false if r holds anything it does not
// format, and the record must go to the standard handler.
func (h *handler) appendRecord(b []byte, r slog.Record) ([]byte, bool) {
	b = append(b, '{')
	if !r.Time.IsZero() {
		if !timeInRange(r.Time) {
			return b, false
		}
		b = append(b, `"time":`...)
		b = appendTime(b, r.Time)
		b = append(b, ',')
	}
	b = append(b, `"level":"`...)
	b = appendLevel(b, r.Level)
	b = append(b, `","msg":`...)
	b = jsonstring.Append(b, r.Message, jsonstring.AsSlog)
	b = append(b, h.pre...)
	ok := true
	r.Attrs(func(a slog.Attr) bool {
		b, ok = appendAttr(b, a)
		return ok
	})
	if !ok {
		return b, false
	}
	return append(b, "}\n"...), true
}

// appendAttr appends a as `,"key":value` and reports whether a was of a
// kind it formats exactly like the standard handler.
func appendAttr(b []byte, a slog.Attr) ([]byte, bool) {
	v := a.Value
	b = append(b, ',')
	b = jsonstring.Append(b, a.Key, jsonstring.AsSlog)
	b = append(b, ':')
	switch v.Kind() {
	case slog.KindString:
		b = jsonstring.Append(b, v.String(), jsonstring.AsSlog)
	case slog.KindInt64:
		b = strconv.AppendInt(b, v.Int64(), 10)
	case slog.KindUint64:
		b = strconv.AppendUint(b, v.Uint64(), 10)
	case slog.KindFloat64:
		f := v.Float64()
		// encoding/json refuses NaN and ±Inf; the standard handler writes
		// its error message instead, which is left to it.
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return b, false
		}
		b = appendFloat(b, f)
	case slog.KindBool:
		b = strconv.AppendBool(b, v.Bool())
	case slog.KindDuration:
		// Nanoseconds, as encoding/json writes a time.Duration.
		b = strconv.AppendInt(b, int64(v.Duration()), 10)
	case slog.KindTime:
		t := v.Time()
		if !timeInRange(t) {
			return b, false
		}
		b = appendTime(b, t)
	default:
		return b, false
	}
	return b, true
}

// timeInRange reports whether t's year has the four digits RFC 3339 allows;
// for other years the standard handler writes an error message too.
func timeInRange(t time.Time) bool {
	y := t.Year()
	return y >= 0 && y < 10000
}

func appendTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// appendLevel appends l.String() without the allocation that String makes
// for levels between the named ones, such as "INFO+2".
func appendLevel(b []byte, l slog.Level) []byte {
	var base string
	var offset slog.Level
	switch {
	case l < slog.LevelInfo:
		base, offset = "DEBUG", l-slog.LevelDebug
	case l < slog.LevelWarn:
		base, offset = "INFO", l-slog.LevelInfo
	case l < slog.LevelError:
		base, offset = "WARN", l-slog.LevelWarn
	default:
		base, offset = "ERROR", l-slog.LevelError
	}
	b = append(b, base...)
	if offset > 0 {
		b = append(b, '+')
	}
	if offset != 0 {
		b = strconv.AppendInt(b, int64(offset), 10)
	}
	return b
}

// appendFloat writes a finite float as encoding/json does (ES6 number
// formatting), which the standard handler gets by calling json.Marshal.
func appendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Shorten a two-digit negative exponent: e-09 becomes e-9.
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
