-- The index by order of migration 0005.
CREATE INDEX ledger_transactions_order ON ledger_transactions (order_id) WHERE order_id IS NOT NULL;
