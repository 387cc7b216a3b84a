package postgres

import (
	"regexp"
	"strings"
	"testing"
)

// An events row's order snapshot is read by scanOrder, which reads
// order_select.sql's columns: settle_events.sql spells them out, so the two
// lists must not drift.
func TestEventsSnapshotOrdersAsTheHistoryReadsThem(t *testing.T) {
	columns := func(statement string) string {
		start := strings.Index(statement, "SELECT o.id, o.client_order_id")
		end := strings.Index(statement[start:], "FROM orders o")
		if start < 0 || end < 0 {
			t.Fatalf("no order columns in %s", statement)
		}
		list := strings.TrimPrefix(statement[start:start+end], "SELECT ")
		return strings.Join(strings.Fields(list), " ")
	}
	spaces := regexp.MustCompile(`\s+`)
	events := spaces.ReplaceAllString(settleEventsSQL, " ")
	if want := strings.TrimSpace(columns(orderSelectSQL)); !strings.Contains(events, "json_build_array( "+want+" )") {
		t.Errorf("settle_events.sql does not snapshot the columns of order_select.sql:\n%s", want)
	}
}
