package main

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
// the streams check together.
type gatewayCost struct {
	Seconds             float64 `json:"seconds"`
	CPUPerSecond        float64 `json:"gateway_cpu_per_second"`
	KeyLookupsPerSecond float64 `json:"key_lookups_per_second"`
}

func (c gatewayCost) String() string {
	return fmt.Sprintf("gateway CPU %.3f s/s, %.0f key lookups/s over %.0f s", c.CPUPerSecond, c.KeyLookupsPerSecond, c.Seconds)
}

// costMeter measures a gatewayCost from its start to its stop.
type costMeter struct {
	db      *pgxpool.Pool
	pid     int
	start   time.Time
	cpu     float64
	lookups int64
}

func startCost(ctx context.Context, db *pgxpool.Pool, pid int) (*costMeter, error) {
	m := &costMeter{db: db, pid: pid}
	var err error
	m.cpu, m.lookups, err = m.read(ctx)
	m.start = time.Now()
	return m, err
}

func (m *costMeter) read(ctx context.Context) (cpu float64, lookups int64, err error) {
	stat, err := readProcStat(m.pid)
	if err != nil {
		return 0, 0, fmt.Errorf("gateway cost: %w", err)
	}
	if err := m.db.QueryRow(ctx, keyLookupsSQL).Scan(&lookups); err != nil {
		return 0, 0, fmt.Errorf("gateway cost: key lookups: %w", err)
	}
	return stat.cpu, lookups, nil
}

func (m *costMeter) stop(ctx context.Context) (gatewayCost, error) {
	cpu, lookups, err := m.read(ctx)
	seconds := time.Since(m.start).Seconds()
	if err != nil || seconds <= 0 {
		return gatewayCost{}, err
	}
	return gatewayCost{Seconds: seconds, CPUPerSecond: (cpu - m.cpu) / seconds,
		KeyLookupsPerSecond: float64(lookups-m.lookups) / seconds}, nil
}
