package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ordergate/ordergate/orders"
)

// snapshotOrder is an order row as settle_events.sql's json_build_array
// writes it (timestamps as PostgreSQL's JSON writes a timestamptz).
func snapshotOrder(id, client, status, quantity, price, filled, notional, remaining, fees string, finished string, extra ...string) string {
	reason, cancel, duplicate := "null", "null", "null"
	for _, e := range extra {
		switch name, value, _ := strings.Cut(e, "="); name {
		case "reject":
			reason = value
		case "cancel":
			cancel = value
		case "duplicate":
			duplicate = value
		}
	}
	return fmt.Sprintf(`[%q, %s, "ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D", "BTC-USD", "buy", "limit", "gtc", false, %q, %s, %q, %s, %s, %s, %q, %q, %q, %q, "2026-12-05T09:33:45.123456+00:00", %s, 2, 4, 2]`,
		id, client, quantity, price, status, reason, cancel, duplicate, filled, notional, remaining, fees, finished)
}

// snapshotFill is a fill row as settle_events.sql writes it.
func snapshotFill(trade int64, order, liquidity, taker, price, quantity, fee string) string {
	return fmt.Sprintf(`[%d, %q, "BTC-USD", %q, %q, %q, %q, %q, "2026-12-05T09:33:45.654321+00:00", 2, 4, 2, "USD"]`,
		trade, order, liquidity, taker, price, quantity, fee)
}

// renderSnapshots are events rows' payloads covering what a snapshot holds:
// a taker that filled against two makers, a maker's partial fill, a
// rejection, a cancel, a market order (no price), strings needing escapes,
// an empty row, and PostgreSQL's spacing variants.
var renderSnapshots = map[string]string{
	"taker filled by two makers": `{"orders" : [` +
		snapshotOrder("ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3E", `"client-0001"`, "filled", "0.015", `"65000.5"`, "0.015", "975.0075", "0", "0.48", `"2026-12-05T09:33:45.2+00:00"`) +
		`], "fills" : [` +
		snapshotFill(41, "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3E", "taker", "buy", "65000.5", "0.01", "0.33") + `, ` +
		snapshotFill(42, "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3E", "taker", "buy", "65000.5", "0.005", "0.15") +
		`], "accepted" : ["ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3E"]}`,
	"maker partially filled": `{"orders" : [` +
		snapshotOrder("ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3F", `"c"`, "partially_filled", "1", `"65000.5"`, "0.01", "650.005", "0.99", "0", "null") +
		`], "fills" : [` + snapshotFill(41, "ORD_01J9ZQ4T5V6W7X8Y9Z0A1B2C3F", "maker", "buy", "65000.5", "0.01", "0") +
		`], "accepted" : []}`,
	"rejected, accepted and open": `{"orders":[` +
		snapshotOrder("ORD_A", `"dup"`, "rejected", "2", `"1"`, "0", "0", "0", "0", `"2026-12-05T09:33:46+00:00"`, `reject="duplicate_client_order_id"`, `duplicate="ORD_B"`) + `,` +
		snapshotOrder("ORD_B", `"dup"`, "open", "2", `"1.5"`, "0", "0", "2", "0", "null") +
		`],"fills":[],"accepted":["ORD_A","ORD_B"]}`,
	"canceled by the market, no price": `{"orders" : [` +
		snapshotOrder("ORD_C", `"m\"k\\t\u00e9\n<&>"`, "canceled", "3", "null", "1", "10", "2", "0.01", `"2026-12-05T09:33:47.000001+00:00"`, `cancel="self_trade_prevention"`) +
		`], "fills" : [], "accepted" : ["ORD_C"]}`,
	"fills only": `{"orders" : [], "fills" : [` + snapshotFill(9007199254740993, "ORD_D", "maker", "sell", "0.00000001", "123456789012.1234", "0.0001") + `], "accepted" : []}`,
	"empty":      `{"orders" : [], "fills" : [], "accepted" : []}`,
}

