package postgres

import (
	_ "embed"
	"strings"
)

//go:embed sql/settle_owned_statement.sql
var settleOwnedStatementSQL string

// settleStatements are the texts of the statements a batch's read and write
// send that the owner's path and the locked path both run.
//
// An owner plans them generically, with sequential scans priced out
// (settle_read_plans.sql, settle_owned_fence.sql), and PostgreSQL keeps a
// prepared statement's generic plan, made under the settings of the
// transaction that first needed it, until an analysis or a schema change
// invalidates it. pgx prepares one statement per text on each
// connection, so the owner's texts are its own
// (ownedStatements): a plan the locked path or a cancel made with the
// default settings, on statistics of small tables, never serves an owner's
// batch once the tables grew (TestOwnerPlansItsOwnStatements).
type settleStatements struct {
	existing, duplicates, takers, open, lock, guard string
	insertOrders, updateMakers, writeLedger, events string
	balances                                        string
}

var (
	lockedStatements = settleStatements{
		existing: settleExistingSQL, duplicates: settleDuplicatesSQL, takers: settleTakersSQL,
		open: settleOpenSQL, lock: settleLockSQL, guard: settleGuardSQL,
		insertOrders: settleInsertOrdersSQL, updateMakers: settleUpdateMakersSQL,
		writeLedger: settleWriteLedgerSQL, events: settleEventsSQL, balances: settleBalancesSQL,
	}
	ownedStatements = lockedStatements.owned()
)

// owned is s with settle_owned_statement.sql in each text, after the
// text's leading comment: a text starts as its file does, which is how
// StatementFile names it (the bench's profile of pg_stat_statements and
// pg_stat_activity).
func (s settleStatements) owned() settleStatements {
	for _, text := range s.byFile() {
		comment, code := leadingComment(*text)
		*text = comment + settleOwnedStatementSQL + code
	}
	return s
}

// byFile is each of s's texts by the name of its file in sql/.
func (s *settleStatements) byFile() map[string]*string {
	return map[string]*string{
		"settle_existing": &s.existing, "settle_duplicates": &s.duplicates, "settle_takers": &s.takers,
		"settle_open": &s.open, "settle_lock": &s.lock, "settle_guard": &s.guard,
		"settle_insert_orders": &s.insertOrders, "settle_update_makers": &s.updateMakers,
		"settle_write_ledger": &s.writeLedger, "settle_events": &s.events, "settle_balances": &s.balances,
	}
}

// leadingComment is text's leading comment lines, each ending in a line
// break, and the rest (statementKey's and owned's).
func leadingComment(text string) (comment, rest string) {
	n := 0
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "--") || !strings.HasSuffix(line, "\n") {
			break
		}
		n += len(line)
	}
	return text[:n], text[n:]
}

// statements are the texts w's write sends: the owner's when w is an
// owner's batch.
func (w *batchWork) statements() *settleStatements {
	if w.owned != nil {
		return &ownedStatements
	}
	return &lockedStatements
}
