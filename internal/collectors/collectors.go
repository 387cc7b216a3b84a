// Package collectors registers Prometheus collectors that several users of
// one registry may each ask for (two workers of one queue, two
// subscriptions of one table).
package collectors

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers collector, or returns the one of its kind already
// registered; with a nil registerer it returns collector unregistered. A
// collector of another kind under the same name is a programming error and
// panics.
func Register[C prometheus.Collector](registerer prometheus.Registerer, collector C) C {
	if registerer == nil {
		return collector
	}
	err := registerer.Register(collector)
	if err == nil {
		return collector
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(err)
}
