package orders

import (
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/govalues/decimal"
)

// The digit budget (docs/market.md, "The digit budget"). Settlement computes
// every amount exactly in the decimal type, which holds 19 significant
// digits: a fill's notional has the price's decimals and the quantity's
// (sp + sq), a fee four more and the fee rate's own (sp + sq + 4 + sb), and
// so does a buy's hold, the notional plus the taker fee on it. An amount
// with D decimals is exact only below 10^(19 − D). The door therefore
// refuses an order whose worst case, quantity × its budget price plus the
// taker fee on that, is above 10^(18 − D): a digit of headroom, so that the
// reference may move between the door and settlement, and the sums of an
// order's fills stay inside what its worst case bounds. Settlement holds
// each order to the type itself: one whose worst case reaches 10^(19 − D)
// at settlement's reference is rejected (ReasonAmountTooLarge).
//
// The budget price is the worst price an order's amounts are computed at:
// a limit buy's own price (it never pays more), and otherwise the band's
// top around the current reference: a market buy's protection price, and
// a sell's, whose fills happen at the bids it meets, which may lie above
// its own limit but not above the band (a bid above the band's top would
// have traded, making the reference at least its price).

// ReasonAmountTooLarge: the order's worst case (ErrAmountTooLarge) does
// not fit the decimal type settlement computes in, at the reference of the
// moment it settled; nothing of it happened.
const ReasonAmountTooLarge RejectReason = "amount_too_large"

// CancelAmountTooLarge: a resting order whose fill could not be computed
// exactly (an order admitted before the door held it to the budget, or
// whose instrument's grids changed under it) was canceled by the taker
// that met it, and its hold released; the taker matched on past it.
const CancelAmountTooLarge CancelReason = "amount_too_large"

// ErrAmountTooLarge matches every *AmountTooLargeError.
var ErrAmountTooLarge = errors.New("orders: an amount of the order is too large to settle exactly")

// AmountTooLargeError: an order whose worst case is above its instrument's
// MaxNotional. Field is the request field to change: the quantity, or the
// price of a limit buy when even one lot at it is too large.
type AmountTooLargeError struct {
	Symbol, Quote string
	Field         string
	// WorstCase is quantity × Price plus the taker fee on it, in Quote,
	// exactly, as text (it may not fit the decimal type); Limit is the
	// instrument's MaxNotional.
	WorstCase string
	Limit     decimal.Decimal
	// Price is the budget price; AtBandTop says it is the band's top (a
	// sell or a market order) rather than the order's own limit.
	Price     decimal.Decimal
	AtBandTop bool
	// MaxQuantity is the largest quantity on the lot grid within Limit at
	// Price; MaxPrice, for Field price, the highest price on the tick grid
	// at which one lot is.
	MaxQuantity, MaxPrice decimal.Decimal
}

func (e *AmountTooLargeError) Error() string {
	return fmt.Sprintf("orders: the %s of the %s order is too large: its worst case %s %s is above the limit of %s %s",
		e.Field, e.Symbol, e.WorstCase, e.Quote, e.Limit, e.Quote)
}

func (e *AmountTooLargeError) Unwrap() error { return ErrAmountTooLarge }

// AmountDecimals is how many decimals an amount settlement computes for the
// instrument's orders may have: a fee's, sp + sq + 4 + sb (the tick's, the
// lot's, a basis point's as a fraction and the fee rates').
func (in Instrument) AmountDecimals() int {
	return in.TickSize.Trim(0).Scale() + in.LotSize.Trim(0).Scale() + feeDecimals(in)
}

// feeDecimals is how many decimals a fee adds to the notional it is taken
// on: 4 for the basis point, and the rates' own.
func feeDecimals(in Instrument) int {
	return 4 + max(in.MakerFeeBps.Trim(0).Scale(), in.TakerFeeBps.Trim(0).Scale())
}

// MaxNotional is the most an order's worst case (quantity × its budget
// price plus the taker fee on that) may come to at the door, in the quote
// asset: 10^(18 − AmountDecimals), a digit below what the decimal type
// holds exactly.
func (in Instrument) MaxNotional() decimal.Decimal {
	return powerOfTen(18 - in.AmountDecimals())
}

// powerOfTen is 10^n as a decimal: n from −19 (a decimal's smallest
// step) to 18 (an int64's largest power), clamped to those.
func powerOfTen(n int) decimal.Decimal {
	n = min(max(n, -decimal.MaxScale), 18)
	if n < 0 {
		return decimal.MustNew(1, -n)
	}
	power := int64(1)
	for range n {
		power *= 10
	}
	return decimal.MustNew(power, 0)
}

// BudgetPrice is the price an order's amounts are budgeted at: a limit
// buy's own price, and the band's top otherwise (atBandTop).
func (in Instrument) BudgetPrice(side Side, typ OrderType, limit decimal.Decimal) (price decimal.Decimal, atBandTop bool, err error) {
	if side == Buy && typ == Limit {
		return limit, false, nil
	}
	_, high, err := in.Band()
	return high, true, err
}

