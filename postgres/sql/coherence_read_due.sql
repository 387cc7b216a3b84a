-- The journal deliveries of one coherence batch that are newer than what
-- outbox_applied holds for their name, each with its balance's current
-- version, available and held amounts (NULL when the balance does not
-- exist), formatted as the balances read path (balance_read.sql) formats
-- available (availableText in coherence_sql_test.go holds the two to one
-- spelling); held alike.
-- $1..$4 are parallel arrays: name, version, account, asset.
-- Rows: name, version, available, held.
SELECT r.name, b.version, round(b.available, greatest(scale(trim_scale(b.available)), a.scale))::text,
    round(b.held, greatest(scale(trim_scale(b.held)), a.scale))::text
FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS r(name, version, account, asset)
LEFT JOIN outbox_applied j ON j.name = r.name
LEFT JOIN (balances b JOIN assets a ON a.code = b.asset) ON b.account_id = r.account AND b.asset = r.asset
WHERE j.version IS NULL OR j.version < r.version
ORDER BY r.name
