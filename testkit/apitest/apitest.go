// Package apitest holds the gateway to its HTTP contract, api/openapi.yaml,
// in tests: an http.RoundTripper checks every exchange a test makes against
// the spec and fails the test when the server answers something the spec does
// not allow. Tests then check behaviour, and the shape of every answer they
// provoke is checked for free.
package apitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/ordergate/ordergate/api"
)

// Option changes what Transport checks.
type Option func(*config)

type config struct {
	validateRequests bool
}

// ValidateRequests also checks each request (parameters, headers and body)
// against the spec. It is off by default because tests of the gateway's error
// handling send malformed requests on purpose; turn it on in tests that mean
// to send valid ones, so a broken fixture is not mistaken for a server bug.
func ValidateRequests() Option {
	return func(c *config) { c.validateRequests = true }
}

// Transport returns an http.RoundTripper that sends requests through base
// (a private clone of http.DefaultTransport when nil) and fails t, without
// stopping it, for every exchange that breaks the spec:
//
//   - the method and path are not an operation of the spec;
//   - the status code is not declared for the operation;
//   - a declared response header is missing or does not match its schema;
//   - the response's Content-Type is not one the spec declares for that
//     status, or the body does not match its schema;
//   - with ValidateRequests, the request does not match the spec;
//   - a message of an event stream (text/event-stream) whose data is not
//     an Event of the spec, or whose id and event fields are not its
//     sequence and type (checked as the caller reads the stream, which is
//     handed back unread: see stream.go).
//
// The response is handed back to the caller unchanged either way, so a test
// can go on to check behaviour. Authentication is left to the server: the
// spec's security requirements are never checked.
func Transport(t testing.TB, base http.RoundTripper, opts ...Option) http.RoundTripper {
	t.Helper()
	spec, err := loadSpec()
	if err != nil {
		t.Fatalf("apitest: load api/openapi.yaml: %v", err)
	}
	if base == nil {
		// A private transport, so connections kept alive for this test are
		// closed with it instead of lingering into later tests.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(tr.CloseIdleConnections)
		base = tr
	}
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	return &transport{t: t, base: base, spec: spec, cfg: cfg}
}

// Client returns an http.Client whose every exchange is checked against the
// spec, as by Transport.
func Client(t testing.TB, opts ...Option) *http.Client {
	t.Helper()
	return &http.Client{Transport: Transport(t, nil, opts...)}
}

// spec is the contract as the checks read it.
type spec struct {
	router routers.Router
	// event is the schema of an event stream message's data.
	event *openapi3.Schema
}

// loadSpec parses and validates the spec once per test binary: the router
// and document are only read afterwards, so every Transport can share them.
var loadSpec = sync.OnceValues(func() (spec, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		return spec{}, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return spec{}, fmt.Errorf("invalid spec: %w", err)
	}
	event := doc.Components.Schemas["Event"]
	if event == nil || event.Value == nil {
		return spec{}, errors.New("the spec has no Event schema")
	}
	// kin-openapi registers this decoder itself today; make sure problem
	// bodies are decoded, not reported as an unsupported content type, if a
	// later version stops doing so.
	if openapi3filter.RegisteredBodyDecoder(problemJSON) == nil {
		openapi3filter.RegisterBodyDecoder(problemJSON, openapi3filter.JSONBodyDecoder)
	}
	// Test servers listen on random ports: match on the path alone.
	doc.Servers = openapi3.Servers{{URL: "/"}}
	router, err := gorillamux.NewRouter(doc)
	return spec{router: router, event: event.Value}, err
})

const problemJSON = "application/problem+json"

type transport struct {
	t    testing.TB
	base http.RoundTripper
	spec spec
	cfg  config
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	// The body is read up front so that the server and the validator each get
	// a full copy of it.
	var reqBody []byte
	if req.Body != nil && req.Body != http.NoBody {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("apitest: read request body: %w", err)
		}
		reqBody = b
	}

	out := withBody(req, reqBody)
	resp, err := tr.base.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	if isEventStream(resp) {
		for _, v := range tr.check(withBody(req, reqBody), resp, nil) {
			tr.t.Errorf("apitest: %s %s -> %d breaks api/openapi.yaml: %v", req.Method, req.URL.RequestURI(), resp.StatusCode, v)
		}
		resp.Body = tr.checkStream(req, resp.Body)
		return resp, nil
	}
	respBody, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("apitest: read response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))

	for _, v := range tr.check(withBody(req, reqBody), resp, respBody) {
		tr.t.Errorf("apitest: %s %s -> %d breaks api/openapi.yaml: %v\nrequest body: %s\nresponse body: %s",
			req.Method, req.URL.RequestURI(), resp.StatusCode, v, excerpt(reqBody), excerpt(respBody))
	}
	return resp, nil
}

// check returns every way in which the exchange breaks the spec.
func (tr *transport) check(req *http.Request, resp *http.Response, respBody []byte) []error {
	route, pathParams, err := tr.spec.router.FindRoute(req)
	if err != nil {
		// Without an operation there is no response to check against.
		return []error{fmt.Errorf("no such operation: %w", err)}
	}

	opts := &openapi3filter.Options{
		AuthenticationFunc:      openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus:   true,
		MultiError:              true,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()},
	}
	reqInput := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: pathParams,
		Route:      route,
		Options:    opts,
	}

	var errs []error
	if tr.cfg.validateRequests {
		if err := openapi3filter.ValidateRequest(req.Context(), reqInput); err != nil {
			errs = append(errs, fmt.Errorf("request: %w", err))
		}
	}

	// A stream's body is checked as it is read (stream.go).
	opts.ExcludeResponseBody = respBody == nil
	// ValidateResponse skips the body when the spec declares no content for
	// the status; an undeclared body is still a contract break.
	if r := route.Operation.Responses.Status(resp.StatusCode); r != nil && r.Value != nil &&
		len(r.Value.Content) == 0 && len(respBody) > 0 {
		errs = append(errs, errors.New("response: the spec declares no body for this status, got one"))
	}

	respInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                opts,
	}
	if err := openapi3filter.ValidateResponse(req.Context(), respInput); err != nil {
		errs = append(errs, fmt.Errorf("response: %w", err))
	}
	return errs
}

// withBody returns a shallow copy of req that reads body from the start.
func withBody(req *http.Request, body []byte) *http.Request {
	r := req.Clone(req.Context())
	if body == nil {
		return r
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return r
}

// excerpt keeps failure messages readable when a body is large or binary.
func excerpt(b []byte) string {
	const limit = 512
	if len(b) == 0 {
		return "(empty)"
	}
	if !utf8.Valid(b) {
		return fmt.Sprintf("(%d bytes, not UTF-8)", len(b))
	}
	if len(b) <= limit {
		return string(b)
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", b[:cut], len(b))
}
