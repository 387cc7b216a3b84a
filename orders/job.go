package orders

import "strings"

// QueuePrefix and an instrument's symbol name the queue its orders are
// admitted to: "orders.<SYMBOL>". Each queue's keys carry its own hash tag
// ({orders.<SYMBOL>}), so on a Redis Cluster each instrument's queue is a
// slot of its own and the instruments spread over the masters.
const QueuePrefix = "orders."

// InstrumentQueue is the name of the queue of the symbol's orders.
func InstrumentQueue(symbol string) string { return QueuePrefix + symbol }

// QueueSymbol is the symbol whose orders the queue named name holds under
// prefix (QueuePrefix, or a bench's own); false for another queue.
func QueueSymbol(prefix, name string) (string, bool) {
	symbol, ok := strings.CutPrefix(name, prefix)
	return symbol, ok && symbol != ""
}

// KindPlace is the job kind of an order to settle.
const KindPlace = "order.place"

// Payload is the order's JSON as its queue job carries it, encoded by hand:
// the reflection of json.Marshal is a visible share of a placement's CPU
// (see AppendJSON).
func (o Order) Payload() ([]byte, error) { return o.AppendJSON(make([]byte, 0, orderJSONSize)) }
