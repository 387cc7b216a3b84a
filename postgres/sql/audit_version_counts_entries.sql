-- Audit check version_counts_entries (CheckBalanceVersion): every balance
-- whose version is not its number of ledger entries, as (subject, detail).
SELECT 'balances:' || b.account_id || ':' || b.asset,
       format('version %s, %s ledger entries', b.version, coalesce(e.entries, 0))
FROM balances b LEFT JOIN (
    SELECT account_id, asset, count(*) AS entries FROM ledger_entries GROUP BY account_id, asset
) e USING (account_id, asset)
WHERE b.version <> coalesce(e.entries, 0)
ORDER BY b.account_id, b.asset
