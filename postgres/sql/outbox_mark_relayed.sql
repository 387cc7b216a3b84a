-- Stamps the outbox rows of the entries relayed, found by their unique name
-- and version ($1, $2: parallel arrays), so an entry handed over without its
-- row id is marked too.
UPDATE outbox o SET relayed_at = now()
FROM unnest($1::text[], $2::bigint[]) AS r(name, version)
WHERE o.name = r.name AND o.version = r.version AND o.relayed_at IS NULL
