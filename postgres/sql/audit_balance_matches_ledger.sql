-- Audit check balance_matches_ledger (CheckBalanceLedger): every balance
-- that differs from the sum of its ledger entries, as (subject, detail).
SELECT 'balances:' || b.account_id || ':' || b.asset,
       format('available %s, ledger entries sum to %s', trim_scale(b.available), trim_scale(coalesce(e.total, 0)))
FROM balances b LEFT JOIN (
    SELECT account_id, asset, sum(amount) AS total FROM ledger_entries GROUP BY account_id, asset
) e USING (account_id, asset)
WHERE b.available <> coalesce(e.total, 0)
ORDER BY b.account_id, b.asset
