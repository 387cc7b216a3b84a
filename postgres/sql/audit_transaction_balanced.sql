-- Audit check transaction_balanced (CheckTransactionBalanced): every ledger
-- transaction whose entries in an asset do not sum to zero, as (subject,
-- detail).
SELECT 'txn/' || transaction_id, format('%s entries sum to %s', asset, trim_scale(sum(amount)))
FROM ledger_entries GROUP BY transaction_id, asset HAVING sum(amount) <> 0
ORDER BY transaction_id, asset
