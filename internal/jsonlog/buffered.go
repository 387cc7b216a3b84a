package jsonlog

import (
	"io"
	"log/slog"
	"sync"
	"time"
)

// DefaultFlushInterval is how long the gateway and the worker hold a log line
// at most: soon enough for someone tailing the log, long enough that a busy
// gateway writes hundreds of lines at a time.
const DefaultFlushInterval = 100 * time.Millisecond

// bufferedMost is how many bytes Buffered holds before it writes them out at
// once, whatever the interval: a few hundred access lines.
const bufferedMost = 64 << 10

// Buffered gathers the lines written to it and writes them to w together, at
// most an interval after the first of them arrived, or at once when it holds
// bufferedMost bytes. A process that writes a log line per request would
// otherwise make a write(2) per request: the gateway logging to a file lost
// about 9 % of its admission throughput to them. The price is that a crash
// loses the last interval's lines; Close writes what is left, so a process
// that stops on a signal loses nothing.
//
// Each Write is kept whole: handed a whole line, Buffered writes whole lines.
type Buffered struct {
	mu       sync.Mutex
	w        io.Writer
	interval time.Duration
	buf      []byte
	timer    *time.Timer
	closed   bool
	// err is a timed flush's failed write to w, returned by the next Write,
	// Flush or Close.
	err error
}

// NewBuffered writes to w at most interval after a line arrives.
func NewBuffered(w io.Writer, interval time.Duration) *Buffered {
	b := &Buffered{w: w, interval: interval}
	b.timer = time.AfterFunc(time.Hour, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if err := b.flushLocked(); err != nil {
			b.err = err // nobody waits for this flush: the next caller hears of it
		}
	})
	b.timer.Stop()
	return b
}

// Write keeps p for the next flush. Once Buffered is closed, p goes to w at
// once: lines logged after Close are not lost.
func (b *Buffered) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.err; err != nil {
		b.err = nil
		return 0, err
	}
	if b.closed {
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > bufferedMost {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	if len(b.buf) == 0 {
		b.timer.Reset(b.interval)
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes out what Buffered holds.
func (b *Buffered) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushOrPending()
}

// flushOrPending flushes, and returns the flush's error or else a timed
// flush's that nobody has heard of yet.
func (b *Buffered) flushOrPending() error {
	err := b.flushLocked()
	if err == nil {
		err = b.err
	}
	b.err = nil
	return err
}

// Close writes out what Buffered holds; later writes go straight to w.
func (b *Buffered) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return b.flushOrPending()
}

func (b *Buffered) flushLocked() error {
	b.timer.Stop()
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	// What did not go out is dropped rather than kept to grow without end
	// while w refuses; the error says so once.
	b.buf = b.buf[:0]
	return err
}

// ProcessLogger is a process's logger: JSON lines at level to w, written
// together by a Buffered every flush interval, or each at once when flush is
// 0. Call done after the last line: it writes out what is left.
func ProcessLogger(w io.Writer, level slog.Leveler, flush time.Duration) (logger *slog.Logger, done func() error) {
	out, done := w, func() error { return nil }
	if flush > 0 {
		b := NewBuffered(w, flush)
		out, done = b, b.Close
	}
	return slog.New(New(out, &slog.HandlerOptions{Level: level})), done
}
