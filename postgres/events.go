package postgres

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ordergate/ordergate/orders"
)

//go:embed sql/settle_events.sql
var settleEventsSQL string

// eventSnapshot is an events row's payload: the account's orders and fills
// as the write left them, each a row of the columns scanOrder and
// scanExecution read.
type eventSnapshot struct {
	Orders, Fills []jsonRow
	// Accepted are the ids of the orders whose row the write inserted.
	Accepted []string
}

// eventDataSize is room for a typical event's data (an order's JSON is
// the longest), so a row's buffer seldom grows.
const eventDataSize = 384

// jsonRow is a row as the JSON text of each of its columns
// (parseSnapshot); Scan reads it as pgx reads a row, so scanOrder and
// scanExecution read a snapshot as they read a query.
type jsonRow []string

func (r jsonRow) Scan(dest ...any) error {
	if len(dest) != len(r) {
		return fmt.Errorf("a snapshot row of %d columns scanned into %d", len(r), len(dest))
	}
	for i, column := range r {
		if err := scanColumn(column, dest[i]); err != nil {
			return fmt.Errorf("snapshot column %d: %w", i+1, err)
		}
	}
	return nil
}

// scanColumn reads one JSON value into dest: the types scanOrder and
// scanExecution scan into directly, without reflection (the relay renders
// every order a batch touched), anything else through encoding/json.
func scanColumn(text string, dest any) error {
	null := text == "null"
	switch d := dest.(type) {
	case *string:
		if null {
			*d = ""
			return nil
		}
		return unquote(text, d)
	case **string:
		if null {
			*d = nil
			return nil
		}
		var v string
		if err := unquote(text, &v); err != nil {
			return err
		}
		*d = &v
		return nil
	case *bool:
		v, err := strconv.ParseBool(text)
		*d = v
		return err
	case *int:
		v, err := strconv.Atoi(text)
		*d = v
		return err
	case *int64:
		v, err := strconv.ParseInt(text, 10, 64)
		*d = v
		return err
	case *time.Time:
		if null {
			*d = time.Time{}
			return nil
		}
		var v string
		if err := unquote(text, &v); err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		*d = t
		return err
	}
	return json.Unmarshal([]byte(text), dest)
}

// unquote reads a JSON string: without escapes (ids, codes, decimals,
// times) as it stands, otherwise by encoding/json.
func unquote(text string, into *string) error {
	if len(text) >= 2 && text[0] == '"' && text[len(text)-1] == '"' && !strings.ContainsAny(text[1:len(text)-1], "\\\"") {
		*into = text[1 : len(text)-1]
		return nil
	}
	return json.Unmarshal([]byte(text), into)
}

// RenderEvents turns an events row (name "events:<account>:<symbol>",
// version, snapshot payload) into the account's events, as clients receive
// them but for their sequence: the order.accepted of each order whose row
// the write inserted (admission appends none: the account's log is on
// another Redis slot than the order's queue), its fills, then its orders'
// new states, each as its REST route shows it. An event's id is stable
// across redeliveries: an order.accepted's is "<order id>:accepted", a
// fill's its id (an account is on one side of a trade), an order state's
// "<order id>:<source>@<version>". The outbox relay appends them to the
// account's log (placement/account_events_append.go). It stays beside the
// SQL: a snapshot row is the columns settle_events.sql builds, read by the
// scanners of the queries that read the same rows.
func RenderEvents(entry orders.OutboxEntry) ([]orders.EventDraft, error) {
	snapshot, err := parseSnapshot(entry.Payload)
	if err != nil {
		return nil, fmt.Errorf("postgres: events %s@%d: %w", entry.Name, entry.Version, err)
	}
	events := len(snapshot.Accepted) + len(snapshot.Orders) + len(snapshot.Fills)
	drafts := make([]orders.EventDraft, 0, events)
	// Every event's data is encoded into one buffer, without reflection
	// (AppendJSON writes what encoding/json would), and cut into the
	// drafts once it no longer grows: one allocation for a row's data.
	data := make([]byte, 0, events*eventDataSize)
	ends := make([]int, 0, events)
	list := make([]orders.Order, len(snapshot.Orders))
	for i, row := range snapshot.Orders {
		order, err := scanOrder(row)
		if err != nil {
			return nil, fmt.Errorf("postgres: events %s@%d: %w", entry.Name, entry.Version, err)
		}
		list[i] = order
	}
	for _, id := range snapshot.Accepted {
		i := slices.IndexFunc(list, func(o orders.Order) bool { return o.ID == id })
		if i < 0 {
			return nil, fmt.Errorf("postgres: events %s@%d: accepted order %s is not in the snapshot", entry.Name, entry.Version, id)
		}
		if data, err = list[i].Admitted().AppendJSON(data); err != nil {
			return nil, err
		}
		drafts, ends = append(drafts, orders.EventDraft{ID: orders.AcceptedEventID(id), Type: orders.EventOrderAccepted}), append(ends, len(data))
	}
	for _, row := range snapshot.Fills {
		fill, err := scanExecution(row)
		if err != nil {
			return nil, fmt.Errorf("postgres: events %s@%d: %w", entry.Name, entry.Version, err)
		}
		if data, err = fill.AppendJSON(data); err != nil {
			return nil, err
		}
		drafts, ends = append(drafts, orders.EventDraft{ID: fill.ID, Type: orders.EventFill}), append(ends, len(data))
	}
	source := ":" + entry.Name + "@" + strconv.FormatInt(entry.Version, 10)
	for _, order := range list {
		if data, err = order.AppendJSON(data); err != nil {
			return nil, err
		}
		drafts, ends = append(drafts, orders.EventDraft{ID: order.ID + source, Type: orders.OrderEventType(order.Status)}), append(ends, len(data))
	}
	begin := 0
	for i, end := range ends {
		drafts[i].Data = data[begin:end:end]
		begin = end
	}
	return drafts, nil
}