// renderEventsReference is RenderEvents as it was before it avoided
// reflection: encoding/json reads the snapshot and writes every event's
// data. RenderEvents must give the same events, byte for byte.
func renderEventsReference(entry orders.OutboxEntry) ([]orders.EventDraft, error) {
	var snapshot struct {
		Orders   [][]json.RawMessage `json:"orders"`
		Fills    [][]json.RawMessage `json:"fills"`
		Accepted []string            `json:"accepted"`
	}
	if err := json.Unmarshal([]byte(entry.Payload), &snapshot); err != nil {
		return nil, err
	}
	row := func(columns []json.RawMessage) jsonRow {
		r := make(jsonRow, len(columns))
		for i, c := range columns {
			r[i] = string(c)
		}
		return r
	}
	var drafts []orders.EventDraft
	list := make([]orders.Order, len(snapshot.Orders))
	for i, columns := range snapshot.Orders {
		order, err := scanOrder(row(columns))
		if err != nil {
			return nil, err
		}
		list[i] = order
	}
	for _, id := range snapshot.Accepted {
		i := slices.IndexFunc(list, func(o orders.Order) bool { return o.ID == id })
		if i < 0 {
			return nil, fmt.Errorf("accepted order %s is not in the snapshot", id)
		}
		data, err := json.Marshal(referenceOrder(list[i].Admitted()))
		if err != nil {
			return nil, err
		}
		drafts = append(drafts, orders.EventDraft{ID: orders.AcceptedEventID(id), Type: orders.EventOrderAccepted, Data: data})
	}
	for _, columns := range snapshot.Fills {
		fill, err := scanExecution(row(columns))
		if err != nil {
			return nil, err
		}
		data, err := json.Marshal(referenceExecution(fill))
		if err != nil {
			return nil, err
		}
		drafts = append(drafts, orders.EventDraft{ID: fill.ID, Type: orders.EventFill, Data: data})
	}
	source := entry.Name + "@" + strconv.FormatInt(entry.Version, 10)
	for _, order := range list {
		data, err := json.Marshal(referenceOrder(order))
		if err != nil {
			return nil, err
		}
		drafts = append(drafts, orders.EventDraft{ID: order.ID + ":" + source, Type: orders.OrderEventType(order.Status), Data: data})
	}
	return drafts, nil
}

// referenceOrder and referenceExecution have no methods: encoding/json
// encodes them by reflection from the json tags.
type (
	referenceOrder     orders.Order
	referenceExecution orders.Execution
)

func TestRenderEventsMatchesEncodingJSON(t *testing.T) {
	for name, payload := range renderSnapshots {
		t.Run(name, func(t *testing.T) {
			entry := orders.OutboxEntry{ID: 7, Name: "events:ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D:BTC-USD", Version: 3, Payload: payload}
			want, err := renderEventsReference(entry)
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			got, err := RenderEvents(entry)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d events, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].ID != want[i].ID || got[i].Type != want[i].Type || !bytes.Equal(got[i].Data, want[i].Data) {
					t.Errorf("event %d:\n got %s %s %s\nwant %s %s %s", i, got[i].ID, got[i].Type, got[i].Data, want[i].ID, want[i].Type, want[i].Data)
				}
			}
		})
	}
}

// draftsSink keeps the benchmark's events on the heap, as the relay's are.
var draftsSink []orders.EventDraft

// benchSnapshot is an events row's payload of orders orders, each
// filled fills times (as a taker, against as many makers), the first
// accepted in this write, as settle_events.sql writes it.
func benchSnapshot(tb testing.TB, orders, fills int) string {
	tb.Helper()
	var rows, trades []string
	for i := range orders {
		id := fmt.Sprintf("ORD_01J9ZQ4T5V6W7X8Y9Z0A1B%04d", i)
		rows = append(rows, snapshotOrder(id, fmt.Sprintf(`"client-%04d"`, i), "partially_filled", "1.5", `"65000.5"`,
			"0.015", "975.0075", "1.485", "0.48", "null"))
		for j := range fills {
			trades = append(trades, snapshotFill(int64(1000*i+j), id, "taker", "buy", "65000.5", "0.005", "0.16"))
		}
	}
	payload := `{"orders" : [` + strings.Join(rows, ", ") + `], "fills" : [` + strings.Join(trades, ", ") +
		`], "accepted" : ["ORD_01J9ZQ4T5V6W7X8Y9Z0A1B0000"]}`
	if _, err := parseSnapshot(payload); err != nil {
		tb.Fatal(err)
	}
	return payload
}

// benchSnapshots are the events rows the benchmarks render: the taker
// filled by two makers the matching run's relay renders most, two orders
// filled once each, and a batch's larger row.
func benchSnapshots(tb testing.TB) []struct{ name, payload string } {
	return []struct{ name, payload string }{
		{"1 order 2 fills", renderSnapshots["taker filled by two makers"]},
		{"2 orders 2 fills", benchSnapshot(tb, 2, 1)},
		{"8 orders 16 fills", benchSnapshot(tb, 8, 2)},
	}
}