// worstCase is quantity × price plus the taker fee on it, exactly.
func (in Instrument) worstCase(quantity, price decimal.Decimal) *big.Rat {
	rate := new(big.Rat).Quo(Rational(in.TakerFeeBps), Rational(bpsPerUnit))
	rate.Add(rate, big.NewRat(1, 1))
	worst := new(big.Rat).Mul(Rational(quantity), Rational(price))
	return worst.Mul(worst, rate)
}

// MaxQuantity is the largest quantity on the lot grid whose worst case at
// the band's top (where a sell or a market order is budgeted, and no limit
// buy above) stays within MaxNotional; zero when the band cannot be had.
func (in Instrument) MaxQuantity() decimal.Decimal {
	_, high, err := in.Band()
	if err != nil {
		return decimal.Zero
	}
	return in.maxQuantityAt(high)
}

// maxQuantityAt is the largest quantity on the lot grid whose worst case at
// price stays within MaxNotional.
func (in Instrument) maxQuantityAt(price decimal.Decimal) decimal.Decimal {
	if !price.IsPos() || !in.LotSize.IsPos() {
		return decimal.Zero
	}
	perLot := in.worstCase(in.LotSize, price)
	return in.onGridWithin(in.LotSize, perLot)
}

// onGridWithin is the largest multiple of grid whose worst case, perStep a
// step, stays within MaxNotional.
func (in Instrument) onGridWithin(grid decimal.Decimal, perStep *big.Rat) decimal.Decimal {
	steps := new(big.Rat).Quo(Rational(in.MaxNotional()), perStep)
	whole := new(big.Int).Quo(steps.Num(), steps.Denom())
	grid = grid.Trim(0)
	coef := new(big.Int).Mul(whole, new(big.Int).SetUint64(grid.Coef()))
	if !coef.IsInt64() {
		return decimal.Zero
	}
	d, err := decimal.New(coef.Int64(), grid.Scale())
	if err != nil {
		return decimal.Zero
	}
	return d
}

// CheckAmounts returns an *AmountTooLargeError when the command's worst
// case is above MaxNotional, or the band's own error when it cannot be
// computed. The command keeps every other rule (Check, CheckBand).
func (in Instrument) CheckAmounts(cmd PlaceCommand) error {
	price, atBandTop, err := in.BudgetPrice(cmd.Side, cmd.Type, cmd.Price)
	if err != nil {
		return err
	}
	limit := in.MaxNotional()
	// The worst case is a buy's hold at the budget price: exact in the
	// decimal type when it fits there (every order that passes, no
	// allocation), and as a big.Rat otherwise.
	if hold, err := Hold(Buy, cmd.Quantity, price, in.TakerFeeBps); err == nil && hold.Cmp(limit) <= 0 {
		return nil
	}
	worst := in.worstCase(cmd.Quantity, price)
	if worst.Cmp(Rational(limit)) <= 0 {
		return nil
	}
	tooLarge := &AmountTooLargeError{Symbol: in.Symbol, Quote: in.Quote, Field: "quantity", Limit: limit,
		WorstCase: exactText(worst), Price: price.Pad(in.TickSize.Scale()), AtBandTop: atBandTop,
		MaxQuantity: in.maxQuantityAt(price)}
	if !atBandTop && tooLarge.MaxQuantity.IsZero() {
		// Not even one lot fits at this price.
		tooLarge.Field = "price"
		tooLarge.MaxPrice = in.onGridWithin(in.TickSize, in.worstCase(in.LotSize, in.TickSize))
	}
	return tooLarge
}

// exactText is r, a decimal fraction of at most LedgerScale decimals, as
// plain text without trailing zeros.
func exactText(r *big.Rat) string {
	text := r.FloatString(LedgerScale)
	text = strings.TrimRight(text, "0")
	return strings.TrimSuffix(text, ".")
}

// fits reports whether the worst case of quantity at price (quantity ×
// price plus the taker fee on it), for an order whose amounts have up to
// decimals decimals, is below 10^(19 − decimals), as representable does.
// The worst case is a buy's hold at that price: computed exactly in the
// decimal type when it fits there (the common case, no allocation), and
// as a big.Rat otherwise.
func (in Instrument) fits(quantity, price decimal.Decimal, decimals int) bool {
	if decimals > LedgerScale {
		return false
	}
	if worst, err := Hold(Buy, quantity, price, in.TakerFeeBps); err == nil {
		return worst.Cmp(powerOfTen(decimal.MaxPrec-decimals)) < 0
	}
	return representable(in.worstCase(quantity, price), decimals)
}

// representable reports whether worst, the worst case of an order whose
// amounts have up to decimals decimals, is below 10^(19 − decimals): every
// amount of the order, and every sum of them its worst case bounds, is then
// exact in the decimal type.
func representable(worst *big.Rat, decimals int) bool {
	if decimals > LedgerScale {
		return false
	}
	ceiling := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(decimal.MaxPrec-decimals)), nil))
	return worst.Cmp(ceiling) < 0
}
