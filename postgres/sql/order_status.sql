-- The status the final row of the order $1 holds.
SELECT status FROM orders WHERE id = $1
