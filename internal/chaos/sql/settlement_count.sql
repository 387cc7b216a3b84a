-- How many settlement transactions the ledger holds.
SELECT count(*) FROM ledger_transactions WHERE kind = 'settlement'
