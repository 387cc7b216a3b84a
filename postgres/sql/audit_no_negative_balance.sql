-- Audit check no_negative_balance (CheckNegative): every balance with a part
-- below zero but the external account's available, as (subject, detail).
-- The id is orders.ExternalAccount, the one the schema seeds and lets go
-- below zero.
SELECT 'balances:' || account_id || ':' || asset, format('available %s, held %s', trim_scale(available), trim_scale(held))
FROM balances
WHERE (available < 0 AND account_id <> 'ACC_0000000000000000000000000X') OR held < 0
ORDER BY account_id, asset
