package orders

import (
	"encoding/json"
	"time"
)

// EventType names what an account's event announces.
type EventType string

// The event types. Each carries the resource it announces as the REST
// routes show it: an Order for the order events, an Execution for a fill, a
// Balance for a balance.
const (
	EventOrderAccepted        EventType = "order.accepted"
	EventOrderOpen            EventType = "order.open"
	EventOrderPartiallyFilled EventType = "order.partially_filled"
	EventOrderFilled          EventType = "order.filled"
	EventOrderCanceled        EventType = "order.canceled"
	EventOrderRejected        EventType = "order.rejected"
	EventFill                 EventType = "fill"
	EventBalance              EventType = "balance"
)

// Event is one event of an account's stream as a client receives it.
type Event struct {
	// Sequence is the event's place in the account's stream: it rises by
	// one with each event, so a client sees what it missed.
	Sequence int64 `json:"sequence"`
	// ID names the event; a redelivered event keeps it.
	ID   string    `json:"id"`
	Type EventType `json:"type"`
	// Time is when the event entered the stream.
	Time time.Time `json:"time"`
	// Data is the resource, as its REST route shows it.
	Data json.RawMessage `json:"data"`
}

// EventDraft is an event before its account's stream numbers it.
type EventDraft struct {
	ID   string
	Type EventType
	// Data is the resource's JSON, as its REST route shows it.
	Data json.RawMessage
}

// OrderEventType is the event announcing an order reached status.
func OrderEventType(status Status) EventType {
	switch status {
	case StatusOpen:
		return EventOrderOpen
	case StatusPartiallyFilled:
		return EventOrderPartiallyFilled
	case StatusFilled:
		return EventOrderFilled
	case StatusCanceled:
		return EventOrderCanceled
	case StatusRejected:
		return EventOrderRejected
	}
	return EventOrderAccepted
}

// AcceptedEventID is the id of an order's order.accepted event.
func AcceptedEventID(orderID string) string { return orderID + ":accepted" }

// Admitted is the order as its admission left it, before any worker took
// it: status pending and none of the fields settlement decides. An
// order.accepted event carries it, rendered from the order's first row.
func (o Order) Admitted() Order {
	return Order{
		ID: o.ID, ClientOrderID: o.ClientOrderID, Account: o.Account, Symbol: o.Symbol, Side: o.Side,
		Type: o.Type, TimeInForce: o.TimeInForce, PostOnly: o.PostOnly, Quantity: o.Quantity, Price: o.Price,
		Status: StatusPending, CreatedAt: o.CreatedAt,
	}
}
