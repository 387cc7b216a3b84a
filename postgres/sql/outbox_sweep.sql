-- Up to $2 unrelayed outbox rows older than the sweep age $1, oldest first,
-- locked with SKIP LOCKED so sweepers in several workers share the backlog
-- instead of relaying it twice. By outbox_unrelayed_since (created_at, id),
-- so a sweep reads the old rows only, not the young ones the relay is
-- carrying (migration 0019).
SELECT id, name, version, payload FROM outbox
WHERE relayed_at IS NULL AND created_at < now() - $1::interval
ORDER BY created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED
