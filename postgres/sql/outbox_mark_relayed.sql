-- Settles the outbox rows of the entries relayed, found by their unique
-- name and version ($1, $2: parallel arrays), so an entry handed over
-- without its row id is settled too. Returns nothing.
--
-- A balance's row ("balances:...") is deleted: nothing reads it once it is
-- relayed (the consumer reads the balance itself), and a delete writes the
-- row once more where an update writes it anew with every index entry. An
-- events row ("events:...") is stamped relayed_at: a relay that finds a gap
-- in its source's log reads the rows relayed in the last minute back
-- (outbox_event_rows.sql).
WITH relayed AS (
    SELECT * FROM unnest($1::text[], $2::bigint[]) AS r(name, version)
), deleted AS (
    DELETE FROM outbox o USING relayed r
    WHERE o.name = r.name AND o.version = r.version AND o.name LIKE 'balances:%'
)
UPDATE outbox o SET relayed_at = now()
FROM relayed r
WHERE o.name = r.name AND o.version = r.version AND o.relayed_at IS NULL AND o.name LIKE 'events:%'
