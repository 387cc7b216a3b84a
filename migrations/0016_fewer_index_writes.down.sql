CREATE INDEX ledger_entries_balance ON ledger_entries (account_id, asset);

DROP INDEX orders_ledger_transaction;
ALTER TABLE orders ADD CONSTRAINT orders_ledger_transaction_id_key UNIQUE (ledger_transaction_id);

DROP INDEX orders_sequence;
ALTER TABLE orders ADD CONSTRAINT orders_sequence_key UNIQUE (sequence);