// BenchmarkRenderEvents renders benchSnapshots' rows.
func BenchmarkRenderEvents(b *testing.B) {
	for _, bc := range benchSnapshots(b) {
		entry := orders.OutboxEntry{ID: 7, Name: "events:ACC_01J9ZQ4T5V6W7X8Y9Z0A1B2C3D:BTC-USD", Version: 3, Payload: bc.payload}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if draftsSink, err = RenderEvents(entry); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestParseSnapshotRefusesMalformedPayloads(t *testing.T) {
	for _, payload := range []string{
		``, `[]`, `{`, `{"orders":[]`, `{"orders":[[1,2]}`, `{"orders":[[{"a":1}]],"fills":[],"accepted":[]}`,
		`{"orders":[["unterminated]],"fills":[],"accepted":[]}`, `{"orders":[],"fills":[],"accepted":[]} x`,
		`{"orders":[],"other":[]}`, `{"orders":[],,"fills":[]}`, `{"orders":[[,]]}`, `{"accepted":[1]}`,
		`{"orders":[],"fills":[],"accepted":["ORD_A",]}`,
	} {
		t.Run(payload, func(t *testing.T) {
			if snapshot, err := parseSnapshot(payload); err == nil {
				t.Fatalf("parseSnapshot(%q) = %+v, want an error", payload, snapshot)
			}
		})
	}
}

// FuzzParseSnapshot holds parseSnapshot to encoding/json: a payload both
// read as a snapshot of scalar columns gives the same columns and ids.
func FuzzParseSnapshot(f *testing.F) {
	for _, payload := range renderSnapshots {
		f.Add(payload)
	}
	f.Add(`{"accepted":["a\"b"],"orders":[[null,true,-1.5e3," \u00e9 "]]}`)
	f.Fuzz(func(t *testing.T, payload string) {
		got, err := parseSnapshot(payload)
		if err != nil {
			return // refused: the render tests hold it to what settle_events.sql writes
		}
		var want struct {
			Orders   [][]json.RawMessage `json:"orders"`
			Fills    [][]json.RawMessage `json:"fills"`
			Accepted []string            `json:"accepted"`
		}
		if json.Unmarshal([]byte(payload), &want) != nil {
			return // parseSnapshot checks the structure, scanColumn the scalars
		}
		for name, pair := range map[string][2][]jsonRow{"orders": {got.Orders, rawRows(want.Orders)}, "fills": {got.Fills, rawRows(want.Fills)}} {
			if !slices.EqualFunc(pair[0], pair[1], slices.Equal) {
				t.Fatalf("%s = %q, encoding/json reads %q", name, pair[0], pair[1])
			}
		}
		if !slices.Equal(got.Accepted, want.Accepted) && len(got.Accepted)+len(want.Accepted) > 0 {
			t.Fatalf("accepted = %q, encoding/json reads %q", got.Accepted, want.Accepted)
		}
	})
}

func rawRows(rows [][]json.RawMessage) []jsonRow {
	out := make([]jsonRow, len(rows))
	for i, row := range rows {
		out[i] = make(jsonRow, len(row))
		for j, column := range row {
			out[i][j] = string(column)
		}
	}
	return out
}

var snapshotSink eventSnapshot

// BenchmarkSnapshotParse compares parseSnapshot with what it replaced,
// encoding/json reading the rows as json.RawMessage, on the row of
// BenchmarkRenderEvents; read the ratio. The hand-written parser stays only
// while it is at least twice as fast as a library's: jsontext
// (github.com/go-json-experiment/json, its columns located by
// InputOffset) took 2.7-3.0 us and 23 allocations where it took 1.2-2.1 us
// and 6, on 2026-12-05 (load ~12).
func BenchmarkSnapshotParse(b *testing.B) {
	for _, bc := range benchSnapshots(b) {
		payload := bc.payload
		b.Run(bc.name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var rows struct {
					Orders   [][]json.RawMessage `json:"orders"`
					Fills    [][]json.RawMessage `json:"fills"`
					Accepted []string            `json:"accepted"`
				}
				if err := json.Unmarshal([]byte(payload), &rows); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/parseSnapshot", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if snapshotSink, err = parseSnapshot(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
