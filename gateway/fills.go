package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

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
	var (
		query  orders.ExecutionQuery
		fields []FieldError
	)
	refuse := func(name, format string, args ...any) {
		fields = append(fields, FieldError{Pointer: "", Reason: "query parameter " + name + " " + fmt.Sprintf(format, args...)})
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if !slices.Contains(fillsParameters, name) {
			refuse(name, "is not defined; this operation takes %s", strings.Join(fillsParameters, ", "))
		}
	}
	for _, name := range fillsParameters {
		values, given := params[name]
		if !given {
			continue
		}
		if len(values) > 1 {
			refuse(name, "is given %d times; give it at most once", len(values))
			continue
		}
		value := values[0]
		switch name {
		case "limit":
			limit, err := strconv.Atoi(value)
			if !limitPattern.MatchString(value) || err != nil || limit > orders.MaxListLimit {
				refuse(name, "must be an integer from 1 to %d", orders.MaxListLimit)
				continue
			}
			query.Limit = limit
		case "cursor":
			after, err := decodeFillCursor(value)
			if err != nil {
				refuse(name, "is not a cursor this API issued; pass next_cursor from the previous page unchanged")
				continue
			}
			query.After = after
		case "order_id":
			if _, err := orders.ParseOrderID(value); err != nil {
				refuse(name, "must be an order id, ORD_ and 26 characters of Crockford base32")
				continue
			}
			query.OrderID = value
		}
	}
	if len(fields) > 0 {
		return orders.ExecutionQuery{}, &requestError{kind: kindInvalidQuery, detail: fmt.Sprintf("%d query parameter(s) refused", len(fields)), fields: fields}
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
