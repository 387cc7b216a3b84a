-- Deletes up to $2 outbox rows relayed longer than $1 ago (by the server's
-- clock, which stamped them), oldest first through outbox_relayed_since,
-- locked with SKIP LOCKED so pruners in several workers take different
-- ones: one batch, so no statement holds many rows or runs long. Rows not
-- relayed are the sweep's and are never deleted here.
-- $1 interval  the retention: rows relayed before now() - $1 go
-- $2 int       the most deleted
-- Rows: none (the command tag counts the rows deleted)
DELETE FROM outbox
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM outbox
    WHERE relayed_at < now() - $1::interval
    ORDER BY relayed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED))
