-- The balances of the accounts $1 (text[]), as balance_read.sql reads one
-- account's: account, asset, available, held, version, ordered by account and
-- asset, leaving out rows that never moved (version 0). The amounts are
-- formatted as balance_read.sql formats them (availableText in
-- coherence_sql_test.go holds the spellings to one).
SELECT b.account_id, b.asset, round(b.available, greatest(scale(trim_scale(b.available)), a.scale))::text,
    round(b.held, greatest(scale(trim_scale(b.held)), a.scale))::text, b.version
FROM balances b JOIN assets a ON a.code = b.asset
WHERE b.account_id = ANY($1::text[]) AND b.version > 0
ORDER BY b.account_id, b.asset
