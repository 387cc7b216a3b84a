// Package api holds the HTTP contract of the gateway, openapi.yaml. The spec
// is the source of truth: the generated client in api/client is derived from
// it, and testkit/apitest holds the server to it in tests.
package api

import _ "embed"

// Spec is openapi.yaml, embedded so servers and tests load the very contract
// the client was generated from rather than a copy that can drift.
//
//go:embed openapi.yaml
var Spec []byte
