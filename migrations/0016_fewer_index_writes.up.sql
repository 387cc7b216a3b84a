-- Fewer index writes per order (issue 24, point 4). Every order inserts a
-- row into every index of orders, and every ledger entry into every index
-- of ledger_entries; these three indexed nothing a query needs:
--
-- - orders.sequence and orders.ledger_transaction_id were UNIQUE
--   constraints, whose indexes take an entry for every row, NULL included:
--   a sequence only while the order rests, a ledger transaction only for an
--   order settled before the market (0005). Partial unique indexes keep the
--   rule for the rows that have one, and leave the rest out.
-- - ledger_entries_balance (account_id, asset): no query reads entries by
--   balance (the audits aggregate the whole table), and the foreign key to
--   balances needs it only when a balance row is deleted or rekeyed, which
--   nothing does.
ALTER TABLE orders DROP CONSTRAINT orders_sequence_key;
CREATE UNIQUE INDEX orders_sequence ON orders (sequence) WHERE sequence IS NOT NULL;

ALTER TABLE orders DROP CONSTRAINT orders_ledger_transaction_id_key;
CREATE UNIQUE INDEX orders_ledger_transaction ON orders (ledger_transaction_id) WHERE ledger_transaction_id IS NOT NULL;

DROP INDEX ledger_entries_balance;
