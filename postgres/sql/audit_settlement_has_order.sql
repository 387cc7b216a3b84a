-- Audit check settlement_has_order (CheckOrphanSettlement): every
-- settlement transaction (of an order settled before the market) without its
-- filled order naming it, as (subject, detail).
SELECT 'txn/' || t.id, CASE
    WHEN o.id IS NULL THEN format('settles order %s, which has no row', t.order_id)
    WHEN o.status <> 'filled' THEN format('settles order %s, which is %s', t.order_id, o.status)
    ELSE format('settles order %s, which names txn/%s', t.order_id, o.ledger_transaction_id)
END
FROM ledger_transactions t LEFT JOIN orders o ON o.id = t.order_id
WHERE t.kind = 'settlement'
  AND (o.id IS NULL OR o.status <> 'filled' OR o.ledger_transaction_id IS DISTINCT FROM t.id)
ORDER BY t.id
