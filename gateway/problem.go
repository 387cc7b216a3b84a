package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/placement"
)

// Problem is an RFC 9457 problem details body.
type Problem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail,omitempty"`
	Instance  string `json:"instance,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// Code is set by the problem types that refuse what settlement would
	// reject: the order's reject_reason, so a client handles both with one
	// word (price-out-of-band: price_out_of_band).
	Code string `json:"code,omitempty"`
	// LastSequence is set by events-expired: the last event the stream
	// gave, which a client resumes after once it has read the current
	// state (0 is a stream that gave none).
	LastSequence *int64 `json:"last_sequence,omitempty"`
	// Canceled and Unconfirmed are set when DELETE /v1/orders failed
	// midway: the orders it canceled, and the ids of those it withdrew from
	// the queue whose cancel is not recorded yet.
	Canceled    []orders.Order `json:"canceled,omitempty"`
	Unconfirmed []string       `json:"unconfirmed,omitempty"`
	Errors      []FieldError   `json:"errors,omitempty"`
}

// FieldError names one refused part of a request by its JSON pointer
// (RFC 6901) into the request body; "" is the whole body.
type FieldError struct {
	Pointer string `json:"pointer"`
	Reason  string `json:"reason"`
}

const problemContentType = "application/problem+json"

// The problem kinds this API answers with; the type URI is urn:ordergate:problem:<slug>.
type problemKind struct {
	slug   string
	title  string
	status int
}

var (
	kindMalformed      = problemKind{"malformed-request", "The request body is not a valid order document", http.StatusBadRequest}
	kindValidation     = problemKind{"validation", "The order request has invalid fields", http.StatusUnprocessableEntity}
	kindPriceOutOfBand = problemKind{"price-out-of-band", "The limit price is outside the instrument's price band", http.StatusUnprocessableEntity}
	kindAmountTooLarge = problemKind{"amount-too-large", "An amount of the order is too large to settle exactly", http.StatusUnprocessableEntity}
	kindInvalidQuery   = problemKind{"invalid-query", "The query parameters are invalid", http.StatusBadRequest}
	kindInvalidHeader  = problemKind{"invalid-header", "A request header is invalid", http.StatusBadRequest}
	kindUnauthorized   = problemKind{"unauthorized", "A valid API key is required", http.StatusUnauthorized}
	// The refusals of a key that requires signed requests.
	kindSignatureRequired = problemKind{"signature-required", "This API key requires signed requests", http.StatusUnauthorized}
	kindSignatureInvalid  = problemKind{"signature-invalid", "The request signature is invalid", http.StatusUnauthorized}
	// Its type keeps the name clients already match on.
	kindSignatureSkewed   = problemKind{"signature-outside-window", "The request was signed too long before or after it arrived", http.StatusUnauthorized}
	kindSignatureReplayed = problemKind{"signature-replayed", "The signed request was received before", http.StatusUnauthorized}
	kindForbidden         = problemKind{"forbidden", "The API key's scopes do not allow this request", http.StatusForbidden}
	kindNotFound          = problemKind{"not-found", "Not found", http.StatusNotFound}
	kindConflict          = problemKind{"idempotency-conflict", "The client order id was used for a different order", http.StatusConflict}
	kindNotCancelable     = problemKind{"order-not-cancelable", "The order can no longer be canceled", http.StatusConflict}
	kindEventsExpired     = problemKind{"events-expired", "The event stream no longer holds the events after this position", http.StatusGone}
	kindTooLarge          = problemKind{"payload-too-large", "The request body is too large", http.StatusRequestEntityTooLarge}
	kindMediaType         = problemKind{"unsupported-media-type", "The request body must be application/json", http.StatusUnsupportedMediaType}
	kindMethodNotAllowed  = problemKind{"method-not-allowed", "The method is not allowed on this resource", http.StatusMethodNotAllowed}
	kindRateLimited       = problemKind{"rate-limited", "Too many requests", http.StatusTooManyRequests}
	kindTooManyStreams    = problemKind{"too-many-streams", "Too many event streams are open", http.StatusTooManyRequests}
	kindUnavailable       = problemKind{"unavailable", "A dependency of the service is unavailable; retry later", http.StatusServiceUnavailable}
	kindInternal          = problemKind{"internal", "Internal error", http.StatusInternalServerError}
)

// codePriceOutOfBand and codeAmountTooLarge are the reject reasons
// settlement writes for the same refusals (docs/market.md), the codes of
// the price-out-of-band and amount-too-large problems.
const (
	codePriceOutOfBand = "price_out_of_band"
	codeAmountTooLarge = "amount_too_large"
)

// requestError is an error the gateway itself raises about a request.
type requestError struct {
	kind   problemKind
	detail string
	fields []FieldError
}

func (e *requestError) Error() string {
	return fmt.Sprintf("%s: %s", e.kind.slug, e.detail)
}

// invalidHeader refuses a request header as readQuery refuses a query
// parameter: one error, the empty pointer, a reason naming the header.
func invalidHeader(name, format string, args ...any) *requestError {
	reason := "header " + name + " " + fmt.Sprintf(format, args...)
	return &requestError{kind: kindInvalidHeader, detail: reason, fields: []FieldError{{Pointer: "", Reason: reason}}}
}

func malformed(pointer, format string, args ...any) *requestError {
	reason := fmt.Sprintf(format, args...)
	return &requestError{kind: kindMalformed, detail: reason, fields: []FieldError{{Pointer: pointer, Reason: reason}}}
}

// problemFor is the one place where errors become HTTP answers.
func problemFor(err error) (Problem, error) {
	var (
		request       *requestError
		invalid       *orders.InvalidError
		outOfBand     *orders.PriceOutOfBandError
		tooLarge      *orders.AmountTooLargeError
		conflict      *orders.ConflictError
		notCancelable *orders.NotCancelableError
		missingScope  *orders.MissingScopeError
		httpErr       *echo.HTTPError
		notReplicated *placement.NotReplicatedError
		expired       *placement.EventsExpiredError
		partial       *placement.PartialCancelError
		tooMany       *placement.TooManyStreamsError
		problem       = func(kind problemKind, detail string) Problem {
			return Problem{Type: "urn:ordergate:problem:" + kind.slug, Title: kind.title, Status: kind.status, Detail: detail}
		}
	)
	switch {
	case errors.As(err, &partial):
		p, internal := problemFor(partial.Err)
		p.Detail += fmt.Sprintf("; before that, this call canceled %d orders (in canceled)", len(partial.Canceled))
		if len(partial.Unconfirmed) > 0 {
			p.Detail += fmt.Sprintf(" and withdrew %d from the queue without recording their cancel (in unconfirmed: GET each to learn what became of it)", len(partial.Unconfirmed))
		}
		p.Detail += "; others may still be open: call again"
		p.Canceled = partial.Canceled
		for _, order := range partial.Unconfirmed {
			p.Unconfirmed = append(p.Unconfirmed, order.ID)
		}
		return p, internal
	case errors.As(err, &request):
		p := problem(request.kind, request.detail)
		p.Errors = request.fields
		return p, nil
	case errors.As(err, &invalid):
		p := problem(kindValidation, fmt.Sprintf("%d field(s) refused", len(invalid.Fields)))
		for _, field := range invalid.Fields {
			p.Errors = append(p.Errors, FieldError{Pointer: "/" + field.Field, Reason: field.Reason})
		}
		return p, nil
	case errors.As(err, &outOfBand):
		band := fmt.Sprintf("%s to %s %s, %s%% around the reference price %s",
			outOfBand.Low, outOfBand.High, outOfBand.Quote, outOfBand.Percent, outOfBand.Reference)
		p := problem(kindPriceOutOfBand, fmt.Sprintf("price %s is outside the price band of %s: %s", outOfBand.Price, outOfBand.Symbol, band))
		p.Code = codePriceOutOfBand
		p.Errors = []FieldError{{Pointer: "/price", Reason: "must be within the price band of " + outOfBand.Symbol + ", " + band}}
		return p, nil
	case errors.As(err, &tooLarge):
		return amountTooLarge(problem(kindAmountTooLarge, ""), tooLarge), nil
	case errors.As(err, &conflict):
		p := problem(kindConflict, fmt.Sprintf("client_order_id %q is held by order %s, placed with a different request; use a new client_order_id", conflict.ClientOrderID, conflict.OrderID))
		p.Errors = []FieldError{{Pointer: "/client_order_id", Reason: "already used for a different order"}}
		return p, nil
	case errors.As(err, &notCancelable) && notCancelable.Status == "":
		// A key without the read scope is not told the order's status.
		return problem(kindNotCancelable, fmt.Sprintf("order %s is neither pending nor resting; only a pending or resting order can be canceled", notCancelable.OrderID)), nil
	case errors.As(err, &notCancelable):
		return problem(kindNotCancelable, fmt.Sprintf("order %s is %s; only a pending or resting order can be canceled", notCancelable.OrderID, notCancelable.Status)), nil
	case errors.As(err, &expired):
		detail := fmt.Sprintf("the stream holds events %d to %d", expired.First, expired.Last)
		if expired.Ahead() {
			detail = fmt.Sprintf("the stream's last event is %d, before %d (its store lost its newest events)", expired.Last, expired.After)
		}
		p := problem(kindEventsExpired, detail+"; read the current state from the REST routes, then stream after last_sequence")
		p.LastSequence = &expired.Last
		return p, nil
	case errors.As(err, &tooMany):
		who := "this API key has"
		if tooMany.Per == placement.PerAddress {
			who = "this client address has"
		}
		return problem(kindTooManyStreams, fmt.Sprintf("%s %d event streams open, the most it may have; close one first (a stream that ended frees its place at once)", who, tooMany.Most)), nil
	case errors.Is(err, placement.ErrEventStreamsClosed):
		return problem(kindUnavailable, "this gateway is shutting down; connect again"), nil
	case errors.Is(err, orders.ErrUnknownInstrument):
		return problem(kindNotFound, "no instrument with this symbol"), nil
	case errors.Is(err, orders.ErrNotFound):
		return problem(kindNotFound, "no order with this id"), nil
	case errors.Is(err, orders.ErrUnauthenticated):
		return problem(kindUnauthorized, "the API key is unknown or revoked"), nil
	case errors.As(err, &missingScope):
		return problem(kindForbidden, fmt.Sprintf("this API key has scope %s; this request needs %s", missingScope.Have, missingScope.Need)), nil
	case errors.Is(err, orders.ErrSigningUnavailable):
		// Logged where it is met, sparsely (verifySignature).
		return problem(kindUnavailable, "this gateway cannot verify the API key's signatures now (the operator is told); retry later"), nil
	case errors.As(err, &notReplicated):
		return problem(kindUnavailable, fmt.Sprintf("the order was queued but only %d of the %d Redis replicas asked for hold it yet; retry with the same client_order_id (the retry answers with the order if it survived)",
			notReplicated.Acked, notReplicated.Wanted)), err
	case errors.Is(err, orders.ErrUnavailable):
		return problem(kindUnavailable, "a dependency (Redis or PostgreSQL) did not answer in time; retry later"), err
	case errors.As(err, &httpErr):
		switch httpErr.Code {
		case http.StatusNotFound:
			return problem(kindNotFound, "no such resource"), nil
		case http.StatusMethodNotAllowed:
			return problem(kindMethodNotAllowed, "see the API description for the methods of this resource"), nil
		case http.StatusRequestEntityTooLarge:
			return problem(kindTooLarge, fmt.Sprint(httpErr.Message)), nil
		}
	}
	return problem(kindInternal, "the request failed; quote the request id when reporting it"), err
}

// amountTooLarge fills p for an order over its instrument's digit budget:
// one error at the field to change, naming the limit and what fits.
func amountTooLarge(p Problem, e *orders.AmountTooLargeError) Problem {
	limit := fmt.Sprintf("%s %s", e.Limit, e.Quote)
	where := "its limit price " + e.Price.String()
	if e.AtBandTop {
		where = e.Price.String() + ", the top of the price band, where a sell or a market order may fill"
	}
	p.Detail = fmt.Sprintf("quantity × price plus the taker fee of this %s order comes to %s %s at %s, over its max_notional of %s",
		e.Symbol, e.WorstCase, e.Quote, where, limit)
	p.Code = codeAmountTooLarge
	reason := fmt.Sprintf("must be at most %s at %s: quantity × price plus the taker fee may come to at most %s on %s",
		e.MaxQuantity, where, limit, e.Symbol)
	if e.Field == "price" {
		reason = fmt.Sprintf("must be at most %s: one lot at a higher price comes to more than %s on %s, quantity × price plus the taker fee",
			e.MaxPrice, limit, e.Symbol)
	}
	p.Errors = []FieldError{{Pointer: "/" + e.Field, Reason: reason}}
	return p
}

// handleError is echo's error handler: every error leaves as problem+json.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	p, internal := problemFor(err)
	p.RequestID = requestID(c)
	p.Instance = c.Request().URL.Path
	logger := s.requestLogger(c)
	if internal != nil {
		logger.Error("request failed", "status", p.Status, "err", internal)
	}
	header := c.Response().Header()
	switch p.Status {
	case http.StatusUnauthorized:
		header.Set("WWW-Authenticate", `Bearer realm="ordergate"`)
	case http.StatusServiceUnavailable:
		header.Set("Retry-After", "1")
	}
	header.Set(echo.HeaderContentType, problemContentType)
	c.Response().WriteHeader(p.Status)
	if c.Request().Method == http.MethodHead {
		return
	}
	if err := json.NewEncoder(c.Response()).Encode(p); err != nil {
		logger.Debug("write problem", "err", err)
	}
}
