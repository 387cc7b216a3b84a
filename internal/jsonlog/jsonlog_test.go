package jsonlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixedTime has nanoseconds and a non-UTC zone, so the time encoding is
// exercised in full by every record that carries it.
var fixedTime = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.FixedZone("NST", -(3*3600+30*60)))

// twin holds the standard handler and ours, built from the same options and
// derived by the same WithAttrs and WithGroup calls.
type twin struct {
	std, ours      slog.Handler
	stdOut, ourOut *bytes.Buffer
	describe       []string // the calls that made it, for failure messages
}

func newTwin(opts *slog.HandlerOptions) twin {
	var stdOut, ourOut bytes.Buffer
	return twin{
		std:    slog.NewJSONHandler(&stdOut, opts),
		ours:   New(&ourOut, opts),
		stdOut: &stdOut,
		ourOut: &ourOut,
	}
}

func (tw twin) withAttrs(attrs ...slog.Attr) twin {
	// Each handler owns the slice it is given, so each gets its own copy.
	tw.std = tw.std.WithAttrs(append([]slog.Attr(nil), attrs...))
	tw.ours = tw.ours.WithAttrs(append([]slog.Attr(nil), attrs...))
	tw.describe = append(tw.describe[:len(tw.describe):len(tw.describe)], fmt.Sprintf("WithAttrs(%v)", attrs))
	return tw
}

func (tw twin) withGroup(name string) twin {
	tw.std = tw.std.WithGroup(name)
	tw.ours = tw.ours.WithGroup(name)
	tw.describe = append(tw.describe[:len(tw.describe):len(tw.describe)], fmt.Sprintf("WithGroup(%q)", name))
	return tw
}

// compare handles r with both handlers, fails unless the lines are
// identical, and returns our line.
func (tw twin) compare(t testing.TB, r slog.Record) string {
	t.Helper()
	tw.stdOut.Reset()
	tw.ourOut.Reset()
	ctx := context.Background()
	if err := tw.std.Handle(ctx, r); err != nil {
		t.Fatalf("standard handler: %v", err)
	}
	if err := tw.ours.Handle(ctx, r); err != nil {
		t.Fatalf("jsonlog handler: %v", err)
	}
	if got, want := tw.ourOut.String(), tw.stdOut.String(); got != want {
		t.Fatalf("output differs from slog.JSONHandler\nhandler: %v\nrecord:  %s\ngot:  %q\nwant: %q",
			tw.describe, describeRecord(r), got, want)
	}
	return tw.ourOut.String()
}

// formattedHere reports whether our handler formats r itself rather than
// handing it to the standard handler.
func formattedHere(h slog.Handler, r slog.Record) bool {
	ours := h.(*handler)
	if !ours.fast {
		return false
	}
	_, ok := ours.appendRecord(nil, r)
	return ok
}

func describeRecord(r slog.Record) string {
	var attrs []string
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, fmt.Sprintf("%q=%#v(%s)", a.Key, a.Value.Any(), a.Value.Kind()))
		return true
	})
	return fmt.Sprintf("time=%v level=%v msg=%q attrs=%v", r.Time, r.Level, r.Message, attrs)
}

func record(tm time.Time, level slog.Level, msg string, attrs ...slog.Attr) slog.Record {
	r := slog.NewRecord(tm, level, msg, 0)
	r.AddAttrs(attrs...)
	return r
}

func accessAttrs() []slog.Attr {
	return []slog.Attr{
		slog.String("request_id", "01JQ7ZK4M1X9V6T3B8N2C5D0EF"),
		slog.String("method", "POST"),
		slog.String("path", "/v1/orders"),
		slog.Int("status", 201),
		slog.Int64("bytes", 312),
		slog.Float64("duration_ms", 1.734),
		slog.String("account", "acct_7f3a9c"),
		slog.String("order_id", "01JQ7ZK4M2AB3CD4EF5GH6JK7M"),
	}
}

type userID int

