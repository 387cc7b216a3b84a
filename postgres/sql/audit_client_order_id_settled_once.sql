-- Audit check client_order_id_settled_once (CheckClientOrderOnce): every
-- order that moved money although another order of its account holds its
-- client order id (a client's retry settled twice), as (subject, detail).
-- The unique index keeps two holders of a pair apart; a duplicate must be
-- a refusal that moved nothing. Duplicates marked by migration 0007 (rows
-- from before the guard) are history, not reported. An order moved money
-- when it has a settlement (before the market), a hold, release or trade
-- transaction of its own, or was the maker of a trade.
-- No index reads transactions by order (migration 0020): the duplicates'
-- transactions are found in one pass over the table, hashing the
-- duplicates (few: a client's retries), not a probe or a scan per order.
WITH duplicate AS (
    SELECT o.id, o.duplicate_of, o.client_order_id, o.ledger_transaction_id
    FROM orders o
    WHERE o.duplicate_of IS NOT NULL AND NOT o.duplicate_marked_by_migration
)
SELECT o.id, format('a duplicate of %s (client order id %s) moved money', o.duplicate_of, o.client_order_id)
FROM duplicate o
WHERE o.ledger_transaction_id IS NOT NULL
   OR o.id IN (SELECT t.order_id FROM ledger_transactions t JOIN duplicate d ON d.id = t.order_id)
   OR EXISTS (SELECT 1 FROM trades t WHERE t.maker_order_id = o.id)
ORDER BY o.id
