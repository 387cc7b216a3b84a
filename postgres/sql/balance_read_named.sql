-- The current rows of named balances, for the cache fills of the coherence
-- consumer (job mode): one row per name, with the balance's version,
-- available and held amounts, all NULL when there is no such balance. The amounts are formatted as
-- balance_read.sql formats them (availableText in coherence_sql_test.go
-- holds the spellings to one).
-- $1..$3 are parallel arrays: name, account, asset.
SELECT r.name, b.version, round(b.available, greatest(scale(trim_scale(b.available)), a.scale))::text,
    round(b.held, greatest(scale(trim_scale(b.held)), a.scale))::text
FROM unnest($1::text[], $2::text[], $3::text[]) AS r(name, account, asset)
LEFT JOIN (balances b JOIN assets a ON a.code = b.asset) ON b.account_id = r.account AND b.asset = r.asset
ORDER BY r.name