func (u userID) LogValue() slog.Value { return slog.StringValue(fmt.Sprintf("user-%d", int(u))) }

func replaceAttr(groups []string, a slog.Attr) slog.Attr {
	switch {
	case a.Key == slog.TimeKey:
		return slog.Attr{}
	case strings.HasPrefix(a.Key, "a"):
		return slog.String(a.Key, "replaced")
	case a.Value.Kind() == slog.KindInt64:
		a.Value = slog.Int64Value(a.Value.Int64() + 1)
	}
	if len(groups) > 0 {
		a.Key = strings.Join(groups, ".") + "/" + a.Key
	}
	return a
}

func TestMatchesJSONHandler(t *testing.T) {
	oddString := "q\"b\\s/c\x00\x01\x1f\x7f\n\r\t<a href=\"x\">&amp;</a>\u2028\u2029\xff\xc3(é日本😀"
	tests := []struct {
		name   string
		opts   *slog.HandlerOptions
		derive func(twin) twin
		record slog.Record
		fast   bool // formatted here rather than by the standard handler
		want   string
	}{
		{
			name:   "access line",
			record: record(fixedTime, slog.LevelInfo, "request", accessAttrs()...),
			fast:   true,
			want: `{"time":"2025-03-14T15:09:26.535897932-03:30","level":"INFO","msg":"request",` +
				`"request_id":"01JQ7ZK4M1X9V6T3B8N2C5D0EF","method":"POST","path":"/v1/orders","status":201,` +
				`"bytes":312,"duration_ms":1.734,"account":"acct_7f3a9c","order_id":"01JQ7ZK4M2AB3CD4EF5GH6JK7M"}` + "\n",
		},
		{
			name: "every flat kind",
			record: record(fixedTime, slog.LevelWarn, "kinds",
				slog.String("s", "v"), slog.Int("i", -42), slog.Int64("min", math.MinInt64),
				slog.Uint64("max", math.MaxUint64), slog.Float64("f", 0.1+0.2), slog.Bool("t", true),
				slog.Bool("f", false), slog.Duration("d", -1500*time.Millisecond),
				slog.Time("utc", fixedTime.UTC()), slog.Time("zone", fixedTime), slog.Time("zero", time.Time{}),
				slog.Any("anyint", 7), slog.Any("anydur", time.Second)),
			fast: true,
		},
		{
			name:   "odd strings in message, key and value",
			record: record(fixedTime, slog.LevelInfo, oddString, slog.String(oddString, oddString), slog.String("", "")),
			fast:   true,
		},
		{
			name: "float formatting",
			record: record(fixedTime, slog.LevelInfo, "floats",
				slog.Float64("zero", 0), slog.Float64("negzero", math.Copysign(0, -1)),
				slog.Float64("e-6", 1e-6), slog.Float64("below e-6", 9.99e-7), slog.Float64("e21", 1e21),
				slog.Float64("e20", 1e20), slog.Float64("tiny", 5e-324), slog.Float64("max", math.MaxFloat64),
				slog.Float64("neg", -123456.789), slog.Float64("third", 1.0/3), slog.Float64("e-10", -1.5e-10)),
			fast: true,
		},
		{name: "NaN", record: record(fixedTime, slog.LevelInfo, "m", slog.Float64("f", math.NaN()))},
		{name: "+Inf", record: record(fixedTime, slog.LevelInfo, "m", slog.Float64("f", math.Inf(1)))},
		{name: "-Inf", record: record(fixedTime, slog.LevelInfo, "m", slog.Float64("f", math.Inf(-1)))},
		{name: "error", record: record(fixedTime, slog.LevelError, "m", slog.Any("err", errors.New("boom <&>")))},
		{name: "nil error", record: record(fixedTime, slog.LevelError, "m", slog.Any("err", error(nil)))},
		{name: "struct", record: record(fixedTime, slog.LevelInfo, "m", slog.Any("s", struct{ A, b int }{1, 2}))},
		{name: "LogValuer", record: record(fixedTime, slog.LevelInfo, "m", slog.Any("u", userID(7)))},
		{name: "group", record: record(fixedTime, slog.LevelInfo, "m", slog.Group("g", slog.Int("a", 1)), slog.Int("b", 2))},
		{name: "inline group", record: record(fixedTime, slog.LevelInfo, "m", slog.Group("", slog.Int("a", 1)))},
		{name: "empty group", record: record(fixedTime, slog.LevelInfo, "m", slog.Group("g"), slog.Int("a", 1)), fast: true},
		{name: "empty attr", record: record(fixedTime, slog.LevelInfo, "m", slog.Attr{}, slog.Int("a", 1))},
		{
			name:   "Level as a value",
			record: record(fixedTime, slog.LevelInfo+2, "m", slog.Any("level", slog.LevelDebug-3)),
		},
		{name: "level INFO+2", record: record(fixedTime, slog.LevelInfo+2, "m"), fast: true},
		{name: "level DEBUG-3", record: record(fixedTime, slog.LevelDebug-3, "m"), fast: true},
		{name: "level INFO+3", record: record(fixedTime, slog.LevelWarn-1, "m"), fast: true},
		{name: "level ERROR+100", record: record(fixedTime, slog.LevelError+100, "m"), fast: true},
		{name: "level min int", record: record(fixedTime, slog.Level(math.MinInt), "m"), fast: true},
		{name: "zero record time", record: record(time.Time{}, slog.LevelInfo, "m", slog.Int("a", 1)), fast: true},
		{name: "monotonic record time", record: record(time.Now(), slog.LevelInfo, "m"), fast: true},
		{name: "record year 10000", record: record(time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), slog.LevelInfo, "m")},
		{name: "attr year -1", record: record(fixedTime, slog.LevelInfo, "m", slog.Time("t", time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)))},
		{name: "no attrs", record: record(fixedTime, slog.LevelInfo, ""), fast: true},
		{
			name: "WithAttrs chain",
			derive: func(tw twin) twin {
				return tw.withAttrs(slog.String("service", "gateway"), slog.Int("pid", 42)).
					withAttrs().withAttrs(slog.Duration("uptime", time.Hour), slog.Float64("load", 0.25))
			},
			record: record(fixedTime, slog.LevelInfo, "m", accessAttrs()...),
			fast:   true,
		},
		{
			name:   "WithAttrs then delegated record",
			derive: func(tw twin) twin { return tw.withAttrs(slog.String("service", "gateway")) },
			record: record(fixedTime, slog.LevelInfo, "m", slog.Any("err", errors.New("x"))),
		},
		{
			name:   "WithAttrs group",
			derive: func(tw twin) twin { return tw.withAttrs(slog.Group("g", slog.Int("a", 1))) },
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("b", 2)),
		},
		{
			name:   "WithAttrs error",
			derive: func(tw twin) twin { return tw.withAttrs(slog.Any("err", errors.New("x"))) },
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("b", 2)),
		},
		{
			name:   "WithGroup",
			derive: func(tw twin) twin { return tw.withGroup("req") },
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("b", 2)),
		},
		{
			name:   "WithGroup no attrs",
			derive: func(tw twin) twin { return tw.withGroup("req") },
			record: record(fixedTime, slog.LevelInfo, "m"),
		},
		{
			name: "WithGroup WithAttrs WithGroup",
			derive: func(tw twin) twin {
				return tw.withAttrs(slog.Int("a", 1)).withGroup("g").withAttrs(slog.Int("b", 2)).withGroup("h")
			},
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("c", 3)),
		},
		{
			name:   "empty WithGroup",
			derive: func(tw twin) twin { return tw.withGroup("") },
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("c", 3)),
		},
		{
			name:   "ReplaceAttr",
			opts:   &slog.HandlerOptions{ReplaceAttr: replaceAttr},
			derive: func(tw twin) twin { return tw.withAttrs(slog.Int("n", 1)).withGroup("g") },
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("n", 2), slog.String("a", "b")),
		},
		{
			name:   "AddSource",
			opts:   &slog.HandlerOptions{AddSource: true},
			record: record(fixedTime, slog.LevelInfo, "m", slog.Int("n", 2)),
		},
		{
			name:   "Level option does not filter Handle",
			opts:   &slog.HandlerOptions{Level: slog.LevelError},
			record: record(fixedTime, slog.LevelDebug, "m", slog.Int("n", 2)),
			fast:   true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tw := newTwin(tt.opts)
			if tt.derive != nil {
				tw = tt.derive(tw)
			}
			got := tw.compare(t, tt.record)
			if tt.want != "" && got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if fast := formattedHere(tw.ours, tt.record); fast != tt.fast {
				t.Errorf("formatted here = %v, want %v", fast, tt.fast)
			}
		})
	}
}

