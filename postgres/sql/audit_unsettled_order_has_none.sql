-- Audit check unsettled_order_has_none (CheckUnsettledOrder): every order
-- that was not settled before the market (no ledger_transaction_id) yet has
-- a settlement transaction, as (subject, detail). Orders of the market move
-- funds by hold, release and trade transactions only.
SELECT o.id, format('%s, yet txn/%s is its settlement', o.status, t.id)
FROM orders o JOIN ledger_transactions t ON t.order_id = o.id AND t.kind = 'settlement'
WHERE o.ledger_transaction_id IS NULL
ORDER BY o.id, t.id
