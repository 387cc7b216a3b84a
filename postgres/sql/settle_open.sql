-- Opens the balance rows $1 (accounts) × $2 (assets), parallel arrays, that
-- do not exist yet, in (account, asset) order, the order of the locks taken
-- next (settle_lock.sql), so two settlers opening the same new rows cannot
-- deadlock. An account that does not exist gets no row. A row that exists
-- is left out before the insert (rows are never deleted): ON CONFLICT alone
-- would wait for any transaction moving it, whose new row version the
-- uniqueness check finds in progress.
INSERT INTO balances (account_id, asset)
SELECT b.account_id, b.asset
FROM unnest($1::text[], $2::text[]) AS b(account_id, asset)
JOIN accounts a ON a.id = b.account_id
WHERE NOT EXISTS (SELECT 1 FROM balances x WHERE x.account_id = b.account_id AND x.asset = b.asset)
ORDER BY b.account_id, b.asset
ON CONFLICT DO NOTHING
