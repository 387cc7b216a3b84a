-- Audit check balance_matches_ledger (CheckBalanceLedger): every balance
-- whose available or held part differs from the sum of its ledger entries of
-- that part (ledger_entries.part), as (subject, detail).
SELECT 'balances:' || b.account_id || ':' || b.asset,
       format('available %s, its ledger entries sum to %s; held %s, its ledger entries sum to %s',
           trim_scale(b.available), trim_scale(coalesce(e.available, 0)),
           trim_scale(b.held), trim_scale(coalesce(e.held, 0)))
FROM balances b LEFT JOIN (
    SELECT account_id, asset,
           sum(amount) FILTER (WHERE part = 'available') AS available,
           sum(amount) FILTER (WHERE part = 'held') AS held
    FROM ledger_entries GROUP BY account_id, asset
) e USING (account_id, asset)
WHERE b.available <> coalesce(e.available, 0) OR b.held <> coalesce(e.held, 0)
ORDER BY b.account_id, b.asset
