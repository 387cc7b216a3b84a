package orders

import (
	"fmt"

	"github.com/govalues/decimal"
)

// The rules every order keeps, whoever made it: the gateway's command and a
// queue job's payload are held to them by the same code (PlaceCommand.Validate
// and Order.Validate), so what settlement accepts is what admission could have
// admitted.

// orderRules returns every rule the fields of an order or command break.
// price is nil for a market order.
func orderRules(account string, side Side, typ OrderType, tif TimeInForce, postOnly bool, quantity decimal.Decimal, price *decimal.Decimal) []FieldError {
	var refused []FieldError
	refuse := func(field, reason string) { refused = append(refused, FieldError{Field: field, Reason: reason}) }
	if account == VenueAccount || account == ExternalAccount {
		refuse("account_id", "account "+account+" cannot place orders")
	}
	if side != Buy && side != Sell {
		refuse("side", fmt.Sprintf("%q is not buy or sell", side))
	}
	if !quantity.IsPos() {
		refuse("quantity", "must be greater than zero")
	}
	switch typ {
	case Limit:
		if price == nil || !price.IsPos() {
			refuse("price", "a limit order needs a positive price")
		}
	case Market:
		if price != nil {
			refuse("price", "a market order has no price")
		}
	default:
		refuse("type", fmt.Sprintf("%q is not limit or market", typ))
	}
	switch {
	case !tif.Valid():
		refuse("time_in_force", fmt.Sprintf("%q is not gtc, ioc or fok", tif))
	case typ == Market && tif != IOC:
		refuse("time_in_force", "a market order is ioc")
	case postOnly && (typ != Limit || tif != GTC):
		refuse("post_only", "only a limit gtc order can be post-only")
	}
	return refused
}

// Validate returns an *InvalidError listing every rule the command breaks,
// or nil. The gateway refuses such requests itself, with its own wording; a
// command that passes it passes this too.
func (c PlaceCommand) Validate() error {
	// A market command's Price is ignored (NewOrder drops it), as its
	// fingerprint ignores it.
	var price *decimal.Decimal
	if c.Type != Market {
		price = &c.Price
	}
	if refused := orderRules(c.Account, c.Side, c.Type, c.TimeInForceOrDefault(), c.PostOnly, c.Quantity, price); len(refused) > 0 {
		return &InvalidError{Fields: refused}
	}
	return nil
}

// NewOrder is the pending order cmd places, under a new ORD id; a command
// that breaks a rule is refused with an *InvalidError.
func NewOrder(cmd PlaceCommand) (Order, error) {
	if err := cmd.Validate(); err != nil {
		return Order{}, err
	}
	id := NewOrderID()
	created, _ := ParseOrderID(id)
	order := Order{
		ID:            id,
		ClientOrderID: cmd.ClientOrderID,
		Account:       cmd.Account,
		Symbol:        cmd.Symbol,
		Side:          cmd.Side,
		Type:          cmd.Type,
		TimeInForce:   cmd.TimeInForceOrDefault(),
		PostOnly:      cmd.PostOnly,
		Quantity:      cmd.Quantity,
		Status:        StatusPending,
		CreatedAt:     created,
	}
	if cmd.Type == Limit {
		price := cmd.Price
		order.Price = &price
	}
	return order, nil
}

// Validate returns an *InvalidError listing every rule the order breaks: its
// id, its creation time and the rules of every command.
func (o Order) Validate() error {
	if refused := o.rules(); len(refused) > 0 {
		return &InvalidError{Fields: refused}
	}
	return nil
}

func (o Order) rules() []FieldError {
	var refused []FieldError
	if _, err := ParseOrderID(o.ID); err != nil {
		refused = append(refused, FieldError{Field: "id", Reason: fmt.Sprintf("%q is no ORD id", o.ID)})
	}
	refused = append(refused, orderRules(o.Account, o.Side, o.Type, o.TimeInForce, o.PostOnly, o.Quantity, o.Price)...)
	if o.CreatedAt.IsZero() {
		refused = append(refused, FieldError{Field: "created_at", Reason: "is required"})
	}
	return refused
}

// DecodeOrder reads the order a queue job with the id carries, and refuses
// (ErrMalformedOrder) one that no settlement could ever succeed with.
func DecodeOrder(id string, payload []byte) (Order, error) {
	var order Order
	if err := unmarshalOrder(payload, &order); err != nil {
		return Order{}, fmt.Errorf("%w: job %s: %w", ErrMalformedOrder, id, err)
	}
	// A job admitted before orders had a time in force means the default.
	order.TimeInForce = defaultTimeInForce(order.Type, order.TimeInForce)
	refused := order.rules()
	if order.ID != id {
		refused = append(refused, FieldError{Field: "id", Reason: fmt.Sprintf("%q is not the job's", order.ID)})
	}
	if len(refused) > 0 {
		return Order{}, fmt.Errorf("%w: job %s: %s", ErrMalformedOrder, id, fieldList(refused))
	}
	return order, nil
}
