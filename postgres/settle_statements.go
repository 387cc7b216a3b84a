package postgres

import _ "embed"

//go:embed sql/settle_owned_statement.sql
var settleOwnedStatementSQL string

// settleStatements are the texts of the statements a batch's read and write
// send that the owner's path and the locked path both run.
//
// An owner plans them generically, with sequential scans priced out
// (settle_read_plans.sql, settle_owned_fence.sql), and PostgreSQL keeps a
// prepared statement's generic plan for the connection's life, made under
// the settings of the transaction that first needed it. pgx prepares one
// statement per text on each connection, so the owner's texts are its own
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

// owned is s with each text preceded by settle_owned_statement.sql.
func (s settleStatements) owned() settleStatements {
	for _, text := range []*string{&s.existing, &s.duplicates, &s.takers, &s.open, &s.lock, &s.guard,
		&s.insertOrders, &s.updateMakers, &s.writeLedger, &s.events, &s.balances} {
		*text = settleOwnedStatementSQL + *text
	}
	return s
}

// statements are the texts w's write sends: the owner's when w is an
// owner's batch.
func (w *batchWork) statements() *settleStatements {
	if w.owned != nil {
		return &ownedStatements
	}
	return &lockedStatements
}
