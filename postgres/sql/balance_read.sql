-- The balances of the account $1, or its balance of the asset $2 when $2 is
-- not empty, as clients see them: asset, available, held, version.
-- available and held are formatted alike, by the expression
-- balance_read_named.sql and balance_read_accounts.sql use too (availableText in coherence_sql_test.go
-- holds the two to one spelling). A row at version 0 never moved:
-- settlement inserts the rows an order would move before it locks them, and
-- a rejected order leaves them so; it is no balance the account holds.
SELECT b.asset, round(b.available, greatest(scale(trim_scale(b.available)), a.scale))::text,
    round(b.held, greatest(scale(trim_scale(b.held)), a.scale))::text, b.version
FROM balances b JOIN assets a ON a.code = b.asset
WHERE b.account_id = $1 AND ($2 = '' OR b.asset = $2) AND b.version > 0
ORDER BY b.asset
