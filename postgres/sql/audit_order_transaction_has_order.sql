-- Audit check order_transaction_has_order (CheckOrderTransaction): every
-- hold or release transaction whose order has no row, and every trade
-- transaction that is not one trade's of the taker order it names, as
-- (subject, detail).
SELECT 'txn/' || x.id, CASE
    WHEN x.kind IN ('hold', 'release') THEN format('%s of order %s, which has no row', x.kind, x.order_id)
    WHEN t.id IS NULL THEN format('trade of order %s, which no trade names', x.order_id)
    ELSE format('trade of order %s, trade/%s has taker %s', x.order_id, t.id, t.taker_order_id)
END
FROM ledger_transactions x
LEFT JOIN orders o ON o.id = x.order_id
LEFT JOIN trades t ON t.ledger_transaction_id = x.id
WHERE (x.kind IN ('hold', 'release') AND o.id IS NULL)
   OR (x.kind = 'trade' AND (t.id IS NULL OR t.taker_order_id IS DISTINCT FROM x.order_id))
ORDER BY x.id
