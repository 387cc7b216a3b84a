-- Audit check unsettled_order_has_none (CheckUnsettledOrder): every order
-- that is not settled yet has a ledger transaction, as (subject, detail).
SELECT o.id, format('%s, yet txn/%s is its %s', o.status, t.id, t.kind)
FROM orders o JOIN ledger_transactions t ON t.order_id = o.id OR t.id = o.ledger_transaction_id
WHERE o.status <> 'settled'
ORDER BY o.id, t.id
