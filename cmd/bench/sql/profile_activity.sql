-- The client backends of the database $1 right now, counted by state,
-- what they wait on ('' when nothing) and, for those waiting on a lock,
-- the statement that waits (its text; '' for the others): the
-- profile's wait sample.
SELECT coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, ''),
    CASE WHEN wait_event_type = 'Lock' THEN query ELSE '' END,
    count(*)::int
FROM pg_stat_activity
WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
GROUP BY 1, 2, 3, 4
