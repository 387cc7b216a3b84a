package postgres

import (
	"strings"
	"testing"
)

// availableText is the SQL of a balance row b's available amount, its asset
// a joined, in the form clients see and the cache stores. It keeps every
// significant decimal and at least the asset's scale: trailing zeros past
// both are what NUMERIC(38,18) pads with, and rounding to that many places is
// exact because only zeros are dropped.
const availableText = `round(b.available, greatest(scale(trim_scale(b.available)), a.scale))::text`

// heldText is availableText for the held part.
const heldText = `round(b.held, greatest(scale(trim_scale(b.held)), a.scale))::text`

// The balance cache (filled by the coherence consumer in job mode, and by
// the heal) holds balances formatted as the read path formats them; each
// SQL file spells the expression out, so they must not drift.
func TestCoherenceFormatsAvailableAsTheReadPath(t *testing.T) {
	for file, statement := range map[string]string{
		"sql/balance_read.sql":          balanceReadSQL,
		"sql/balance_read_named.sql":    balanceReadNamedSQL,
		"sql/balance_read_accounts.sql": balanceReadAccountsSQL,
	} {
		if !strings.Contains(statement, availableText) {
			t.Errorf("%s does not format available as availableText does:\n%s", file, availableText)
		}
		if !strings.Contains(statement, heldText) {
			t.Errorf("%s does not format held as heldText does:\n%s", file, heldText)
		}
	}
}
