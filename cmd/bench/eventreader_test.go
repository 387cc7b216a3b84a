package main

import (
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
