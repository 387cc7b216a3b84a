-- Audit check client_order_id_settled_once (CheckClientOrderOnce): every
-- order that moved money although another order of its account holds its
-- client order id (a client's retry settled twice), as (subject, detail).
-- The unique index keeps two holders of a pair apart; a duplicate must be
-- a refusal that moved nothing. Duplicates marked by migration 0007 (rows
-- from before the guard) are history, not reported. An order moved money
-- when it has a settlement (before the market), a hold, release or trade
-- transaction of its own, or was the maker of a trade.
SELECT o.id, format('a duplicate of %s (client order id %s) moved money', o.duplicate_of, o.client_order_id)
FROM orders o
WHERE o.duplicate_of IS NOT NULL AND NOT o.duplicate_marked_by_migration
  AND (o.ledger_transaction_id IS NOT NULL
       OR EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.order_id = o.id)
       OR EXISTS (SELECT 1 FROM trades t WHERE t.maker_order_id = o.id))
ORDER BY o.id
