-- Audit check balance_matches_ledger (CheckBalanceLedger): every balance
-- whose total (available + held) differs from the sum of its ledger
-- entries, as (subject, detail). Only a change of a total is a ledger
-- entry (a trade, a deposit, a withdrawal): a hold or a release moves an
-- amount between the parts of one balance, which held_matches_orders
-- proves against the resting orders' holds (migration 0014; the hold and
-- release entries written before it sum to zero per balance).
SELECT 'balances:' || b.account_id || ':' || b.asset,
       format('available %s + held %s = %s, its ledger entries sum to %s',
           trim_scale(b.available), trim_scale(b.held), trim_scale(b.available + b.held),
           trim_scale(coalesce(e.total, 0)))
FROM balances b LEFT JOIN (
    SELECT account_id, asset, sum(amount) AS total FROM ledger_entries GROUP BY account_id, asset
) e USING (account_id, asset)
WHERE b.available + b.held <> coalesce(e.total, 0)
ORDER BY b.account_id, b.asset
