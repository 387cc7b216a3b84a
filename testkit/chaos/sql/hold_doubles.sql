-- Every order whose hold transactions are not what settling it once leaves:
-- more than one (a redelivery held its funds again), or none for an order
-- that rests or filled (every taken order holds before it matches), as
-- (order id, status, hold transactions).
SELECT o.id, o.status, count(t.id)
FROM orders o LEFT JOIN ledger_transactions t ON t.order_id = o.id AND t.kind = 'hold'
GROUP BY o.id, o.status
HAVING count(t.id) > 1 OR (count(t.id) = 0 AND o.status IN ('open', 'partially_filled', 'filled'))
ORDER BY o.id
