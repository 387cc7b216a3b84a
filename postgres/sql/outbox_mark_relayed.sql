-- Settles the outbox rows of the entries relayed, found by their unique
-- name and version, so an entry handed over without its row id is settled
-- too: $1, $2 (parallel arrays) the balances rows ("balances:...": a
-- settlement write's "balances:*", once every balance it lists went, or a
-- balance's own), which are deleted; $3, $4 every other row (the events
-- rows, "events:..."), which are stamped relayed_at. Returns nothing.
--
-- Nothing reads a balance's row once it is relayed (the consumer reads the
-- balance itself), and a delete writes the row once more where an update
-- writes it anew with every index entry. A relay that finds a gap in its
-- source's log reads the events rows relayed in the last minute back
-- (outbox_event_rows.sql), so those are kept.
--
-- Each entry is one probe of outbox_pkey (name, version), in a subquery per
-- entry, and its row is then settled by the ctid the probe locked (no one
-- else can move a row this statement holds, and the two lists name
-- different rows): joined instead (and with the families told apart by
-- name LIKE 'balances:%'), the planner, which sees the young outbox table
-- of a busy database as a few rows, read every row of the family or every
-- unrelayed one to pick out the hundred named (21-44 ms a call). An events
-- row's probe reads it by its key alone and tests relayed_at after (OFFSET
-- 0 keeps the test out of the subquery): with "relayed_at IS NULL" in the
-- probe the planner took outbox_unrelayed_since, whose statistics show it
-- nearly empty, and read every entry it held (the unrelayed rows and those
-- relayed since the last vacuum) for each row. A row another transaction
-- holds is skipped, not waited for: only a sweep holds rows for long
-- (outbox_sweep.sql, while it carries them to Redis), and it settles them
-- itself, or leaves them to the next sweep.
WITH deleted AS (
    DELETE FROM outbox
    WHERE ctid = ANY (ARRAY(
        SELECT (SELECT o.ctid FROM outbox o
                WHERE o.name = r.name AND o.version = r.version
                FOR UPDATE SKIP LOCKED)
        FROM unnest($1::text[], $2::bigint[]) AS r(name, version)))
)
UPDATE outbox SET relayed_at = now()
WHERE ctid = ANY (ARRAY(
    SELECT o.ctid
    FROM unnest($3::text[], $4::bigint[]) AS r(name, version)
    CROSS JOIN LATERAL (SELECT ctid, relayed_at FROM outbox
                        WHERE name = r.name AND version = r.version
                        OFFSET 0 FOR UPDATE SKIP LOCKED) AS o
    WHERE o.relayed_at IS NULL))
