-- Audit check unsettled_order_has_none (CheckUnsettledOrder): every order
-- that names no settlement (every order settled by the market) yet has a
-- settlement transaction, the venue model's, as (subject, detail). The
-- market's hold, release and trade transactions are the market audit's.
SELECT o.id, format('%s, yet txn/%s is its %s', o.status, t.id, t.kind)
FROM orders o JOIN ledger_transactions t ON t.order_id = o.id AND t.kind = 'settlement'
WHERE o.ledger_transaction_id IS NULL
ORDER BY o.id, t.id
