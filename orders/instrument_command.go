package orders

import (
	"encoding/json"
	"fmt"
	"strings"
)

// KindCommand is the job kind of a command on an instrument's resting
// orders: it travels the instrument's queue like an order (KindPlace), in
// the account's lane, so the instrument's owner decides it in sequence with
// the orders, on its book in memory. What the command does is its payload's
// kind (CommandKind): one job kind for cancels now and amends later, so a
// queue declared once accepts every command a newer gateway sends.
const KindCommand = "order.command"

// CommandKind is what an instrument command does.
type CommandKind string

const (
	// CommandCancel cancels one resting order of the account.
	CommandCancel CommandKind = "cancel"
	// CommandCancelAll cancels every resting order of the account on the
	// instrument.
	CommandCancelAll CommandKind = "cancel_all"
)

// Command is an instrument command as its queue job carries it (JSON).
// Planned: "amend" (a resting order's new price or quantity, keeping or
// losing its time priority per venue rules) adds its fields here.
type Command struct {
	Kind    CommandKind `json:"kind"`
	Account string      `json:"account"`
	// Symbol is the instrument whose queue carries the command ("symbol",
	// as an order's payload names it, so emq's CancelGroup matches both).
	Symbol string `json:"symbol"`
	// OrderID is the order a cancel (or an amend) acts on; empty for a
	// cancel-all.
	OrderID string `json:"order_id,omitempty"`
}

const commandIDPrefix = "CMD_"

// NewCommandID mints a command job's id, CMD_<ULID>: never an order's, so
// the queue's look-ups by order id never find a command.
func NewCommandID() string {
	return commandIDPrefix + strings.TrimPrefix(NewOrderID(), orderIDPrefix)
}

// CancelDedupKey is the dedup key of the cancel of the order id: a retried
// cancel finds the job of the first while the queue's dedup retention
// holds it. It holds no ':', so no account's client order id key
// (account:client order id) can be it.
func CancelDedupKey(orderID string) string { return "cancel/" + orderID }

// Payload is the command's JSON as its queue job carries it.
func (c Command) Payload() ([]byte, error) { return json.Marshal(c) }

// DecodeCommand reads the command job id carries; a payload that is no
// command it knows is ErrMalformedOrder, which no retry cures.
func DecodeCommand(id string, payload []byte) (Command, error) {
	var c Command
	if err := json.Unmarshal(payload, &c); err != nil {
		return Command{}, fmt.Errorf("%w: command %s: %w", ErrMalformedOrder, id, err)
	}
	switch {
	case c.Account == "" || c.Symbol == "":
		return Command{}, fmt.Errorf("%w: command %s names no account or instrument", ErrMalformedOrder, id)
	case c.Kind == CommandCancel && c.OrderID == "":
		return Command{}, fmt.Errorf("%w: command %s cancels no order", ErrMalformedOrder, id)
	case c.Kind != CommandCancel && c.Kind != CommandCancelAll:
		return Command{}, fmt.Errorf("%w: command %s is of kind %q", ErrMalformedOrder, id, c.Kind)
	}
	return c, nil
}
