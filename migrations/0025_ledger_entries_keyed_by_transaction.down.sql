-- ledger_entries keyed by id with an index by transaction, as 0001 made it.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (id);
CREATE INDEX ledger_entries_transaction ON ledger_entries (transaction_id);
