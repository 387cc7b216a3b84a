-- Deletes up to $2 chunks archived before $1, oldest first, locked with
-- SKIP LOCKED so pruners in several workers take different ones: one batch,
-- so no statement holds many rows or runs long.
-- $1 timestamptz  chunks archived before it go
-- $2 int          the most deleted
-- Rows: none (the command tag counts the chunks deleted)
DELETE FROM account_event_chunks c
USING (SELECT account_id, last_sequence FROM account_event_chunks
       WHERE archived_at < $1
       ORDER BY archived_at
       LIMIT $2
       FOR UPDATE SKIP LOCKED) old
WHERE c.account_id = old.account_id AND c.last_sequence = old.last_sequence