// TestMatchesJSONHandlerRandomly compares the two handlers on many random
// handlers and records; most take the fast path, the rest check that
// delegation is seamless.
func TestMatchesJSONHandlerRandomly(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	g := generator{rand.New(rand.NewPCG(seed, seed>>1))}
	const handlers, recordsPerHandler = 300, 30
	fast := 0
	for range handlers {
		tw := g.twin()
		for range recordsPerHandler {
			r := g.record()
			tw.compare(t, r)
			if formattedHere(tw.ours, r) {
				fast++
			}
		}
	}
	total := handlers * recordsPerHandler
	t.Logf("%d of %d records formatted here", fast, total)
	// A generator that stopped reaching the fast path would test little.
	if fast < total*2/5 || fast == total {
		t.Errorf("%d of %d records formatted here; want a mix weighted to the fast path", fast, total)
	}
}

type generator struct{ rng *rand.Rand }

func (g generator) chance(p float64) bool { return g.rng.Float64() < p }

func (g generator) twin() twin {
	opts := &slog.HandlerOptions{}
	if g.chance(0.05) {
		opts.ReplaceAttr = replaceAttr
	}
	if g.chance(0.05) {
		opts.AddSource = true
	}
	tw := newTwin(opts)
	for range g.rng.IntN(4) {
		if g.chance(0.1) {
			tw = tw.withGroup(g.string())
		} else {
			tw = tw.withAttrs(g.attrs()...)
		}
	}
	return tw
}

