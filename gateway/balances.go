package gateway

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
)

// BalanceReader reads an account's balances (placement.Balances); it serves
// GET /v1/balances, which answers 500 when Deps.Balances is nil.
type BalanceReader interface {
	Of(ctx context.Context, account string) ([]orders.Balance, error)
}

type balanceList struct {
	Balances []orders.Balance `json:"balances"`
}

var errNoBalanceReader = errors.New("gateway: no balance reader configured (Deps.Balances)")

func (s *Server) listBalances(c echo.Context) error {
	if err := readQuery(c.QueryParams(), nil, nil); err != nil {
		return err
	}
	if s.balances == nil {
		return errNoBalanceReader
	}
	balances, err := s.balances.Of(c.Request().Context(), account(c))
	if err != nil {
		return err
	}
	if balances == nil {
		// An account without balances answers an empty list, never null.
		balances = []orders.Balance{}
	}
	return c.JSON(http.StatusOK, balanceList{Balances: balances})
}
