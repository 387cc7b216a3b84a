package main

import (
	"context"
	_ "embed"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/internal/metricsserver"
)

//go:embed sql/key_lookups.sql
var keyLookupsSQL string

// idleStreamsWindow is how long the events phase leaves its streams idle
// to measure what they cost the gateway with no order flowing.
const idleStreamsWindow = 10 * time.Second

// gatewayCost is what the gateway process spent over a window: CPU
// seconds a second (all its threads), and the API key lookups a second
// PostgreSQL served (the streams' key checks, and requests' keys whose
// cached copy expired), each a query of one key or of the several keys
// the streams check together. RequestKeyLookupsPerSecond are those a
// request waited for, by the gateway's api_key_lookups_total{reason="request"}
// (a gateway without the series fails the phase).
type gatewayCost struct {
	Seconds                    float64 `json:"seconds"`
	CPUPerSecond               float64 `json:"gateway_cpu_per_second"`
	KeyLookupsPerSecond        float64 `json:"key_lookups_per_second"`
	RequestKeyLookupsPerSecond float64 `json:"request_key_lookups_per_second"`
}

func (c gatewayCost) String() string {
	return fmt.Sprintf("gateway CPU %.3f s/s, %.0f key lookups/s (%.0f on requests' path) over %.0f s",
		c.CPUPerSecond, c.KeyLookupsPerSecond, c.RequestKeyLookupsPerSecond, c.Seconds)
}

// costMeter measures a gatewayCost from its start to its stop.
type costMeter struct {
	db      *pgxpool.Pool
	gateway gatewayProcess
	start   time.Time
	cpu     float64
	lookups int64
	// requestLookups is the gateway's count of lookups on requests' path.
	requestLookups float64
}

func startCost(ctx context.Context, db *pgxpool.Pool, gateway gatewayProcess) (*costMeter, error) {
	m := &costMeter{db: db, gateway: gateway}
	var err error
	m.cpu, m.lookups, m.requestLookups, err = m.read(ctx)
	m.start = time.Now()
	return m, err
}

func (m *costMeter) read(ctx context.Context) (cpu float64, lookups int64, requestLookups float64, err error) {
	stat, err := readProcStat(m.gateway.pid)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("gateway cost: %w", err)
	}
	if err := m.db.QueryRow(ctx, keyLookupsSQL).Scan(&lookups); err != nil {
		return 0, 0, 0, fmt.Errorf("gateway cost: key lookups: %w", err)
	}
	const requestLookupsName = "api_key_lookups_total"
	counters, err := metricsserver.Counters(ctx, http.DefaultClient, m.gateway.metrics, `reason="request"`, requestLookupsName)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("gateway cost: %w", err)
	}
	requestLookups, ok := counters[requestLookupsName]
	if !ok {
		return 0, 0, 0, fmt.Errorf("gateway cost: no %s{reason=\"request\"} at %s", requestLookupsName, m.gateway.metrics)
	}
	return stat.cpu, lookups, requestLookups, nil
}

func (m *costMeter) stop(ctx context.Context) (gatewayCost, error) {
	cpu, lookups, requestLookups, err := m.read(ctx)
	seconds := time.Since(m.start).Seconds()
	if err != nil || seconds <= 0 {
		return gatewayCost{}, err
	}
	return gatewayCost{Seconds: seconds, CPUPerSecond: (cpu - m.cpu) / seconds,
		KeyLookupsPerSecond:        float64(lookups-m.lookups) / seconds,
		RequestKeyLookupsPerSecond: (requestLookups - m.requestLookups) / seconds}, nil
}
