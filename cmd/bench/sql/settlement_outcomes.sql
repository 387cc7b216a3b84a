-- How many of the settlement phase's orders ($1, their ids) were settled and
-- how many rejected.
SELECT count(*) FILTER (WHERE status = 'settled'), count(*) FILTER (WHERE status = 'rejected')
FROM orders WHERE id = ANY($1)