func (g generator) record() slog.Record {
	var tm time.Time
	switch g.rng.IntN(10) {
	case 0:
		// zero: the time is omitted
	case 1:
		tm = g.time()
	default:
		tm = fixedTime
	}
	return record(tm, g.level(), g.string(), g.attrs()...)
}

func (g generator) level() slog.Level {
	named := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}
	if g.chance(0.7) {
		return named[g.rng.IntN(len(named))]
	}
	return slog.Level(g.rng.IntN(41) - 20)
}

func (g generator) attrs() []slog.Attr {
	attrs := make([]slog.Attr, g.rng.IntN(12))
	for i := range attrs {
		attrs[i] = g.attr(0)
	}
	return attrs
}

func (g generator) attr(depth int) slog.Attr {
	key := g.string()
	// Rare enough that most records, whose handlers saw up to three
	// WithAttrs calls, still take the fast path.
	if g.chance(0.98) {
		return g.flatAttr(key)
	}
	switch g.rng.IntN(9) {
	case 0:
		return slog.Any(key, fmt.Errorf("wrapped: %w", errors.New(g.string())))
	case 1:
		return slog.Any(key, map[string]any{g.string(): g.rng.Int()})
	case 2:
		return slog.Any(key, nil)
	case 3:
		return slog.Any(key, userID(g.rng.IntN(100)))
	case 4:
		return slog.Attr{}
	case 5:
		return slog.Float64(key, []float64{math.NaN(), math.Inf(1), math.Inf(-1)}[g.rng.IntN(3)])
	case 6:
		return slog.Time(key, time.Date(10000+g.rng.IntN(5), 1, 1, 0, 0, 0, 0, time.UTC))
	default:
		if depth > 2 {
			return slog.Group(key)
		}
		if g.chance(0.2) {
			key = "" // inlined group
		}
		group := make([]any, g.rng.IntN(4))
		for i := range group {
			group[i] = g.attr(depth + 1)
		}
		return slog.Group(key, group...)
	}
}

