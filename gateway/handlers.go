package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

// placeOrder admits an order. Its rate limit permit is taken by the admit
// script itself, in the same run as the admission: one Redis call per
// placement, not two. A request refused before admission (a bad body) takes
// its permit on its own, so bad requests are limited like any other.
func (s *Server) placeOrder(c echo.Context) error {
	cmd, err := s.placeCommandOf(c)
	if err != nil {
		if limited := s.takePermit(c); limited != nil {
			return limited
		}
		return err
	}
	if err := c.Request().Context().Err(); err != nil {
		// Nothing is sent with an ended context: the admission might reach
		// Redis all the same, while its answer would be 503.
		return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	// One call a case: a slice built up for the options would be on the
	// heap, each request.
	var placed placement.Placement
	if s.limiting() {
		placed, err = s.placer.Place(c.Request().Context(), cmd, placement.WithRateLimit(state(c).bucket, s.limit()))
	} else {
		placed, err = s.placer.Place(c.Request().Context(), cmd)
	}
	if limited, ok := errors.AsType[*placement.RateLimitedError](err); ok {
		return s.answerTake(c, limited.Take)
	}
	if placed.Take != nil {
		// Allowed (the take came before the outcome), so only the headers:
		// on an admission and on a refusal that spent the permit alike.
		_ = s.answerTake(c, *placed.Take)
	}
	if err != nil {
		return err
	}
	order := placed.Order
	state(c).order = order.ID
	header := c.Response().Header()
	header.Set(echo.HeaderLocation, "/v1/orders/"+order.ID)
	if placed.Replayed {
		header.Set("Idempotent-Replayed", "true")
		if !reads(c) {
			order = asPlaced(cmd, order.ID)
		}
		return c.JSON(http.StatusOK, order)
	}
	if c.Request().URL.RawQuery != "" {
		return c.JSON(http.StatusAccepted, order) // echo's ?pretty and friends
	}
	// The order's JSON was made once, for the queue job; it is the answer
	// too, ended by a newline as c.JSON ends its answers: written as two
	// pieces (into the response's buffer), not appended to, which copied it.
	return writeJSON(c, http.StatusAccepted, placed.JSON)
}

// newline ends a JSON answer, as c.JSON ends its answers.
var newline = []byte{'\n'}

// jsonContentType is Content-Type's value on a JSON answer, shared by all
// of them: its capacity is its length, so an Add copies it first.
var jsonContentType = []string{echo.MIMEApplicationJSON}

// writeJSON answers status with body, a JSON value, and a newline: what
// c.JSONBlob(status, append(body, '\n')) sends.
func writeJSON(c echo.Context, status int, body []byte) error {
	res := c.Response()
	if res.Header().Get(echo.HeaderContentType) == "" {
		// Shared, not Set: Set makes a slice for the value, every answer.
		res.Header()[echo.HeaderContentType] = jsonContentType
	}
	res.WriteHeader(status)
	if _, err := res.Write(body); err != nil {
		return err
	}
	_, err := res.Write(newline)
	return err
}

// asPlaced is the order with the id as its placement answered it, from
// what the request asked (the replay's request is the first one's): status
// pending, nothing filled. It is a replay's answer to a key without the
// read scope, which may place the order but not read what became of it.
func asPlaced(cmd orders.PlaceCommand, id string) orders.Order {
	order, err := orders.NewOrder(cmd)
	if err != nil {
		// The command was admitted: it is valid.
		return orders.Order{ID: id, ClientOrderID: cmd.ClientOrderID, Account: cmd.Account, Status: orders.StatusPending}
	}
	order.ID = id
	order.CreatedAt, _ = orders.ParseOrderID(id)
	return order
}

// placeCommandOf reads, decodes and checks the request's order.
func (s *Server) placeCommandOf(c echo.Context) (orders.PlaceCommand, error) {
	body, err := s.requestBody(c, readJSONBody)
	if err != nil {
		return orders.PlaceCommand{}, err
	}
	req, err := decodePlaceRequest(body)
	if err != nil {
		return orders.PlaceCommand{}, err
	}
	s.freshInstruments(c)
	return s.placeCommand(account(c), req)
}

func (s *Server) getOrder(c echo.Context) error {
	order, err := s.placer.Order(c.Request().Context(), account(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, order)
}

func (s *Server) cancelOrder(c echo.Context) error {
	order, err := s.placer.Cancel(c.Request().Context(), account(c), c.Param("id"))
	var undecided *placement.CancelUndecidedError
	if errors.As(err, &undecided) && len(undecided.Orders) == 1 {
		// Queued, not decided within the wait: the order as it stands, and
		// where to read what becomes of it.
		order := undecided.Orders[0]
		c.Response().Header().Set(echo.HeaderLocation, "/v1/orders/"+order.ID)
		s.requestLogger(c).Info("order cancel queued, not decided yet", "order_id", order.ID, "account", order.Account)
		return c.JSON(http.StatusAccepted, order)
	}
	var unrecorded *orders.CancelNotRecordedError
	if errors.As(err, &unrecorded) {
		// The queue canceled the job, but until the canceled row exists a
		// worker whose lease ran out may still settle the order: only the row
		// decides. So no 200 yet; the client's retry reads the order, which
		// writes the row or finds the settlement, and answers truthfully.
		s.requestLogger(c).Error("order canceled in the queue but its orders row was not written; answering unavailable",
			"order_id", unrecorded.Order.ID, "account", unrecorded.Order.Account, "err", unrecorded.Err)
		return fmt.Errorf("%w: %w", orders.ErrUnavailable, err)
	}
	var notCancelable *orders.NotCancelableError
	if errors.As(err, &notCancelable) && !reads(c) {
		// Its status is the order's state, which the key may not read.
		return &orders.NotCancelableError{OrderID: notCancelable.OrderID}
	}
	if err != nil {
		return err
	}
	s.requestLogger(c).Info("order canceled", "order_id", order.ID, "account", order.Account)
	return c.JSON(http.StatusOK, order)
}

// cancelAllOrders cancels every pending and resting order of the caller,
// or of one instrument (?symbol=), and answers the orders it canceled. A
// failure midway is a *placement.PartialCancelError, which problemFor
// answers with the orders canceled until then.
func (s *Server) cancelAllOrders(c echo.Context) error {
	s.freshInstruments(c)
	symbol, err := s.symbolQueryOf(c.QueryParams())
	if err != nil {
		return err
	}
	canceled, err := s.placer.CancelAll(c.Request().Context(), account(c), symbol)
	var undecided *placement.CancelUndecidedError
	if errors.As(err, &undecided) {
		// Some resting orders' cancels are queued, not decided within the
		// wait: the orders canceled and those still resting.
		s.requestLogger(c).Info("orders canceled, some cancels queued", "account", account(c), "symbol", symbol,
			"count", len(canceled), "undecided", len(undecided.Orders)-len(canceled))
		return c.JSON(http.StatusAccepted, orderList{Orders: undecided.Orders})
	}
	if err != nil {
		return err
	}
	s.requestLogger(c).Info("orders canceled", "account", account(c), "symbol", symbol, "count", len(canceled))
	return c.JSON(http.StatusOK, orderList{Orders: canceled})
}

// symbolQueryOf reads DELETE /v1/orders's one optional parameter, symbol,
// as strictly as listQueryOf reads the listing's: a misspelt parameter
// would otherwise cancel every order of every instrument.
func (s *Server) symbolQueryOf(params url.Values) (string, error) {
	symbol := ""
	err := readQuery(params, []string{"symbol"}, func(_, value string, refuse func(string, ...any)) {
		if _, err := s.instruments.Lookup(value); err != nil {
			refuse("is not an instrument traded here")
			return
		}
		symbol = value
	})
	return symbol, err
}

// orderList is the body of GET /v1/orders.
type orderList struct {
	Orders     []orders.Order `json:"orders"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

func (s *Server) listOrders(c echo.Context) error {
	query, err := listQueryOf(c.QueryParams())
	if err != nil {
		return err
	}
	page, err := s.placer.List(c.Request().Context(), account(c), query)
	if err != nil {
		return err
	}
	body := orderList{Orders: page.Orders}
	if body.Orders == nil {
		body.Orders = []orders.Order{}
	}
	if page.Next != "" {
		body.NextCursor = encodeCursor(page.Next)
	}
	return c.JSON(http.StatusOK, body)
}

// The query parameters of GET /v1/orders, in the order their errors are listed.
var listParameters = []string{"limit", "cursor", "status"}

var limitPattern = regexp.MustCompile(`^[1-9][0-9]{0,2}$`)

// readQuery reads a query string strictly, as the order body is read: a
// typo such as ?stauts=filled would otherwise list every order as if it were
// filtered. It refuses every parameter not in allowed and every one given
// more than once, hands each other one to read in allowed's order, and
// returns every refusal as an invalid-query problem: each a field error with
// the empty pointer (there is no body to point into) and a reason that starts
// with "query parameter <name>".
func readQuery(params url.Values, allowed []string, read func(name, value string, refuse func(format string, args ...any))) error {
	var fields []FieldError
	refuse := func(name, format string, args ...any) {
		fields = append(fields, FieldError{Pointer: "", Reason: "query parameter " + name + " " + fmt.Sprintf(format, args...)})
	}
	takes := "no query parameters"
	if len(allowed) > 0 {
		takes = strings.Join(allowed, ", ")
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		if !slices.Contains(allowed, name) {
			refuse(name, "is not defined; this operation takes %s", takes)
		}
	}
	for _, name := range allowed {
		values, given := params[name]
		if !given {
			continue
		}
		if len(values) > 1 {
			refuse(name, "is given %d times; give it at most once", len(values))
			continue
		}
		read(name, values[0], func(format string, args ...any) { refuse(name, format, args...) })
	}
	if len(fields) > 0 {
		return &requestError{kind: kindInvalidQuery, detail: fmt.Sprintf("%d query parameter(s) refused", len(fields)), fields: fields}
	}
	return nil
}

// readLimit reads a page size, 1 to orders.MaxListLimit.
func readLimit(value string, refuse func(format string, args ...any)) (int, bool) {
	limit, err := strconv.Atoi(value)
	if !limitPattern.MatchString(value) || err != nil || limit > orders.MaxListLimit {
		refuse("must be an integer from 1 to %d", orders.MaxListLimit)
		return 0, false
	}
	return limit, true
}

// listQueryOf reads the orders listing's query parameters (readQuery).
func listQueryOf(params url.Values) (orders.ListQuery, error) {
	var query orders.ListQuery
	err := readQuery(params, listParameters, func(name, value string, refuse func(string, ...any)) {
		switch name {
		case "limit":
			if limit, ok := readLimit(value, refuse); ok {
				query.Limit = limit
			}
		case "cursor":
			after, err := decodeCursor(value)
			if err != nil {
				refuse("is not a cursor this API issued; pass next_cursor from the previous page unchanged")
				return
			}
			query.After = after
		case "status":
			status := orders.Status(value)
			if !status.Final() && !status.Resting() {
				refuse("must be one of open, partially_filled, filled, canceled, rejected; orders in the queue are not listed")
				return
			}
			query.Status = status
		}
	})
	if err != nil {
		return orders.ListQuery{}, err
	}
	return query, nil
}

// Cursors are the last listed order's (or fill's) id in base64url: opaque to
// clients, so a listing may change what a cursor holds without breaking them.
func encodeCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(id))
}

func decodeCursor(cursor string) (string, error) {
	raw, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil {
		return "", err
	}
	id := string(raw)
	if _, err := orders.ParseOrderID(id); err != nil {
		return "", err
	}
	return id, nil
}

func (s *Server) health(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

type readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readinessMaxAge is how long a readiness answer is served again before
// the probes run anew: /readyz is public, and each run of the probes costs
// Redis a PING and a fence check and PostgreSQL a ping.
const readinessMaxAge = 250 * time.Millisecond

// readinessTimeout bounds one run of the probes.
const readinessTimeout = 2 * time.Second

// readinessCache holds the last answer of the probes, so that /readyz runs
// them at most once per readinessMaxAge however often it is asked, and
// requests that come while a run is under way wait for that one.
type readinessCache struct {
	mu     sync.Mutex
	answer readiness
	at     time.Time
	// running is closed when the run under way ends; nil when none is.
	running chan struct{}
}

// readiness answers the probes' last answer, run anew when it is older
// than readinessMaxAge.
func (s *Server) readiness(c echo.Context) error {
	answer := s.ready.get(func() readiness { return s.probe(c) })
	if answer.Status != "ready" {
		return c.JSON(http.StatusServiceUnavailable, answer)
	}
	return c.JSON(http.StatusOK, answer)
}

// get returns the cached answer while it is fresh; otherwise it waits for
// the run under way (readinessTimeout bounds it), or runs the probes
// itself.
func (r *readinessCache) get(run func() readiness) readiness {
	for {
		r.mu.Lock()
		if !r.at.IsZero() && time.Since(r.at) < readinessMaxAge {
			answer := r.answer
			r.mu.Unlock()
			return answer
		}
		if running := r.running; running != nil {
			r.mu.Unlock()
			<-running
			continue
		}
		running := make(chan struct{})
		r.running = running
		r.mu.Unlock()
		answer := run()
		r.mu.Lock()
		r.answer, r.at, r.running = answer, time.Now(), nil
		r.mu.Unlock()
		close(running)
		return answer
	}
}

// probe runs every probe at once, each bounded, and names the ones down.
// The run is everyone's: the requesting client's leaving does not cut it.
func (s *Server) probe(c echo.Context) readiness {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), readinessTimeout)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(s.probes))
	for _, probe := range s.probes {
		go func() { results <- result{probe.Name, probe.Check(ctx)} }()
	}
	answer := readiness{Status: "ready", Checks: make(map[string]string, len(s.probes))}
	for range s.probes {
		r := <-results
		answer.Checks[r.name] = "ok"
		if r.err != nil {
			answer.Status = "unavailable"
			answer.Checks[r.name] = r.err.Error()
			s.requestLogger(c).Warn("not ready", "check", r.name, "err", r.err)
		}
	}
	return answer
}
