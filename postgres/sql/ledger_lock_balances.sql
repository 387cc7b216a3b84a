-- Locks both balances of a transfer in the asset $1 (of the accounts $2 and
-- $3) in one fixed order so concurrent transfers cannot deadlock, and reads
-- what they hold.
SELECT account_id, available::text FROM balances
WHERE asset = $1 AND account_id IN ($2, $3) ORDER BY account_id FOR NO KEY UPDATE
