// Package client is a Go client for the gateway's HTTP API, generated from
// api/openapi.yaml. Requests need an API key: pass
// WithRequestEditorFn to set `Authorization: Bearer <api key>`, or, for a
// key that requires signed requests, WithSigner (signer.go, written by
// hand) to set it and sign each request. Events (events.go, written by
// hand too) reads the event stream, which the generated code only opens.
package client

//go:generate go tool oapi-codegen -config oapi-codegen.yaml -o client.gen.go ../openapi.yaml
