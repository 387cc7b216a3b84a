-- How many of the acknowledged orders ($1, their ids) have a final row.
SELECT count(*) FROM orders WHERE id = ANY($1)
