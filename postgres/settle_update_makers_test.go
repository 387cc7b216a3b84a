package postgres_test

import (
	"context"
	"testing"
)

// TestUpdateMakersLeavesTheSessionsPlannerSettings: settlement_update_makers
// (migration 0022) prices scans and hash and merge joins out for its own
// UPDATE only: the session that calls it, a pooled connection every later
// statement of the worker runs on, keeps the settings it had, whether the
// defaults or its own, in a transaction or not.
func TestUpdateMakersLeavesTheSessionsPlannerSettings(t *testing.T) {
	ctx := context.Background()
	db := migratedPool(t)
	const call = `SELECT settlement_update_makers($1::text[], $2::numeric[], $3::numeric[], $4::numeric[], $5::numeric[], $6::text[], $7::text[])`
	noOrders := []any{[]string{"ORD_NONE"}, []string{"1"}, []string{"1"}, []string{"0"}, []string{"0"}, []string{"filled"}, []*string{nil}}
	settings := []string{"enable_seqscan", "enable_hashjoin", "enable_mergejoin"}
	tests := []struct {
		name  string
		setup string // run on the session first
		inTx  bool
		want  string
	}{
		{name: "defaults", want: "on"},
		{name: "defaults, in a transaction", inTx: true, want: "on"},
		{name: "the session's own", setup: "SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off", want: "off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := db.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The settings must not go back to the pool either way.
			defer func() {
				_, _ = conn.Exec(ctx, "RESET ALL")
				conn.Release()
			}()
			if tt.setup != "" {
				if _, err := conn.Exec(ctx, tt.setup); err != nil {
					t.Fatal(err)
				}
			}
			if tt.inTx {
				if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, call, noOrders...); err != nil {
				t.Fatalf("settlement_update_makers: %v", err)
			}
			for _, setting := range settings {
				var value string
				if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&value); err != nil {
					t.Fatal(err)
				}
				if value != tt.want {
					t.Errorf("%s = %s after the call; want %s", setting, value, tt.want)
				}
			}
			if tt.inTx {
				if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
