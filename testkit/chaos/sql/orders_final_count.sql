-- How many of the acknowledged orders ($1, their ids) have a row: final, or
-- resting in the book (a worker took them either way).
SELECT count(*) FROM orders WHERE id = ANY($1)
