package main

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestReadEvents(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 123_000_000, time.UTC)
	finished := time.Date(2026, 12, 5, 12, 0, 0, 120_456_000, time.UTC)
	tests := []struct {
		name   string
		stream string
		want   []benchEvent
	}{
		{"position and heartbeat only", "id: 7\n\n: heartbeat\n\n", nil},
		{"an order's event", "id: 8\nevent: order.filled\ndata: " +
			`{"sequence":8,"id":"x","type":"order.filled","time":"2026-12-05T12:00:00.123Z","data":{"id":"ORD_1","client_order_id":"s1-4","finished_at":"2026-12-05T12:00:00.120456Z","quantity":"1"}}` + "\n\n",
			[]benchEvent{{Type: "order.filled", Time: at, OrderID: "ORD_1", ClientOrderID: "s1-4", FinishedAt: &finished}}},
		{"another event, CRLF, data over two lines", "id: 9\r\nevent: balance.updated\r\ndata: " +
			`{"sequence":9,"time":"2026-12-05T12:00:00.123Z",` + "\r\ndata: " + `"data":{"asset":"BTC"}}` + "\r\n\r\n",
			[]benchEvent{{Type: "balance.updated", Time: at}}},
		{"two events in one write", "event: a.b\ndata: {\"time\":\"2026-12-05T12:00:00.123Z\"}\n\nevent: c.d\ndata: {\"time\":\"2026-12-05T12:00:00.123Z\"}\n\n",
			[]benchEvent{{Type: "a.b", Time: at}, {Type: "c.d", Time: at}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []benchEvent
			err := readEvents(strings.NewReader(tt.stream), func(e benchEvent, received time.Time) {
				if received.IsZero() {
					t.Error("no received time")
				}
				got = append(got, e)
			})
			if !errors.Is(err, io.EOF) {
				t.Fatalf("readEvents: %v, want io.EOF", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %+v, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Type != w.Type || !g.Time.Equal(w.Time) || g.OrderID != w.OrderID || g.ClientOrderID != w.ClientOrderID ||
					(g.FinishedAt == nil) != (w.FinishedAt == nil) || (g.FinishedAt != nil && !g.FinishedAt.Equal(*w.FinishedAt)) {
					t.Errorf("event %d: got %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

// benchEventJSON is what parseBenchEvent reads, for json.Unmarshal: the
// reference it is checked against.
type benchEventJSON struct {
	Time time.Time `json:"time"`
	Data *struct {
		ID            string     `json:"id"`
		ClientOrderID string     `json:"client_order_id"`
		FinishedAt    *time.Time `json:"finished_at"`
	} `json:"data"`
}

// parseBenchEvent picks the members it reads out of the event and of an
// order's data, and reads what json.Unmarshal would.
func TestParseBenchEventReadsWhatUnmarshalDoes(t *testing.T) {
	tests := []struct {
		name, kind, data string
		bad              bool
	}{
		{"an order filled", "order.filled", `{"sequence":8,"id":"x","type":"order.filled","time":"2026-12-05T12:00:00.123Z","data":{"id":"ORD_1","client_order_id":"s1-4","finished_at":"2026-12-05T12:00:00.120456Z","quantity":"1"}}`, false},
		{"an open order, finished_at null", "order.open", `{"time":"2026-12-05T12:00:00Z","data":{"finished_at":null,"id":"ORD_2","client_order_id":"c"}}`, false},
		{"escapes, nesting and spaces", "order.canceled", `{ "data" : { "tags" : ["}", {"id":"inner"}], "id" : "O\"3\\", "note":"{\"time\":1}", "client_order_id":"\u0063x", "n": -1.5e3, "ok": true } , "time" : "2026-12-05T12:00:00.5+01:00" }`, false},
		{"an order event without data", "order.accepted", `{"time":"2026-12-05T12:00:00Z","data":null}`, false},
		{"another event's data is not read", "balance", `{"time":"2026-12-05T12:00:00Z","data":{"id":"B","time":"2020-01-01T00:00:00Z"}}`, false},
		{"a type of no constant", "x.y", `{"time":"2026-12-05T12:00:00Z"}`, false},
		{"unterminated", "fill", `{"time":"2026-12-05T12:00:00Z"`, true},
		{"a bad time", "fill", `{"time":"yesterday"}`, true},
		{"no object", "fill", `[]`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseBenchEvent([]byte(tt.kind), []byte(tt.data))
			var e benchEventJSON
			want := benchEvent{Type: tt.kind}
			wantErr := json.Unmarshal([]byte(tt.data), &e)
			if (err != nil) != tt.bad || (wantErr != nil) != tt.bad {
				t.Fatalf("error %v (json.Unmarshal's %v), want one: %v", err, wantErr, tt.bad)
			}
			if tt.bad {
				return
			}
			want.Time = e.Time
			if e.Data != nil && strings.HasPrefix(tt.kind, "order.") {
				want.OrderID, want.ClientOrderID, want.FinishedAt = e.Data.ID, e.Data.ClientOrderID, e.Data.FinishedAt
			}
			if got.Type != want.Type || !got.Time.Equal(want.Time) || got.OrderID != want.OrderID || got.ClientOrderID != want.ClientOrderID ||
				(got.FinishedAt == nil) != (want.FinishedAt == nil) || (got.FinishedAt != nil && !got.FinishedAt.Equal(*want.FinishedAt)) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func BenchmarkParseBenchEvent(b *testing.B) {
	kind := []byte("order.filled")
	data := []byte(`{"sequence":8,"id":"EV_01JEXAMPLE","type":"order.filled","time":"2026-12-05T12:00:00.123Z","data":{"id":"ORD_01JEXAMPLE","client_order_id":"s052022-4711","account_id":"ACC_1","symbol":"BTC-USD","side":"buy","type":"limit","time_in_force":"gtc","quantity":"0.01000000","price":"50000.00","filled_quantity":"0.01000000","status":"filled","created_at":"2026-12-05T12:00:00.100Z","finished_at":"2026-12-05T12:00:00.120456Z"}}`)
	b.Run("gjson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := parseBenchEvent(kind, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What it replaced.
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e benchEventJSON
			if err := json.Unmarshal(data, &e); err != nil {
				b.Fatal(err)
			}
		}
	})
}
