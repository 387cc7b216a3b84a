package orders

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/govalues/decimal"
)

// Liquidity says which part an order played in a trade: the maker rested in
// the book, the taker arrived and took it.
type Liquidity string

const (
	LiquidityMaker Liquidity = "maker"
	LiquidityTaker Liquidity = "taker"
)

// Execution is one trade as one of its two accounts sees it: its own order,
// its own side, its own fee. (Fill is the matching's decision, before
// anything is written; an Execution is a trade read back for an account.)
// Both accounts' executions of a trade share its ID.
type Execution struct {
	// ID is the trade's, FIL_<trades.id>.
	ID string `json:"id"`
	// OrderID is the account's order in the trade.
	OrderID string `json:"order_id"`
	Symbol  string `json:"symbol"`
	// Side is the account's: the taker's side when it took, the opposite
	// when its order rested.
	Side     Side            `json:"side"`
	Price    decimal.Decimal `json:"price"`
	Quantity decimal.Decimal `json:"quantity"`
	// Fee is what the account paid, in FeeAsset (the instrument's quote).
	Fee       decimal.Decimal `json:"fee"`
	FeeAsset  string          `json:"fee_asset"`
	Liquidity Liquidity       `json:"liquidity"`
	CreatedAt time.Time       `json:"created_at"`
}

// ExecutionQuery selects one page of an account's executions, newest first.
type ExecutionQuery struct {
	// Limit is the most executions on the page, 1 to MaxListLimit; zero
	// means DefaultListLimit.
	Limit int
	// After is a fill id: the page starts with the next older execution.
	// Empty starts with the newest.
	After string
	// OrderID keeps only the executions of this order of the account; empty
	// keeps every one.
	OrderID string
}

// ExecutionPage is one page of a listing of executions.
type ExecutionPage struct {
	Executions []Execution
	// Next is the After of the next page (the id of this page's last
	// execution), or empty when no older one is left.
	Next string
}

const fillIDPrefix = "FIL_"

// ErrMalformedFillID: the string is not a FIL id.
var ErrMalformedFillID = errors.New("orders: malformed fill id")

// FillID is the id of the trade with the trades row id tradeID.
func FillID(tradeID int64) string {
	return fillIDPrefix + strconv.FormatInt(tradeID, 10)
}

// ParseFillID checks a FIL id and returns its trade's row id: FIL_ and a
// positive decimal integer without leading zeros, as FillID writes it.
func ParseFillID(id string) (int64, error) {
	raw, found := strings.CutPrefix(id, fillIDPrefix)
	n, err := strconv.ParseInt(raw, 10, 64)
	if !found || err != nil || n < 1 || FillID(n) != id {
		return 0, fmt.Errorf("%w: %q", ErrMalformedFillID, id)
	}
	return n, nil
}

// Opposite is the other side.
func (s Side) Opposite() Side {
	if s == Buy {
		return Sell
	}
	return Buy
}
