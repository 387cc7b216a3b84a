-- Moves each balance by the entries just inserted ($1 accounts, $2 assets,
-- $3 signed amounts, $4 parts, the entries' parallel arrays): available and
-- held by the sums of their parts' entries, the version by the number of
-- entries. The rows are locked already (settle_lock.sql).
UPDATE balances b
SET available = b.available + m.available, held = b.held + m.held, version = b.version + m.entries
FROM (SELECT account_id, asset,
             coalesce(sum(amount) FILTER (WHERE part = 'available'), 0) AS available,
             coalesce(sum(amount) FILTER (WHERE part = 'held'), 0) AS held,
             count(*) AS entries
      FROM unnest($1::text[], $2::text[], $3::numeric[], $4::text[]) AS e(account_id, asset, amount, part)
      GROUP BY account_id, asset) AS m
WHERE b.account_id = m.account_id AND b.asset = m.asset
