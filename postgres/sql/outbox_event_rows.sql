-- The outbox rows of one source of events, $1 (name), with versions after
-- $2 and before $3, oldest first: (id, name, version, payload), as the
-- sweep reads rows.
SELECT id, name, version, payload
FROM outbox
WHERE name = $1 AND version > $2 AND version < $3
ORDER BY version
