package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
)

// FillReader reads an account's fills (postgres.Fills); it serves GET
// /v1/fills, which answers 500 when Deps.Fills is nil.
type FillReader interface {
	List(ctx context.Context, account string, q orders.ExecutionQuery) (orders.ExecutionPage, error)
}

var errNoFillReader = errors.New("gateway: no fill reader configured (Deps.Fills)")

// fillList is the body of GET /v1/fills.
type fillList struct {
	Fills      []orders.Execution `json:"fills"`
	NextCursor string             `json:"next_cursor,omitempty"`
}

// listFills answers one page of the caller's fills, newest first, as
// listOrders answers orders.
func (s *Server) listFills(c echo.Context) error {
	if s.fills == nil {
		return errNoFillReader
	}
	query, err := fillsQueryOf(c.QueryParams())
	if err != nil {
		return err
	}
	page, err := s.fills.List(c.Request().Context(), account(c), query)
	if err != nil {
		return err
	}
	body := fillList{Fills: page.Executions}
	if body.Fills == nil {
		body.Fills = []orders.Execution{}
	}
	if page.Next != "" {
		body.NextCursor = encodeCursor(page.Next)
	}
	return c.JSON(http.StatusOK, body)
}

// The query parameters of GET /v1/fills, in the order their errors are listed.
var fillsParameters = []string{"limit", "cursor", "order_id"}

// fillsQueryOf reads the fills listing's query parameters as strictly as
// listQueryOf reads the orders listing's. An order_id that is well formed
// but not the caller's is no error: it has no fills of the caller's, so the
// page is empty, as for an order that never traded.
func fillsQueryOf(params url.Values) (orders.ExecutionQuery, error) {
	var query orders.ExecutionQuery
	err := readQuery(params, fillsParameters, func(name, value string, refuse func(string, ...any)) {
		switch name {
		case "limit":
			if limit, ok := readLimit(value, refuse); ok {
				query.Limit = limit
			}
		case "cursor":
			after, err := decodeFillCursor(value)
			if err != nil {
				refuse("is not a cursor this API issued; pass next_cursor from the previous page unchanged")
				return
			}
			query.After = after
		case "order_id":
			if _, err := orders.ParseOrderID(value); err != nil {
				refuse("must be an order id, ORD_ and 26 characters of Crockford base32")
				return
			}
			query.OrderID = value
		}
	})
	if err != nil {
		return orders.ExecutionQuery{}, err
	}
	return query, nil
}

// decodeFillCursor reads a cursor of the fills listing: the last listed
// fill's id in base64url, as encodeCursor writes it.
func decodeFillCursor(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil {
		return "", err
	}
	id := string(raw)
	if _, err := orders.ParseFillID(id); err != nil {
		return "", err
	}
	return id, nil
}
