package orders

import (
	"strings"
	"testing"
)

// The coherence lane caches balances formatted as the read path formats
// them; its SQL file spells the expression out, so the two must not drift.
func TestCoherenceFormatsAvailableAsTheReadPath(t *testing.T) {
	if !strings.Contains(coherenceReadDueSQL, availableText) {
		t.Errorf("sql/coherence_read_due.sql does not format available as availableText does:\n%s", availableText)
	}
}
