-- The balance rows of a settlement batch's takers in their instruments'
-- base and quote assets ($1 accounts, $2 symbols, parallel arrays), read
-- under the instrument locks but without a lock of their own: the batch
-- decides on these values, then locks every row it writes
-- (settle_lock.sql) and decides again if a taker's row changed meanwhile.
-- Returns account, asset, version, available and held (NUMERIC text); a row
-- missing from the answer does not exist (yet: settle_open.sql opens it).
-- Each row is probed by its key in a LATERAL subquery the planner cannot
-- flatten (LIMIT): as a plain join, the generic plan made before
-- statistics hashed balances whole on every read.
SELECT b.account_id, b.asset, b.version, trim_scale(b.available)::text, trim_scale(b.held)::text
FROM (SELECT DISTINCT t.account_id, a.asset
      FROM unnest($1::text[], $2::text[]) AS t(account_id, symbol)
      JOIN instruments i ON i.symbol = t.symbol
      CROSS JOIN LATERAL (VALUES (i.base), (i.quote)) AS a(asset)) AS k
CROSS JOIN LATERAL (SELECT * FROM balances b
                    WHERE b.account_id = k.account_id AND b.asset = k.asset
                    LIMIT 1) AS b
