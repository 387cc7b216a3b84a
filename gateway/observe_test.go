package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ordergate/ordergate/testkit/testserver"
)

// accessLines are the gateway's access log lines written past offset, decoded.
func accessLines(t testing.TB, f *fixture, offset int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range logLines(t, f, offset) {
		if line["msg"] == "request" {
			lines = append(lines, line)
		}
	}
	return lines
}

// A well-formed X-Request-Id is used as the request's id: answered in the
// header, in a problem's request_id and on the access log line; any other is
// replaced by a fresh ULID. The access line of a placement names its order.
func TestRequestIDsAndAccessLog(t *testing.T) {
	testserver.Parallel(t)
	f := newFixture(t, 1)
	key := f.keys[0]
	tests := []struct {
		name     string
		sent     string
		body     string
		wantKept bool
	}{
		{"well-formed", "client-42:retry.1_A", limitOrder("kept"), true},
		{"well-formed on a refusal", "refused-1", `{}`, true},
		{"longest", strings.Repeat("a", 128), limitOrder("longest"), true},
		{"too long", strings.Repeat("a", 129), limitOrder("too-long"), false},
		{"space", "a b", limitOrder("space"), false},
		{"slash", "a/b", limitOrder("slash"), false},
		{"not ASCII", "réq", limitOrder("ascii"), false},
		{"absent", "", limitOrder("absent"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			offset := len(f.logs.String())
			req, err := http.NewRequest(http.MethodPost, f.url+"/v1/orders", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			if tt.sent != "" {
				req.Header.Set("X-Request-Id", tt.sent)
			}
			res, err := f.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			id := res.Header.Get("X-Request-Id")
			if tt.wantKept && id != tt.sent {
				t.Errorf("X-Request-Id %q, want the caller's %q", id, tt.sent)
			}
			if !tt.wantKept && (id == tt.sent || len(id) != 26) {
				t.Errorf("X-Request-Id %q for the caller's %q, want a fresh ULID", id, tt.sent)
			}
			lines := accessLines(t, f, offset)
			if len(lines) != 1 {
				t.Fatalf("%d access lines, want 1: %s", len(lines), f.logs.String())
			}
			line := lines[0]
			if line["request_id"] != id || line["method"] != "POST" || line["path"] != "/v1/orders" || line["status"] != float64(res.StatusCode) {
				t.Errorf("access line %v, want request_id %s, POST /v1/orders, status %d", line, id, res.StatusCode)
			}
			if res.StatusCode == http.StatusAccepted {
				var order struct {
					ID string `json:"id"`
				}
				if err := json.Unmarshal(body, &order); err != nil || line["order_id"] != order.ID || order.ID == "" {
					t.Errorf("access line order_id %v, want the placed order %q (%v)", line["order_id"], order.ID, err)
				}
			} else {
				var problem map[string]any
				if err := json.Unmarshal(body, &problem); err != nil || problem["request_id"] != id {
					t.Errorf("problem %s, want request_id %s", body, id)
				}
				if _, ok := line["order_id"]; ok {
					t.Errorf("access line of a refusal names an order: %v", line)
				}
			}
		})
	}
}

// TestRepeatedRefusalsAreLoggedSparsely: a client's refusals are logged
// at most once a second each (its first of the second), the rest counted
// in access_log_refusals_unlogged_total and summarized in one line once
// its second is over; answers that are not refusals keep a line each.
func TestRepeatedRefusalsAreLoggedSparsely(t *testing.T) {
	f := newFixture(t, 0)
	offset := len(f.logs.String())
	const sent = 60
	start := time.Now()
	for i := range sent {
		if res := f.do(t, f.http, http.MethodGet, "/v1/balances", "", "", ""); res.status != http.StatusUnauthorized {
			t.Fatalf("request %d without a key: %d %s", i, res.status, res.body)
		}
	}
	elapsed := time.Since(start)
	logged := len(accessLines(t, f, offset))
	if most := 1 + int(elapsed/time.Second); logged < 1 || logged > most {
		t.Errorf("%d refusals in %v: %d access lines, want 1 to %d", sent, elapsed, logged, most)
	}
	unlogged, _ := strconv.Atoi(parseSamples(t, f.scrape(t))["access_log_refusals_unlogged_total"])
	if logged+unlogged != sent {
		t.Errorf("%d refusals: %d logged and %d counted unlogged", sent, logged, unlogged)
	}
	summarized := 0
	for deadline := time.Now().Add(5 * time.Second); summarized < unlogged && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		summarized = 0
		for _, line := range logLines(t, f, offset) {
			if line["msg"] == "refusals not logged" {
				statuses, _ := line["statuses"].(map[string]any)
				if line["client"] != "127.0.0.1" || statuses["401"] != line["count"] {
					t.Fatalf("summary %v, want client 127.0.0.1 and its 401s", line)
				}
				summarized += int(line["count"].(float64))
			}
		}
	}
	if summarized != unlogged {
		t.Errorf("summaries count %d refusals, want the %d unlogged", summarized, unlogged)
	}
	before := len(accessLines(t, f, offset))
	for range 3 {
		if res := f.do(t, f.http, http.MethodGet, "/v1/instruments", "", "", ""); res.status != http.StatusOK {
			t.Fatalf("instruments: %d %s", res.status, res.body)
		}
	}
	if got := len(accessLines(t, f, offset)) - before; got != 3 {
		t.Errorf("3 answers that refuse nothing: %d access lines, want 3", got)
	}
}

// logLines are the gateway's log lines written past offset, decoded.
func logLines(t testing.TB, f *fixture, offset int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(f.logs.String()[offset:]), "\n") {
		var decoded map[string]any
		if err := json.Unmarshal([]byte(line), &decoded); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		lines = append(lines, decoded)
	}
	return lines
}
