-- Audit check client_order_id_settled_once (CheckClientOrderOnce): every
-- account's client order id under which more than one order moved money (a
-- client's retry settled twice), as (subject, detail). An order moved money
-- when it has a settlement (before the market), a hold, release or trade
-- transaction of its own, or was the maker of a trade.
SELECT 'account/' || o.account_id || '/client_order_id/' || o.client_order_id,
    format('%s orders moved money under it: %s', count(*), string_agg(o.id, ', ' ORDER BY o.id))
FROM orders o
WHERE o.ledger_transaction_id IS NOT NULL
   OR EXISTS (SELECT 1 FROM ledger_transactions t WHERE t.order_id = o.id)
   OR EXISTS (SELECT 1 FROM trades t WHERE t.maker_order_id = o.id)
GROUP BY o.account_id, o.client_order_id
HAVING count(*) > 1
ORDER BY 1
