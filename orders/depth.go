package orders

import "github.com/govalues/decimal"

// Bounds of a book read.
const (
	DefaultBookDepth = 10
	MaxBookDepth     = 100
)

// DepthLevel is one price of one side of a book: the resting orders at it,
// their remaining quantity summed.
type DepthLevel struct {
	Price    decimal.Decimal `json:"price"`
	Quantity decimal.Decimal `json:"quantity"`
	Orders   int             `json:"orders"`
}

// Depth (market depth) is the aggregated resting orders of one instrument, best first on
// each side: bids by price descending, asks ascending.
type Depth struct {
	Symbol string       `json:"symbol"`
	Bids   []DepthLevel `json:"bids"`
	Asks   []DepthLevel `json:"asks"`
}
