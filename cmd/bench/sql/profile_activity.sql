-- The client backends of the database $1 right now, counted by state and
-- what they wait on ('' when nothing): the profile's wait sample.
SELECT coalesce(state, ''), coalesce(wait_event_type, ''), coalesce(wait_event, ''), count(*)::int
FROM pg_stat_activity
WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
GROUP BY 1, 2, 3
