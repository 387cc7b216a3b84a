package orders

import (
	"encoding/json"
	"testing"
	"time"
)

// An event's envelope is valid JSON that decodes to the event, with its
// time to the millisecond in UTC and its data exactly as stored.
func TestEventJSONKeepsItsDataAsStored(t *testing.T) {
	at := time.Date(2025, 1, 15, 10, 30, 0, 120_000_000, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		data string
		want string
	}{
		{"compact data", `{"id":"ORD_1","status":"open"}`,
			`{"sequence":7,"id":"ev-\u003c1\u003e","type":"order.open","time":"2025-01-15T09:30:00.120Z","data":{"id":"ORD_1","status":"open"}}`},
		{"data with spaces and a newline", "{ \"asset\": \"BTC\",\n \"version\": 3 }",
			"{\"sequence\":7,\"id\":\"ev-\\u003c1\\u003e\",\"type\":\"order.open\",\"time\":\"2025-01-15T09:30:00.120Z\",\"data\":{ \"asset\": \"BTC\",\n \"version\": 3 }}"},
		{"no data", "",
			`{"sequence":7,"id":"ev-\u003c1\u003e","type":"order.open","time":"2025-01-15T09:30:00.120Z","data":null}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			event := Event{Sequence: 7, ID: "ev-<1>", Type: EventOrderOpen, Time: at, Data: []byte(tt.data)}
			got := string(event.AppendJSON([]byte("x")))[1:]
			if got != tt.want {
				t.Fatalf("AppendJSON\n got: %s\nwant: %s", got, tt.want)
			}
			var decoded Event
			if err := json.Unmarshal([]byte(got), &decoded); err != nil {
				t.Fatal(err)
			}
			if decoded.Sequence != 7 || decoded.ID != event.ID || decoded.Type != event.Type || !decoded.Time.Equal(at) {
				t.Errorf("decoded %+v, want %+v", decoded, event)
			}
		})
	}
}
