-- Audit check version_counts_entries (CheckBalanceVersion): every balance
-- whose version is below its number of ledger entries, as (subject,
-- detail). The version rises by one with every entry on the balance and
-- with every hold or release of it (which are not ledger entries since
-- migration 0014), so it counts at least the entries.
SELECT 'balances:' || b.account_id || ':' || b.asset,
       format('version %s, %s ledger entries', b.version, coalesce(e.entries, 0))
FROM balances b LEFT JOIN (
    SELECT account_id, asset, count(*) AS entries FROM ledger_entries GROUP BY account_id, asset
) e USING (account_id, asset)
WHERE b.version < coalesce(e.entries, 0)
ORDER BY b.account_id, b.asset
