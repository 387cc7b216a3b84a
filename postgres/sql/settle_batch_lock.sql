-- Locks every balance row a settlement batch moves, in one statement and in
-- (account, asset) order: ORDER BY runs before FOR UPDATE, so the rows are
-- locked in that order. Every settlement, batched or alone, and every
-- deposit or withdrawal takes its rows in the same order, so none waits on
-- another in a cycle. The available amounts read here are the ones the funds
-- checks run on: nobody can change them before this transaction ends.
SELECT b.account_id, b.asset, b.version, trim_scale(b.available)::text
FROM balances b
WHERE (b.account_id, b.asset) IN (
    SELECT owner.id, asset.code
    FROM unnest($1::text[], $2::text[]) AS o(account_id, symbol)
    JOIN instruments i ON i.symbol = o.symbol
    CROSS JOIN LATERAL (VALUES (o.account_id), ($3::text)) AS owner(id)
    CROSS JOIN LATERAL (VALUES (i.base), (i.quote)) AS asset(code)
)
ORDER BY b.account_id, b.asset
FOR UPDATE OF b
