package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/govalues/decimal"
	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
)

// DepthReader reads an instrument's aggregated book (postgres.Book); it
// serves GET /v1/instruments/{symbol}/book, which answers 500 when
// Deps.Depth is nil.
type DepthReader interface {
	Levels(ctx context.Context, in orders.Instrument, depth int) (orders.Depth, error)
}

var errNoDepthReader = errors.New("gateway: no book reader configured (Deps.Depth)")

// instrumentView is one instrument as GET /v1/instruments shows it.
type instrumentView struct {
	Symbol           string          `json:"symbol"`
	Base             string          `json:"base"`
	Quote            string          `json:"quote"`
	TickSize         decimal.Decimal `json:"tick_size"`
	LotSize          decimal.Decimal `json:"lot_size"`
	MinNotional      decimal.Decimal `json:"min_notional"`
	PriceBandPercent decimal.Decimal `json:"price_band_percent"`
	MakerFeeBps      decimal.Decimal `json:"maker_fee_bps"`
	TakerFeeBps      decimal.Decimal `json:"taker_fee_bps"`
	Status           string          `json:"status"`
	ReferencePrice   decimal.Decimal `json:"reference_price"`
	// MaxNotional and MaxQuantity are the digit budget's limits
	// (orders.Instrument.MaxNotional, MaxQuantity at the current band).
	MaxNotional decimal.Decimal `json:"max_notional"`
	MaxQuantity decimal.Decimal `json:"max_quantity"`
}

type instrumentList struct {
	Instruments []instrumentView `json:"instruments"`
}

// freshInstruments rereads the instruments when a change was announced
// since the copy was loaded (placement.Instruments.Fresh); a reread that
// fails leaves the copy, refreshed on its interval, to answer.
func (s *Server) freshInstruments(c echo.Context) {
	if err := s.instruments.Fresh(c.Request().Context()); err != nil && s.rereadWarnings.Allow() {
		s.requestLogger(c).Warn("instruments not reread after a change; the last copy answers", "err", err)
	}
}

// listInstruments answers the gateway's copy of the instruments table: no
// round trip, and as fresh as a halt is for placements.
func (s *Server) listInstruments(c echo.Context) error {
	if err := readQuery(c.QueryParams(), nil, nil); err != nil {
		return err
	}
	s.freshInstruments(c)
	all := s.instruments.All()
	body := instrumentList{Instruments: make([]instrumentView, 0, len(all))}
	for _, in := range all {
		status := "trading"
		if in.Halted {
			status = "halted"
		}
		body.Instruments = append(body.Instruments, instrumentView{
			Symbol: in.Symbol, Base: in.Base, Quote: in.Quote, TickSize: in.TickSize, LotSize: in.LotSize,
			MinNotional: in.MinNotional, PriceBandPercent: in.PriceBandPercent,
			MakerFeeBps: in.MakerFeeBps, TakerFeeBps: in.TakerFeeBps, Status: status,
			ReferencePrice: in.Reference().Pad(in.TickSize.Scale()),
			MaxNotional:    in.MaxNotional(), MaxQuantity: in.MaxQuantity(),
		})
	}
	return c.JSON(http.StatusOK, body)
}

// getBook answers an instrument's book from PostgreSQL, at most ?depth=
// levels a side.
func (s *Server) getBook(c echo.Context) error {
	if s.depth == nil {
		return errNoDepthReader
	}
	s.freshInstruments(c)
	in, err := s.instruments.Lookup(c.Param("symbol"))
	if err != nil {
		return err
	}
	depth, err := depthQueryOf(c)
	if err != nil {
		return err
	}
	book, err := s.depth.Levels(c.Request().Context(), in, depth)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, book)
}

// depthQueryOf reads the book's one optional parameter, depth, strictly.
func depthQueryOf(c echo.Context) (int, error) {
	depth := orders.DefaultBookDepth
	err := readQuery(c.QueryParams(), []string{"depth"}, func(_, value string, refuse func(string, ...any)) {
		n, err := strconv.Atoi(value)
		if !limitPattern.MatchString(value) || err != nil || n > orders.MaxBookDepth {
			refuse("must be an integer from 1 to %d", orders.MaxBookDepth)
			return
		}
		depth = n
	})
	if err != nil {
		return 0, err
	}
	return depth, nil
}
