package jsonstring

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// bySlog is s as log/slog's JSONHandler writes a message.
func bySlog(t testing.TB, s string) string {
	t.Helper()
	var out bytes.Buffer
	r := slog.NewRecord(time.Time{}, slog.LevelInfo, s, 0)
	if err := slog.NewJSONHandler(&out, nil).Handle(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	line := out.String()
	const prefix, suffix = `{"level":"INFO","msg":`, "}\n"
	if !strings.HasPrefix(line, prefix) || !strings.HasSuffix(line, suffix) {
		t.Fatalf("unexpected slog line %q", line)
	}
	return line[len(prefix) : len(line)-len(suffix)]
}

// byEncodingJSON is s as json.Marshal writes it.
func byEncodingJSON(t testing.TB, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// check fails unless Append writes s as both libraries do, after a prefix
// it must leave alone.
func check(t testing.TB, s string) {
	t.Helper()
	for _, flavour := range []struct {
		name string
		f    Flavour
		want func(testing.TB, string) string
	}{
		{"AsSlog", AsSlog, bySlog},
		{"AsEncodingJSON", AsEncodingJSON, byEncodingJSON},
	} {
		got := Append([]byte("prefix"), s, flavour.f)
		if want := "prefix" + flavour.want(t, s); string(got) != want {
			t.Fatalf("%s of %q:\n got %s\nwant %s", flavour.name, s, got, want)
		}
	}
}

func TestAppendMatchesTheLibraries(t *testing.T) {
	// Every byte alone and amid plain text, so each path of the loop runs
	// with something to copy before and after it.
	for c := range 256 {
		check(t, string([]byte{byte(c)}))
		check(t, "ab"+string([]byte{byte(c)})+"cd")
	}
	for _, s := range []string{
		"", "plain", `"quoted" \back\slash`, "<a href='x'>&amp;</a>",
		"\b\f\n\r\t\x00\x1f\x7f", "é 日本 😀", "\u2028\u2029 line seps",
		"\xff\xfe invalid", "\xe6\x97", "a\xc3", "\xed\xa0\x80 surrogate",
	} {
		check(t, s)
	}
}

func TestAppendMatchesTheLibrariesRandomly(t *testing.T) {
	alphabet := []string{"a", "Z", "0", " ", `"`, `\`, "<", ">", "&", "\b", "\f", "\n", "\r", "\t",
		"\x00", "\x1f", "\x7f", "é", "日", "😀", "\u2028", "\u2029", "\xff", "\xc3", "\xe6\x97"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		var s strings.Builder
		for range rng.IntN(20) {
			s.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		check(t, s.String())
	}
}

func FuzzAppend(f *testing.F) {
	for _, seed := range []string{"", "plain", "<&>\b\f\u2028\xff", `"\`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) { check(t, s) })
}

// BenchmarkAppend appends a typical log or order string in each flavour.
func BenchmarkAppend(b *testing.B) {
	const s = "/v1/orders/01J9ZQ4T5V6W7X8Y9Z0A1B2C3D client-order-0001"
	for _, flavour := range []struct {
		name string
		f    Flavour
	}{{"AsSlog", AsSlog}, {"AsEncodingJSON", AsEncodingJSON}} {
		b.Run(flavour.name, func(b *testing.B) {
			buf := make([]byte, 0, 128)
			for b.Loop() {
				buf = Append(buf[:0], s, flavour.f)
			}
		})
	}
}