func (g generator) flatAttr(key string) slog.Attr {
	switch g.rng.IntN(8) {
	case 0:
		return slog.String(key, g.string())
	case 1:
		return slog.Int64(key, g.int64())
	case 2:
		return slog.Uint64(key, g.rng.Uint64()>>g.rng.IntN(64))
	case 3:
		return slog.Float64(key, g.float())
	case 4:
		return slog.Bool(key, g.chance(0.5))
	case 5:
		return slog.Duration(key, time.Duration(g.int64()))
	case 6:
		return slog.Time(key, g.time())
	default:
		return slog.Int(key, g.rng.IntN(1000))
	}
}

var stringParts = []string{
	"", "a", "request_id", "POST", "/v1/orders", " ", `"`, `\`, `\"`, "/", "\x00", "\x01", "\x08", "\x0c", "\x1f",
	"\x7f", "\n", "\r", "\t", "<", ">", "&", "<script>", "\u2028", "\u2029", "\u2027", "\u202a", "\xff", "\xc3",
	"\xe2\x80", "\xed\xa0\x80", "é", "日本", "😀", "\ufeff", "\ufffd", "key=value", "{}", "[1,2]", "null",
}

func (g generator) string() string {
	var b strings.Builder
	for range g.rng.IntN(6) {
		b.WriteString(stringParts[g.rng.IntN(len(stringParts))])
	}
	return b.String()
}

func (g generator) int64() int64 {
	switch g.rng.IntN(4) {
	case 0:
		return []int64{0, -1, 1, math.MinInt64, math.MaxInt64}[g.rng.IntN(5)]
	case 1:
		return g.rng.Int64N(2000) - 1000
	default:
		return int64(g.rng.Uint64()) >> g.rng.IntN(64)
	}
}

func (g generator) float() float64 {
	special := []float64{
		0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.999999e-7, -1e-6, 1e21, 999999999999999999999, 1e20,
		-1e21, math.SmallestNonzeroFloat64, math.MaxFloat64, -math.MaxFloat64, 1.734, 123456789.125,
	}
	switch g.rng.IntN(4) {
	case 0:
		return special[g.rng.IntN(len(special))]
	case 1:
		// Any bit pattern; NaN and ±Inf go to the standard handler.
		return math.Float64frombits(g.rng.Uint64())
	case 2:
		return float64(g.rng.IntN(100000)) / 1000
	default:
		return g.rng.NormFloat64() * math.Pow(10, float64(g.rng.IntN(60)-30))
	}
}

func (g generator) time() time.Time {
	switch g.rng.IntN(5) {
	case 0:
		return time.Time{}
	case 1:
		return fixedTime.UTC()
	default:
		zone := time.FixedZone("Z", (g.rng.IntN(49)-24)*1800+g.rng.IntN(2)*7)
		// Years 1678 to 2262, where Values hold the time as Unix nanoseconds,
		// and beyond, where they hold a time.Time.
		sec := g.rng.Int64N(1<<36) - 1<<35
		return time.Unix(sec, g.rng.Int64N(1e9)).In(zone)
	}
}

