package api_test

import (
	"strconv"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/ordergate/ordergate/api"
)

func loadSpec(t testing.TB) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.Spec)
	if err != nil {
		t.Fatalf("parse openapi.yaml: %v", err)
	}
	// Validate also checks every example against its schema.
	if err := doc.Validate(t.Context()); err != nil {
		t.Fatalf("openapi.yaml is invalid: %v", err)
	}
	return doc
}

func TestSpecIsValid(t *testing.T) {
	loadSpec(t)
}

// The conventions below are promised to clients once, in the spec's
// description, so each operation has to keep them; these checks catch an
// operation or response added without them.
func TestSpecConventions(t *testing.T) {
	doc := loadSpec(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, ref := range op.Responses.Map() {
				name := method + " " + path + " " + code
				resp := ref.Value
				if h := resp.Headers["X-Request-Id"]; h == nil || !h.Value.Required {
					t.Errorf("%s: does not declare the required header X-Request-Id", name)
				}
				status, err := strconv.Atoi(code)
				if err != nil {
					t.Errorf("%s: want an explicit status code, so undeclared ones fail apitest", name)
					continue
				}
				// Readiness reports its checks in the same shape whatever the
				// outcome; every other failure is a problem.
				if status < 400 || op.OperationID == "getReadiness" {
					continue
				}
				if len(resp.Content) != 1 || resp.Content.Get("application/problem+json") == nil {
					t.Errorf("%s: an error must be application/problem+json only", name)
				}
				if status == 401 && resp.Headers["WWW-Authenticate"] == nil {
					t.Errorf("%s: a 401 must declare WWW-Authenticate", name)
				}
			}
		}
	}
}
