-- Audit check no_negative_balance (CheckNegative): every balance below zero
-- but the external account's, as (subject, detail). The id is
-- orders.ExternalAccount, the one the schema seeds and lets go below zero.
SELECT 'balances:' || account_id || ':' || asset, format('available %s', trim_scale(available))
FROM balances WHERE available < 0 AND account_id <> 'ACC_0000000000000000000000000X'
ORDER BY account_id, asset
