package orders

// Queue is the name of the queue orders are admitted to; its keys live under
// the {orders} hash tag.
const Queue = "orders"

// KindPlace is the job kind of an order to settle.
const KindPlace = "order.place"

// Payload is the order's JSON as its queue job carries it, encoded by hand:
// the reflection of json.Marshal is a visible share of a placement's CPU
// (see AppendJSON).
func (o Order) Payload() ([]byte, error) { return o.AppendJSON(make([]byte, 0, orderJSONSize)) }
