package jsonlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordergate/ordergate/testkit/logbuffer"
)

// syncBuffer is a logbuffer.Buffer that counts the writes it takes, read
// while Buffered's timer writes.
type syncBuffer struct {
	logbuffer.Buffer
	writes atomic.Int64
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.writes.Add(1)
	return s.Buffer.Write(p)
}

func (s *syncBuffer) read() (string, int) {
	return s.String(), int(s.writes.Load())
}

func TestBufferedWritesTogetherAndInTime(t *testing.T) {
	tests := []struct {
		name     string
		interval time.Duration
		lines    int
		line     string
		// want: what w holds before any Flush, Close or timer could run
		wantWrites int
	}{
		{"lines wait for the interval", time.Hour, 3, "short line\n", 0},
		{"a full buffer goes at once", time.Hour, bufferedMost/1000 + 1, strings.Repeat("x", 999) + "\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out syncBuffer
			b := NewBuffered(&out, tt.interval)
			for range tt.lines {
				if _, err := b.Write([]byte(tt.line)); err != nil {
					t.Fatal(err)
				}
			}
			if _, writes := out.read(); writes != tt.wantWrites {
				t.Errorf("%d writes to w before Close, want %d", writes, tt.wantWrites)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if got, _ := out.read(); got != strings.Repeat(tt.line, tt.lines) {
				t.Errorf("w holds %d bytes, want the %d lines whole (%d bytes)", len(got), tt.lines, tt.lines*len(tt.line))
			}
			// After Close a line goes straight through.
			if _, err := b.Write([]byte("late\n")); err != nil {
				t.Fatal(err)
			}
			if got, _ := out.read(); !strings.HasSuffix(got, "late\n") {
				t.Errorf("a line written after Close did not reach w")
			}
		})
	}
}

func TestBufferedFlushesOnItsOwn(t *testing.T) {
	var out syncBuffer
	b := NewBuffered(&out, 10*time.Millisecond)
	t.Cleanup(func() { _ = b.Close() })
	for i := range 5 {
		fmt.Fprintf(b, "line %d\n", i)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, writes := out.read()
		if got == "line 0\nline 1\nline 2\nline 3\nline 4\n" {
			if writes != 1 {
				t.Errorf("%d writes for five lines in one interval, want 1", writes)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5 s w holds %q; want the five lines, written by the timer", got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type failingWriter struct{ err error }

func (f failingWriter) Write([]byte) (int, error) { return 0, f.err }

func TestBufferedReportsAFailedTimedWrite(t *testing.T) {
	refused := errors.New("disk full")
	b := NewBuffered(failingWriter{refused}, time.Millisecond)
	if _, err := b.Write([]byte("lost\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the timer's flush fails, with nobody waiting
	if err := b.Flush(); !errors.Is(err, refused) {
		t.Errorf("Flush after a failed timed write: %v, want %v", err, refused)
	}
	if err := b.Flush(); err != nil {
		t.Errorf("the failure was reported twice: %v", err)
	}
}

// Lines logged from many goroutines through the handler arrive whole and
// once each, through the timer's flushes and Close's.
func TestBufferedUnderTheHandler(t *testing.T) {
	var out syncBuffer
	b := NewBuffered(&out, time.Millisecond)
	logger := slog.New(New(b, nil))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				logger.Info(fmt.Sprintf("g%d-%d", g, i), "path", "/v1/orders", "status", 202)
			}
		})
	}
	wg.Wait()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	got, _ := out.read()
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		var decoded struct{ Msg string }
		if err := json.Unmarshal([]byte(line), &decoded); err != nil {
			t.Fatalf("line is not valid JSON: %v: %q", err, line)
		}
		if seen[decoded.Msg] {
			t.Fatalf("record %s written twice", decoded.Msg)
		}
		seen[decoded.Msg] = true
	}
	if len(seen) != 8*500 {
		t.Errorf("%d records, want %d", len(seen), 8*500)
	}
}

// BenchmarkAccessLineToFile writes the gateway's access line to a file, a
// write(2) per line against Buffered's one per interval.
func BenchmarkAccessLineToFile(b *testing.B) {
	r := record(fixedTime, slog.LevelInfo, "request", accessAttrs()...)
	for _, buffered := range []bool{false, true} {
		b.Run(fmt.Sprintf("buffered=%v", buffered), func(b *testing.B) {
			file, err := os.Create(filepath.Join(b.TempDir(), "access.log"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { file.Close() })
			var handler slog.Handler = New(file, nil)
			if buffered {
				out := NewBuffered(file, 100*time.Millisecond)
				b.Cleanup(func() { _ = out.Close() })
				handler = New(out, nil)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := handler.Handle(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
