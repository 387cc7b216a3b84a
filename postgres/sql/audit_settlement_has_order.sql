-- Audit check settlement_has_order (CheckOrphanSettlement): every
-- settlement transaction (of an order settled before the market) without
-- the order naming it, as (subject, detail).
SELECT 'txn/' || t.id, CASE
    WHEN o.id IS NULL THEN format('settles order %s, which has no final row', t.order_id)
    ELSE format('settles order %s, which names txn/%s', t.order_id, o.ledger_transaction_id)
END
FROM ledger_transactions t LEFT JOIN orders o ON o.id = t.order_id
WHERE t.kind = 'settlement'
  AND (o.id IS NULL OR o.ledger_transaction_id IS DISTINCT FROM t.id)
ORDER BY t.id