func TestEnabledFollowsLevel(t *testing.T) {
	var level slog.LevelVar
	tests := []struct {
		name   string
		opts   *slog.HandlerOptions
		set    slog.Level
		levels []slog.Level
	}{
		{name: "nil options", levels: []slog.Level{slog.LevelDebug, slog.LevelInfo - 1, slog.LevelInfo, slog.LevelError}},
		{name: "fixed level", opts: &slog.HandlerOptions{Level: slog.LevelWarn}, levels: []slog.Level{slog.LevelInfo, slog.LevelWarn}},
		{name: "LevelVar debug", opts: &slog.HandlerOptions{Level: &level}, set: slog.LevelDebug, levels: []slog.Level{slog.LevelDebug - 1, slog.LevelDebug}},
		{name: "LevelVar error", opts: &slog.HandlerOptions{Level: &level}, set: slog.LevelError, levels: []slog.Level{slog.LevelWarn, slog.LevelError}},
		{name: "LevelVar custom", opts: &slog.HandlerOptions{Level: &level}, set: slog.LevelInfo + 2, levels: []slog.Level{slog.LevelInfo + 1, slog.LevelInfo + 2}},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			level.Set(tt.set)
			base := New(io.Discard, tt.opts)
			std := slog.NewJSONHandler(io.Discard, tt.opts)
			handlers := map[string]slog.Handler{
				"New":       base,
				"WithAttrs": base.WithAttrs([]slog.Attr{slog.Int("a", 1)}),
				"WithGroup": base.WithGroup("g"),
			}
			for name, h := range handlers {
				for _, l := range tt.levels {
					if got, want := h.Enabled(ctx, l), std.Enabled(ctx, l); got != want {
						t.Errorf("%s: Enabled(%v) = %v, want %v", name, l, got, want)
					}
				}
			}
		})
	}
}

// writeRecorder keeps every Write as it came. It has no lock of its own, so
// the race detector reports any Writes the handler failed to serialize.
type writeRecorder struct{ writes [][]byte }

func (w *writeRecorder) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func TestConcurrentLinesStayWhole(t *testing.T) {
	var out writeRecorder
	base := New(&out, nil)
	handlers := []slog.Handler{
		base,
		base.WithAttrs([]slog.Attr{slog.String("service", "gateway")}),
		base.WithGroup("req"),
		base.WithAttrs([]slog.Attr{slog.Any("err", errors.New("delegated"))}),
	}
	const goroutines, perGoroutine = 16, 200
	var wg sync.WaitGroup
	for w := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				h := handlers[(w+i)%len(handlers)]
				attrs := accessAttrs()
				if i%3 == 0 {
					attrs = append(attrs, slog.Any("tags", []string{"delegated", strings.Repeat("x", i)}))
				}
				r := record(time.Now(), slog.LevelInfo, fmt.Sprintf("%d/%d", w, i), attrs...)
				if err := h.Handle(context.Background(), r); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	if len(out.writes) != goroutines*perGoroutine {
		t.Fatalf("%d writes, want one per record: %d", len(out.writes), goroutines*perGoroutine)
	}
	seen := make(map[string]bool)
	for _, line := range out.writes {
		if bytes.IndexByte(line, '\n') != len(line)-1 {
			t.Fatalf("write is not exactly one line: %q", line)
		}
		var decoded struct{ Msg string }
		if err := json.Unmarshal(line, &decoded); err != nil {
			t.Fatalf("line is not valid JSON: %v: %q", err, line)
		}
		if seen[decoded.Msg] {
			t.Fatalf("record %s written twice", decoded.Msg)
		}
		seen[decoded.Msg] = true
	}
}

// BenchmarkAccessLine formats the gateway's access line with each handler,
// handed the record directly as the gateway does; compare the ns/op and
// allocs/op of the two sub-benchmarks. slog is the library this package
// replaces: the hand-written handler stays only while it is at least twice
// as fast here.
func BenchmarkAccessLine(b *testing.B) {
	r := record(fixedTime, slog.LevelInfo, "request", accessAttrs()...)
	for _, bc := range []struct {
		name    string
		handler slog.Handler
	}{
		{"slog", slog.NewJSONHandler(io.Discard, nil)},
		{"jsonlog", New(io.Discard, nil)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				if err := bc.handler.Handle(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
