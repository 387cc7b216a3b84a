// Package testkit is the test harness's folder: real Redis and PostgreSQL
// servers (testserver), spec validation of every test exchange (apitest),
// the seeded chaos run (chaos), random valid orders (ordergen), logs read
// back by tests (logbuffer) and the process's CPU time for benchmarks
// (cputime). Only tests and the harness import it; its own test checks that
// the product's packages depend on one another in one direction and never
// on the harness.
package testkit
