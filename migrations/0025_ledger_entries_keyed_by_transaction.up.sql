-- ledger_entries keyed by (transaction_id, id), without a second index
-- (issue 24). Each entry took an entry in ledger_entries_pkey (id) and one
-- in ledger_entries_transaction (transaction_id): ≈ 3.7 entries an order
-- in the events phase, two index inserts each, and no statement reads an
-- entry by its id. What reads entries by their transaction (the audits'
-- joins) reads the new key's first column; the writers insert each
-- transaction's entries in one statement, its id drawn just before
-- (settle_write_ledger.sql, ledger_insert_entries.sql), so the key rises
-- and inserts go to the index's right edge as before. id stays, from its
-- identity (GENERATED ALWAYS: unique without an index of its own, as no
-- writer overrides it).
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_pkey;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_pkey PRIMARY KEY (transaction_id, id);
DROP INDEX ledger_entries_transaction;
