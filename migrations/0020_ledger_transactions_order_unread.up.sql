-- One index write fewer per ledger transaction (issue 24). Every hold,
-- release and trade transaction inserted an entry into
-- ledger_transactions_order (order_id, 0005), ≈ 0.73 per order, and no
-- query reads it: settlement names transactions by id, the settlement of
-- an order settled before the market is found by
-- ledger_transactions_one_settlement, and the one audit asking for any
-- transaction of an order (audit_client_order_id_settled_once.sql) reads
-- the whole table once, as the other audits do (a hashed semi-join, not a
-- probe per duplicate).
DROP INDEX ledger_transactions_order;
