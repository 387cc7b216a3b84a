-- How many client backends of the database $1 there are, but the one $2.
SELECT count(*)::int FROM pg_stat_activity
WHERE datname = $1 AND backend_type = 'client backend' AND pid <> $2
