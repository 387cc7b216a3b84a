package secret_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/internal/jsonlog"
	"github.com/ordergate/ordergate/secret"
)

const text = "ogs_the-secret-itself"

// carrier holds a Text every way a program might: in an exported field, an
// unexported one (which fmt prints by reflection, without its methods),
// behind a pointer, in a slice and in a map.
type carrier struct {
	Exported   secret.Text
	unexported secret.Text
	Pointer    *secret.Text
	Slice      []secret.Text
	Map        map[string]secret.Text
}

// TestTextNeverPrintsTheSecret: fmt's verbs, log/slog's handlers (the
// standard ones and jsonlog) and encoding/json show [secret], never the
// text, of a Text alone or inside other values; Reveal gives the text.
func TestTextNeverPrintsTheSecret(t *testing.T) {
	s := secret.New(text)
	c := carrier{Exported: s, unexported: s, Pointer: &s, Slice: []secret.Text{s}, Map: map[string]secret.Text{"k": s}}
	var printed []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		for _, value := range []any{s, &s, c, &c} {
			printed = append(printed, verb+" "+fmt.Sprintf(verb, value))
		}
	}
	printed = append(printed, fmt.Sprint(s, c), fmt.Sprintln(s, c), s.String(), s.GoString())
	var logs bytes.Buffer
	handlers := []slog.Handler{
		slog.NewTextHandler(&logs, nil),
		slog.NewJSONHandler(&logs, nil),
		jsonlog.New(&logs, nil),
	}
	for _, h := range handlers {
		slog.New(h).Info("message", "secret", s, "pointer", &s, "carrier", c, slog.Any("any", s), slog.Group("group", "secret", s))
	}
	printed = append(printed, logs.String())
	encoded, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	printed = append(printed, string(encoded))
	for _, out := range printed {
		if strings.Contains(out, "the-secret") || strings.Contains(strings.ToLower(out), fmt.Sprintf("%x", "the-secret")) {
			t.Errorf("the secret shows: %s", out)
		}
	}
	if !strings.Contains(fmt.Sprintf("%+v", c), "Exported:"+secret.Redacted) || !strings.Contains(logs.String(), secret.Redacted) {
		t.Errorf("no %s where the secret is: %+v\n%s", secret.Redacted, c, logs.String())
	}
	if s.Reveal() != text || s.IsZero() {
		t.Errorf("Reveal = %q, IsZero %v; want %q", s.Reveal(), s.IsZero(), text)
	}
	if zero := secret.New(""); !zero.IsZero() || zero != (secret.Text{}) || zero.Reveal() != "" || zero.String() == secret.Redacted {
		t.Errorf("New(\"\") = %v, want the zero Text, which holds no secret", zero)
	}
}
