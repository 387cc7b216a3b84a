-- How many trades the database holds: a matching run's database is its own,
-- so every one is the run's.
SELECT count(*) FROM trades
