-- Opens the balance rows an order moves that do not exist yet: its account's
-- ($1) and the venue's ($2), in the base and the quote of its instrument
-- ($3). Rows are created in one fixed order, like the locks of
-- settle_lock.sql, so two settlers creating the same new balances cannot
-- deadlock.
INSERT INTO balances (account_id, asset)
SELECT account.id, asset.code
FROM instruments i, unnest(ARRAY[$1::text, $2::text]) AS account(id), unnest(ARRAY[i.base, i.quote]) AS asset(code)
WHERE i.symbol = $3
ORDER BY account.id, asset.code
ON CONFLICT DO NOTHING
