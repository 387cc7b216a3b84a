-- The outbox rows of one source of events, $1 (name), with versions after
-- $2 and before $3, oldest first, at most 1,000: (id, name, version,
-- payload), as the sweep reads rows. Only rows unrelayed or relayed in the
-- last $4 (postgres.EventRowsWindow, a minute, which the outbox's pruning
-- keeps relayed rows at least): a gap a relay meets in the ordinary course
-- is a row still on its way; one that goes back further is the log
-- forgetting what Redis lost, and its rows, long since announced, are not
-- announced again.
SELECT id, name, version, payload
FROM outbox
WHERE name = $1 AND version > $2 AND version < $3
    AND (relayed_at IS NULL OR relayed_at > now() - $4::interval)
ORDER BY version
LIMIT 1000
