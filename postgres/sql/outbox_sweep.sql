-- Up to $2 unrelayed outbox rows older than the sweep age $1, oldest first,
-- locked with SKIP LOCKED so sweepers in several workers share the backlog
-- instead of relaying it twice.
SELECT id, name, version, payload FROM outbox
WHERE relayed_at IS NULL AND created_at < now() - $1::interval
ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED
